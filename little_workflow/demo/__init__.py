"""``little-workflow demo``'s workflow, with its step functions, model and tool.

The reviewers are real ``agent`` steps: each is a harness session on the ``scripted``
provider that asks for one tool call (``check_references``), then answers with a score,
so a kill inside a session exercises both kinds of memoization, committed steps and
committed model and tool calls. The other steps are plain Python functions.

Every step function, model call and tool call appends a line to ``calls.log`` in the
directory named by ``LITTLE_WORKFLOW_DEMO_DIR`` (before it returns, fsynced), so the demo
can count, from outside the process it kills, what ran before the kill and what ran
again after it. ``LITTLE_WORKFLOW_DEMO_SPEED`` scales the simulated latencies.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from little_workflow.harness import ModelSlot, ToolContext, tool
from little_workflow.harness.models import ModelRequest, ScriptReply, scripted
from little_workflow.runtime import RuntimeSetup, StepContext

__all__ = [
    "CANDIDATES",
    "WORKFLOW",
    "check_references",
    "fetch_candidates",
    "judge",
    "review",
    "revise",
    "setup",
    "summarize",
]

#: The demo workflow file.
WORKFLOW = Path(__file__).with_name("review.yaml")

#: What each call "costs" at speed 1, in seconds: a model call, a tool call, a step.
SECONDS = {"model": 0.5, "tool": 0.2, "step": 0.3}


def _record(kind: str, key: str) -> None:
    folder = os.environ.get("LITTLE_WORKFLOW_DEMO_DIR")
    if folder:
        with open(Path(folder) / "calls.log", "a", encoding="utf-8") as handle:
            handle.write(f"{kind} {key}\n")
            handle.flush()
            os.fsync(handle.fileno())


async def _think(kind: str) -> None:
    scale = float(os.environ.get("LITTLE_WORKFLOW_DEMO_SPEED", "1"))
    if scale > 0:
        await asyncio.sleep(SECONDS[kind] * scale)


CANDIDATES = [
    {"id": "ada", "name": "Ada", "years": 9, "skills": ["compilers", "math"]},
    {"id": "grace", "name": "Grace", "years": 14, "skills": ["compilers", "leadership"]},
    {"id": "linus", "name": "Linus", "years": 6, "skills": ["kernels", "git"]},
    {"id": "barbara", "name": "Barbara", "years": 11, "skills": ["distributed", "math"]},
]
_REFERENCES = {"ada": 3, "grace": 4, "linus": 2, "barbara": 3}


async def fetch_candidates(role: str, ctx: StepContext) -> dict[str, Any]:
    """A step: look up the candidates for ``role``."""
    _record("step", ctx.step_path)
    await _think("step")
    return {"role": role, "candidates": CANDIDATES}


@tool
async def check_references(candidate_id: str, ctx: ToolContext) -> dict[str, Any]:
    """Check a candidate's references.

    Args:
        candidate_id: The candidate's id.
    """
    del ctx  # a tool may take its context; this one needs nothing from it
    _record("tool", candidate_id)
    await _think("tool")
    return {"candidate_id": candidate_id, "good_references": _REFERENCES.get(candidate_id, 0)}


def _prompt(request: ModelRequest) -> dict[str, Any]:
    first = next(message.text or "" for message in request.messages if message.role == "user")
    prompt: dict[str, Any] = json.loads(first)
    return prompt


def _answer(request: ModelRequest) -> ScriptReply:
    # A function of the conversation alone: a call re-issued after a kill gets the
    # answer the killed process got.
    prompt = _prompt(request)
    candidate, role = prompt["candidate"], prompt["role"]
    results = [message.text or "" for message in request.messages if message.role == "tool"]
    if not results:
        call = {"name": "check_references", "arguments": {"candidate_id": candidate["id"]}}
        return {"tool_calls": [call]}
    references = json.loads(results[-1])["good_references"]
    fit = sum(3 for skill in candidate["skills"] if skill in role)
    score = candidate["years"] * 5 + fit + 2 * references
    return json.dumps({"id": candidate["id"], "name": candidate["name"], "score": score})


async def review(request: ModelRequest) -> ScriptReply:
    """The ``reviewer`` slot's scripted model: check references first, then score."""
    turn = sum(1 for message in request.messages if message.role == "assistant")
    _record("model", f"{_prompt(request)['candidate']['id']}#{turn}")
    await _think("model")
    return _answer(request)


def setup() -> RuntimeSetup:
    """The demo's model slot (a scripted reviewer) and its tool (``--setup`` names it)."""
    return RuntimeSetup(
        model_slots={"reviewer": ModelSlot(provider=scripted(review), model="scripted-reviewer")},
        tools=[check_references],
    )


async def summarize(scores: list[dict[str, Any]], ctx: StepContext) -> dict[str, Any]:
    """A step: rank the scored candidates."""
    _record("step", ctx.step_path)
    await _think("step")
    ranked = sorted(scores, key=lambda entry: entry["score"], reverse=True)
    return {"ranking": [entry["name"] for entry in ranked], "best": ranked[0]}


async def judge(summary: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    """A decision: accept the shortlist, or ask for one revision first."""
    _record("step", ctx.step_path)
    await _think("step")
    if (ctx.visit or 0) == 0:
        return {"route": "revise", "output": {"verdict": "revise", "note": "check references"}}
    return {"route": "accept", "output": {"verdict": "accept", "hire": summary["best"]["name"]}}


async def revise(note: str, ctx: StepContext) -> str:
    """A step: act on the judge's note."""
    _record("step", ctx.step_path)
    await _think("step")
    return f"done: {note}"
