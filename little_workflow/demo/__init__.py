"""The kill-and-resume demo's workflow and step functions (``little-workflow demo``).

The step functions stand in for model and tool calls: each takes a little time (as a
model call would) and records the call in ``calls.log`` in the directory named by
``LITTLE_WORKFLOW_DEMO_DIR``, so the demo can count, from outside the process it kills,
what ran before the kill and what ran again after it.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from little_workflow.runtime import StepContext

__all__ = ["WORKFLOW", "fetch_candidates", "judge", "revise", "score_candidate", "summarize"]

#: The demo workflow file.
WORKFLOW = Path(__file__).with_name("review.yaml")


def _record(ctx: StepContext, kind: str) -> None:
    folder = os.environ.get("LITTLE_WORKFLOW_DEMO_DIR")
    if folder:
        with open(Path(folder) / "calls.log", "a", encoding="utf-8") as handle:
            handle.write(f"{kind} {ctx.run_id} {ctx.step_path}\n")
            handle.flush()
            os.fsync(handle.fileno())


async def _think(seconds: float) -> None:
    scale = float(os.environ.get("LITTLE_WORKFLOW_DEMO_SPEED", "1"))
    if scale > 0:
        await asyncio.sleep(seconds * scale)


CANDIDATES = [
    {"id": "ada", "name": "Ada", "years": 9, "skills": ["compilers", "math"]},
    {"id": "grace", "name": "Grace", "years": 14, "skills": ["compilers", "leadership"]},
    {"id": "linus", "name": "Linus", "years": 6, "skills": ["kernels", "git"]},
    {"id": "barbara", "name": "Barbara", "years": 11, "skills": ["distributed", "math"]},
]


async def fetch_candidates(role: str, ctx: StepContext) -> dict[str, Any]:
    """A tool call: look up the candidates for ``role``."""
    _record(ctx, "tool")
    await _think(0.3)
    return {"role": role, "candidates": CANDIDATES}


async def score_candidate(candidate: dict[str, Any], role: str, ctx: StepContext) -> dict[str, Any]:
    """A model call: score one candidate for the role (deterministic here)."""
    _record(ctx, "model")
    await _think(0.9)
    fit = sum(3 for skill in candidate["skills"] if skill in role)
    score = candidate["years"] * 5 + fit + len(candidate["name"])
    return {"id": candidate["id"], "name": candidate["name"], "score": score}


async def summarize(scores: list[dict[str, Any]], ctx: StepContext) -> dict[str, Any]:
    """A model call: rank the scored candidates."""
    _record(ctx, "model")
    await _think(0.6)
    ranked = sorted(scores, key=lambda entry: entry["score"], reverse=True)
    return {"ranking": [entry["name"] for entry in ranked], "best": ranked[0]}


async def judge(summary: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    """A model call: accept the shortlist, or ask for one revision first."""
    _record(ctx, "model")
    await _think(0.6)
    if (ctx.visit or 0) == 0:
        return {"route": "revise", "output": {"verdict": "revise", "note": "check references"}}
    return {"route": "accept", "output": {"verdict": "accept", "hire": summary["best"]["name"]}}


async def revise(note: str, ctx: StepContext) -> str:
    """A tool call: act on the judge's note."""
    _record(ctx, "tool")
    await _think(0.3)
    return f"done: {note}"
