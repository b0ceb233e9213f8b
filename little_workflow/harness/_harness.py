"""``AgentHarness``: runs an agent graph in a ``Context`` with model slots and tools.

A zero-config harness persists nothing (its recorder is the ``NullRecorder``). Inside a
workflow run the runtime gives it a recorder that writes every model and tool call to
the run's event log (Layer C); a harness given a checkpoint store keeps a step ledger.
The harness is the same in every case: only the recorder differs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from little_workflow.codec import JsonValue, check_json_value
from little_workflow.durable._recorder import NullRecorder, Recorder
from little_workflow.harness._context import (
    Context,
    ContextLayer,
    Item,
    default_layers,
    run_append_pipeline,
)
from little_workflow.harness._execution import GraphRun, input_message
from little_workflow.harness._graph import GraphStep
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tool_registry import ToolRegistry
from little_workflow.harness._tools import Tool
from little_workflow.harness.models import ToolSpec
from little_workflow.ids import new_id

__all__ = ["AgentHarness", "ToolHook", "Toolset"]

#: ``prepare(detail) -> detail``: completes a tool call's recorded detail before it starts.
Preparer = Callable[[Mapping[str, JsonValue]], Mapping[str, JsonValue]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolHook:
    """How a built-in tool departs from ``Tool.invoke`` (``start_workflow`` is one).

    ``prepare`` completes the call's detail before its start is recorded (with the id of
    the sub-run it will start, so a resume finds that sub-run instead of starting
    another); ``run`` then makes the call from the recorded detail.
    """

    prepare: Preparer
    run: Callable[[Mapping[str, JsonValue], Any], Awaitable[JsonValue]]


class Toolset:
    """The harness's tools, plus hooks for built-in tools that need them."""

    def __init__(
        self,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] = (),
        hooks: Mapping[str, ToolHook] | None = None,
    ) -> None:
        self.registry = ToolRegistry(tools)
        self._hooks = dict(hooks or {})

    def get(self, name: str) -> Tool[..., Any]:
        """The tool called ``name`` (``ToolArgumentsError``, code ``unknown_tool``, if none)."""
        return self.registry.get(name)

    def specs(self, names: Sequence[str] | None = None) -> list[ToolSpec]:
        """The specs of ``names`` (every tool when ``None``), for a model request."""
        return list(self.registry.specs(names))

    def hook(self, name: str) -> ToolHook | None:
        """The hook of tool ``name``, if it has one."""
        return self._hooks.get(name)

    def manifest(self) -> dict[str, str]:
        """``{name: schema_hash}``, for capability manifests."""
        return self.registry.manifest()


class AgentHarness:
    """Runs ``agent_graph`` (see ``little_workflow.harness.agent`` for the standard agent)."""

    def __init__(
        self,
        *,
        name: str,
        agent_graph: GraphStep,
        model_slots: Mapping[str, ModelSlot] | None = None,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] | Toolset = (),
        params: Mapping[str, JsonValue] | None = None,
    ) -> None:
        self.name = name
        self.agent_graph = agent_graph
        self.model_slots: dict[str, ModelSlot] = dict(model_slots or {})
        self.tools = tools if isinstance(tools, Toolset) else Toolset(tools)
        self.params: dict[str, JsonValue] = dict(params or {})

    def create_context(
        self,
        *,
        id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        instructions: str | None = None,
        layers: Sequence[ContextLayer] | None = None,
        cwd: str | None = None,
        state: Any = None,
        parent: Context | None = None,
    ) -> Context:
        """A fresh context; ``instructions`` fill the default ``instructions`` layer."""
        return Context(
            id=id or new_id("exec"),
            thread_id=thread_id,
            resource_id=resource_id,
            layers=list(layers) if layers is not None else default_layers(instructions),
            cwd=cwd,
            state=state,
            parent=parent,
        )

    async def execute(
        self, ctx: Context, input: JsonValue = None, *, recorder: Recorder | None = None
    ) -> JsonValue:
        """Run the agent graph in ``ctx``; ``input``, if given, is appended as a user message.

        ``recorder`` makes the execution durable (see ``_recorder``); without one, nothing
        is recorded and nothing replayed.
        """
        if input is not None:
            check_json_value(input, where="the input of the agent")
            run_append_pipeline(ctx, [Item(message=input_message(input))])
        run = GraphRun(self, ctx, recorder or NullRecorder(), input)
        return await run.run_step(self.agent_graph, self.agent_graph.id)
