"""A scripted model for the planner, fixer and decider roles, and counting step callables.

The model is one script *function* of the request (the slot's model name, the first user
message, how many answers the conversation holds), so a process that restarts and
re-issues a call gets the answer the first process got:

* ``planner-model`` reads the goal (``Goal: <goal>`` in the first user message):
  ``score`` answers an invalid plan, then (told why) ``VALID_PLAN``; ``fenced`` answers
  ``VALID_PLAN`` in a json fence; ``look`` calls ``lookup`` first; ``never`` never
  answers JSON.
* ``fixer-model`` reads the failed step's id from its prompt (the JSON the fixer gets):
  ``divide``/``div`` correct ``b: 0`` to ``b: 2``; ``hopeless`` gives up; ``garbled``
  answers prose; ``stubborn`` asks for another try with ``a`` one higher and ``b``
  still 0.
* ``judge-model`` answers by its prompt: ``Route plain`` a bare route name, ``Route
  scored`` a route with an output, ``Route bogus`` a route that does not exist, ``Judge:
  draft v<n>`` ``revise`` for v0 and ``accept`` after.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import Tool, tool
from little_workflow.harness.models import ModelRequest, ScriptedProvider, scripted
from little_workflow.lwir import Workflow
from little_workflow.runtime import Runtime, StepContext
from tests.runtime.agent_flows import Tools
from tests.runtime.support import runtime

PLANNER_MODEL, FIXER_MODEL, JUDGE_MODEL = "planner-model", "fixer-model", "judge-model"

INVALID_PLAN: dict[str, Any] = {
    "lwir": 1,
    "name": "planned",
    "steps": [{"id": "s", "kind": "tool"}],
}
VALID_PLAN: dict[str, Any] = {
    "lwir": 1,
    "name": "planned",
    "steps": [
        {"id": "s", "kind": "tool", "tool": "score", "with": {"years": "${input.years}"}},
        {"id": "out", "kind": "output", "value": "${steps.s.output}"},
    ],
}
LOOKED_UP_PLAN: dict[str, Any] = {
    "lwir": 1,
    "name": "looked-up",
    "steps": [
        {"id": "s", "kind": "tool", "tool": "score", "with": {"years": 7}},
        {"id": "out", "kind": "output", "value": "${steps.s.output}"},
    ],
}


def _first_user(request: ModelRequest) -> str:
    return next((m.content or "" for m in request.messages if m.role == "user"), "")


def _planner(request: ModelRequest, turns: int) -> Any:
    goal = _first_user(request).partition("\n")[0].removeprefix("Goal: ")
    if goal == "score":
        return json.dumps(INVALID_PLAN if turns == 0 else VALID_PLAN)
    if goal == "fenced":
        return f"```json\n{json.dumps(VALID_PLAN, indent=2)}\n```"
    if goal == "look":
        if turns == 0:
            return {
                "tool_calls": [{"id": "c_look", "name": "lookup", "arguments": {"name": "Ada"}}]
            }
        return json.dumps(LOOKED_UP_PLAN)
    return "I cannot plan that."


def _fixer(request: ModelRequest) -> Any:
    prompt = json.loads(_first_user(request))
    step_id, arguments = prompt["step"]["id"], prompt["arguments"]
    if step_id in ("divide", "div") and arguments.get("b") == 0:
        return json.dumps({"action": "retry", "with": {**arguments, "b": 2}})
    if step_id == "garbled":
        return "Try dividing by two?"
    if step_id == "stubborn":
        return json.dumps({"action": "retry", "with": {"a": arguments["a"] + 1, "b": 0}})
    return json.dumps({"action": "give_up", "reason": "b must not be zero"})


def _judge(request: ModelRequest) -> Any:
    prompt = _first_user(request)
    if prompt == "Route plain":
        return "  accept\n"
    if prompt == "Route scored":
        return '{"route": "accept", "output": {"score": 9}}'
    if prompt.startswith("Judge: draft v"):
        return "revise" if prompt.endswith("v0") else "accept"
    return "maybe later"


def script(request: ModelRequest) -> Any:
    """The answer to ``request`` (see the module docstring)."""
    turns = sum(1 for message in request.messages if message.role == "assistant")
    if request.model == PLANNER_MODEL:
        return _planner(request, turns)
    if request.model == FIXER_MODEL:
        return _fixer(request)
    if request.model == JUDGE_MODEL:
        return _judge(request)
    raise AssertionError(f"no script for model {request.model!r}")


def role_slots(
    provider: ScriptedProvider, *, judge: str = JUDGE_MODEL, drop: str | None = None
) -> dict[str, ModelSlot]:
    """The ``planner``, ``fixer`` and ``judge`` slots on one scripted provider."""
    slots = {
        "planner": ModelSlot(provider=provider, model=PLANNER_MODEL),
        "fixer": ModelSlot(provider=provider, model=FIXER_MODEL),
        "judge": ModelSlot(provider=provider, model=judge),
    }
    if drop is not None:
        del slots[drop]
    return slots


class Calls:
    """Step callables that record the arguments they were called with."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

        def divide(a: float, b: float, ctx: StepContext) -> float:
            self.calls.append((ctx.step_path, {"a": a, "b": b}))
            return a / b

        def write(ctx: StepContext) -> str:
            self.calls.append((ctx.step_path, {}))
            return f"draft v{ctx.visit}"

        def echo(value: Any, ctx: StepContext) -> Any:
            self.calls.append((ctx.step_path, {"value": value}))
            return value

        def div(a: float, b: float) -> float:
            """Divide a by b.

            Args:
                a: The dividend.
                b: The divisor.
            """
            self.calls.append(("div", {"a": a, "b": b}))
            return a / b

        self.functions: dict[str, Callable[..., Any]] = {
            "roles:divide": divide,
            "roles:write": write,
            "roles:echo": echo,
        }
        self.div: Tool[..., Any] = tool(div)

    def arguments(self) -> list[dict[str, Any]]:
        return [arguments for _, arguments in self.calls]


def make(
    data_dir: Path,
    *,
    judge: str = JUDGE_MODEL,
    drop: str | None = None,
    workflows: tuple[Workflow, ...] = (),
    **options: Any,
) -> tuple[Runtime, ScriptedProvider, Tools, Calls]:
    """A runtime with the scripted roles, fresh counting tools and callables."""
    provider = scripted(script)
    tools, calls = Tools(), Calls()
    rt = runtime(
        data_dir,
        functions=calls.functions,
        model_slots=role_slots(provider, judge=judge, drop=drop),
        tools=[*tools.all(), calls.div],
        workflows=workflows,
        import_functions=False,
        **options,
    )
    return rt, provider, tools, calls
