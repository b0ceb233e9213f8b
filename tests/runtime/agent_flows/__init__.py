"""Agent workflows, tools and a scripted model for the Layer C and drift tests.

The model is a script *function* of the request (the model name, the first user
message, how many answers the conversation already holds), so a process that restarts
mid-session and re-issues a call gets the answer the first process got. The prompt
picks the conversation: ``Score <who>`` looks up and scores, ``JSON <who>`` answers
with a fenced JSON object (``Raw <who>``: without the fence), ``Garbled <who>``
answers text where JSON was asked for, ``Check <who>`` calls a tool that always fails
and reports its error.

In-process tests count calls with ``Tools.calls`` and ``ScriptedProvider.calls``; a
child process started with ``--setup tests.runtime.agent_flows:setup`` appends a line
per call to the files named by ``LW_TEST_MODEL_CALLS`` and ``LW_TEST_TOOL_CALLS``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import Tool, tool
from little_workflow.harness.models import ModelRequest, ScriptedProvider, scripted
from little_workflow.lwir import AgentStep, OutputStep, RetryPolicy, Workflow
from little_workflow.runtime import RuntimeSetup
from tests.runtime.support import Crash

HERE = Path(__file__).resolve().parent
ORCHESTRATE = HERE / "orchestrate.yaml"
SCORE_ONE = HERE / "score_one.yaml"

WORKER_MODEL = "worker-model"
ORCHESTRATOR_MODEL = "orchestrator-model"


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]}


def script(request: ModelRequest) -> Any:
    """The model's answer to ``request`` (see the module docstring)."""
    turns = sum(1 for message in request.messages if message.role == "assistant")
    last = request.messages[-1].content or ""
    prompt = next((m.content or "" for m in request.messages if m.role == "user"), "")
    kind, _, who = prompt.partition(" ")
    _append("LW_TEST_MODEL_CALLS", f"{request.model} {turns}")
    if request.model.startswith("orchestrator"):
        if turns == 0:
            return _call(
                "call_start", "start_workflow", {"workflow": "score-one", "input": {"who": who}}
            )
        return f"Shortlist ready: {last}"
    if kind == "Check":
        return _call("call_check", "check", {"name": who}) if turns == 0 else f"Check: {last}"
    if turns == 0:
        return _call("call_lookup", "lookup", {"name": who})
    if turns == 1:
        return _call("call_score", "score", {"years": json.loads(last)["years"]})
    if kind == "JSON":
        return f'```json\n{{"who": "{who}", "score": {last}}}\n```'
    if kind == "Raw":
        return f'{{"who": "{who}", "score": {last}}}'
    if kind == "Garbled":
        return f"{who} scores {last}, more or less"
    return f"{who} scores {last}"


class Tools:
    """``lookup``, ``score`` and ``check`` (which always fails), counting their calls.

    ``crash_at`` names a tool that raises ``Crash`` instead of running: the process's
    work stops there, as if killed, with only the events committed so far in the log.
    Every ``Tools()`` makes tools with the same schemas, so a runtime built anew (as
    after a restart) offers the tools its runs started with.
    """

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self.crash_at: str | None = None

        def lookup(name: str) -> dict[str, Any]:
            """Look a candidate up by name.

            Args:
                name: The candidate's name.
            """
            self._called("lookup", name)
            return {"name": name, "years": len(name) + 4}

        def score(years: int) -> int:
            """Score a candidate's years of experience.

            Args:
                years: Years of experience.
            """
            self._called("score", years)
            return years * 10

        def check(name: str) -> str:
            """Check a candidate's references.

            Args:
                name: The candidate's name.
            """
            self._called("check", name)
            raise LookupError(f"no references for {name}")

        self.lookup: Tool[..., Any] = tool(lookup)
        self.score: Tool[..., Any] = tool(score)
        self.check: Tool[..., Any] = tool(check)

    def _called(self, name: str, argument: Any) -> None:
        if self.crash_at == name:
            raise Crash(name)
        self.calls.append((name, argument))
        _append("LW_TEST_TOOL_CALLS", f"{name} {json.dumps(argument)}")

    def all(self) -> list[Tool[..., Any]]:
        return [self.lookup, self.score, self.check]

    def count(self, name: str) -> int:
        return sum(1 for called, _ in self.calls if called == name)


def lookup_v2(name: str, verbose: bool = False) -> dict[str, Any]:
    """Look a candidate up by name.

    Args:
        name: The candidate's name.
        verbose: Say more.
    """
    return {"name": name, "years": len(name) + 4}


def slots(
    provider: ScriptedProvider | None = None,
    *,
    worker: str = WORKER_MODEL,
    orchestrator: str = ORCHESTRATOR_MODEL,
) -> dict[str, ModelSlot]:
    """The ``worker`` and ``orchestrator`` slots, served by one scripted provider."""
    provider = provider or scripted(script)
    return {
        "worker": ModelSlot(provider=provider, model=worker),
        "orchestrator": ModelSlot(provider=provider, model=orchestrator),
    }


def worker_workflow(
    *,
    prompt: str = "Score ${input.who}",
    output: str = "text",
    tools: tuple[str, ...] = ("lookup", "score"),
    retry: RetryPolicy | None = None,
    name: str = "score-one",
) -> Workflow:
    """One worker agent step over ``tools``, then its output."""
    return Workflow(
        name=name,
        steps=[
            AgentStep.model_validate(
                {
                    "id": "worker",
                    "kind": "agent",
                    "slot": "worker",
                    "instructions": "You score candidates.",
                    "prompt": prompt,
                    "tools": tools,
                    "output": output,
                    "retry": (retry or RetryPolicy()).model_dump(by_alias=True),
                }
            ),
            OutputStep(id="out", value="${steps.worker.output}"),
        ],
    )


def orchestrator_workflow() -> Workflow:
    """An orchestrator that may start the registered ``score-one``."""
    return Workflow(
        name="orchestrate",
        steps=[
            AgentStep(
                id="boss",
                role="orchestrator",
                slot="orchestrator",
                instructions="You build shortlists by starting workflows.",
                prompt="Score ${input.who}",
                workflows=("score-one",),
            ),
            OutputStep(id="out", value="${steps.boss.output}"),
        ],
    )


def setup() -> RuntimeSetup:
    """For a child process: both slots on the scripted model, the counting tools.

    ``LW_TEST_WORKER_MODEL`` names another model for the worker slot (a drift).
    """
    worker = os.environ.get("LW_TEST_WORKER_MODEL", WORKER_MODEL)
    return RuntimeSetup(model_slots=slots(worker=worker), tools=Tools().all())
