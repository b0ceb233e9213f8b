"""Module-level targets for the subprocess tests: what a child imports by reference."""

from __future__ import annotations

from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.harness import AgentHarness, ModelSlot, agent, run_code, sequence
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.platform import ChildContext


async def double(child: ChildContext, input: Any) -> JsonValue:
    """A code target: emits a frame, returns twice its input."""
    await child.emit({"seen": input})
    return int(input) * 2


def describe(child: ChildContext, input: Any) -> JsonValue:
    """A sync code target that reports what the child knows."""
    return {
        "input": input,
        "step": child.step_id,
        "execution": child.execution_id,
        "cwd": child.cwd,
        "metadata": child.metadata,
    }


def explode(child: ChildContext, input: Any) -> JsonValue:
    """A target that fails."""
    raise ValueError(f"cannot handle {input!r}")


def _shout(ctx: Any, input: Any) -> JsonValue:
    return str(input).upper()


#: A code-only graph, named by reference.
code_graph = sequence([run_code(_shout, id="shout")], id="code_graph")


def _reply(request: ModelRequest) -> str:
    return f"echo: {request.messages[-1].content}"


#: A harness with a model slot: the child runs it as configured.
echo_harness = AgentHarness(
    name="echo",
    agent_graph=agent(slot="m"),
    model_slots={"m": ModelSlot(provider=scripted(_reply), model="m")},
)


#: Neither an agent nor a function.
not_an_agent = {"just": "data"}
