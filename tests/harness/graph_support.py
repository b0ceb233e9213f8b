"""Helpers for the agent-graph tests: a recorder that takes notes, counting tools."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.durable._recorder import Recorded, Unit
from little_workflow.harness._agent import agent
from little_workflow.harness._context import Context
from little_workflow.harness._harness import AgentHarness
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import Tool, tool
from little_workflow.harness.models import ScriptedProvider


class Notebook:
    """A recorder that records what happens and replays nothing."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, str]] = []
        self.units: dict[str, Unit] = {}

    def replay(self, unit: Unit) -> Recorded | None:
        return None

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        return None

    async def started(self, unit: Unit) -> None:
        self.entries.append(("started", unit.kind, unit.path))
        self.units[unit.path] = unit

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        self.entries.append(("succeeded", unit.kind, unit.path))

    async def failed(self, unit: Unit, error: BaseException) -> None:
        self.entries.append(("failed", unit.kind, unit.path))

    def started_paths(self) -> list[str]:
        return [path for event, _, path in self.entries if event == "started"]


class Counter:
    """Tools that count their calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

        @tool
        def lookup(name: str) -> dict[str, Any]:
            """Look a candidate up.

            Args:
                name: The candidate's name.
            """
            self.calls.append(("lookup", name))
            return {"name": name, "years": len(name) + 4}

        @tool
        def score(years: int) -> int:
            """Score years of experience.

            Args:
                years: Years.
            """
            self.calls.append(("score", years))
            return years * 10

        @tool
        def explode(reason: str) -> str:
            """Always fails.

            Args:
                reason: Why.
            """
            self.calls.append(("explode", reason))
            raise ValueError(f"boom: {reason}")

        self.tools: list[Tool[..., Any]] = [lookup, score, explode]


def ask(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """A scripted answer asking for ``(id, name, arguments)`` tool calls."""
    return {
        "tool_calls": [
            {"id": call_id, "name": name, "arguments": arguments}
            for call_id, name, arguments in calls
        ]
    }


def harness(
    provider: ScriptedProvider, counter: Counter, graph: Any = None, *, max_turns: int = 8
) -> AgentHarness:
    return AgentHarness(
        name="test",
        agent_graph=graph if graph is not None else agent(slot="main", max_turns=max_turns),
        model_slots={"main": ModelSlot(provider=provider, model="m1")},
        tools=counter.tools,
    )


async def execute(h: AgentHarness, input: JsonValue = "Score Ada") -> tuple[JsonValue, Context]:
    ctx = h.create_context(instructions="Be brief")
    recorder = Notebook()
    output = await h.execute(ctx, input, recorder=recorder)
    ctx.state = recorder
    return output, ctx


def notebook(ctx: Context) -> Notebook:
    assert isinstance(ctx.state, Notebook)
    return ctx.state
