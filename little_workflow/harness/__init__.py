"""Harness: the agent harness, its context, the agent graph, model slots and tools.

``AgentHarness`` runs an agent graph (``agent()`` is the standard one) in a
``Context``; ``Recorder`` is how it becomes durable (the runtime's Layer C recorder
writes a run's sessions to its log). ``models`` holds the provider-neutral conversation
model and the providers. See ``docs/harness.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): importing one harness module (as
# the runtime does) then no longer imports all of them.
if TYPE_CHECKING:
    from little_workflow.durable._recorder import NullRecorder, Recorded, Recorder, Unit, run_unit
    from little_workflow.harness._agent import agent, answered, final_answer
    from little_workflow.harness._context import (
        AskUserPrompt,
        Context,
        ContextLayer,
        HistoryLayer,
        InstructionsLayer,
        Item,
        ItemLog,
        ScratchpadLayer,
        default_layers,
        run_append_pipeline,
    )
    from little_workflow.harness._execution import GraphRun, ToolContext
    from little_workflow.harness._graph import (
        AskUser,
        Branch,
        CallModel,
        GraphStep,
        InvokeTool,
        Loop,
        RunCode,
        RunToolCalls,
        SequenceStep,
        Spawn,
        ask_user,
        branch,
        call_model,
        invoke_tool,
        loop,
        run_code,
        run_tool_calls,
        sequence,
        spawn,
        step_identity,
    )
    from little_workflow.harness._harness import (
        AgentHarness,
        ClearedExecution,
        HarnessEnvironment,
        HarnessStorage,
        RestoreContextOptions,
        SpawnHandle,
        ToolHook,
        Toolset,
        answer_key,
        clear_execution,
    )
    from little_workflow.harness._manifest import build_manifest, diff_manifests, manifest_hash
    from little_workflow.harness._redaction import REDACTED, Redaction
    from little_workflow.harness._slots import ModelSlot
    from little_workflow.harness._spawning import (
        LiveChildren,
        reattach_live_children,
        run_spawned_agent,
    )
    from little_workflow.harness._tool_registry import ToolRegistry
    from little_workflow.harness._tools import Tool, tool

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.durable._recorder": (
        "NullRecorder",
        "Recorded",
        "Recorder",
        "Unit",
        "run_unit",
    ),
    "little_workflow.harness._agent": (
        "agent",
        "answered",
        "final_answer",
    ),
    "little_workflow.harness._context": (
        "AskUserPrompt",
        "Context",
        "ContextLayer",
        "HistoryLayer",
        "InstructionsLayer",
        "Item",
        "ItemLog",
        "ScratchpadLayer",
        "default_layers",
        "run_append_pipeline",
    ),
    "little_workflow.harness._execution": (
        "GraphRun",
        "ToolContext",
    ),
    "little_workflow.harness._graph": (
        "AskUser",
        "Branch",
        "CallModel",
        "GraphStep",
        "InvokeTool",
        "Loop",
        "RunCode",
        "RunToolCalls",
        "SequenceStep",
        "Spawn",
        "ask_user",
        "branch",
        "call_model",
        "invoke_tool",
        "loop",
        "run_code",
        "run_tool_calls",
        "sequence",
        "spawn",
        "step_identity",
    ),
    "little_workflow.harness._harness": (
        "AgentHarness",
        "ClearedExecution",
        "HarnessEnvironment",
        "HarnessStorage",
        "RestoreContextOptions",
        "SpawnHandle",
        "ToolHook",
        "Toolset",
        "answer_key",
        "clear_execution",
    ),
    "little_workflow.harness._manifest": (
        "build_manifest",
        "diff_manifests",
        "manifest_hash",
    ),
    "little_workflow.harness._redaction": (
        "REDACTED",
        "Redaction",
    ),
    "little_workflow.harness._slots": ("ModelSlot",),
    "little_workflow.harness._spawning": (
        "LiveChildren",
        "reattach_live_children",
        "run_spawned_agent",
    ),
    "little_workflow.harness._tool_registry": ("ToolRegistry",),
    "little_workflow.harness._tools": (
        "Tool",
        "tool",
    ),
}

__all__ = [
    "REDACTED",
    "AgentHarness",
    "AskUser",
    "AskUserPrompt",
    "Branch",
    "CallModel",
    "ClearedExecution",
    "Context",
    "ContextLayer",
    "GraphRun",
    "GraphStep",
    "HarnessEnvironment",
    "HarnessStorage",
    "HistoryLayer",
    "InstructionsLayer",
    "InvokeTool",
    "Item",
    "ItemLog",
    "LiveChildren",
    "Loop",
    "ModelSlot",
    "NullRecorder",
    "Recorded",
    "Recorder",
    "Redaction",
    "RestoreContextOptions",
    "RunCode",
    "RunToolCalls",
    "ScratchpadLayer",
    "SequenceStep",
    "Spawn",
    "SpawnHandle",
    "Tool",
    "ToolContext",
    "ToolHook",
    "ToolRegistry",
    "Toolset",
    "Unit",
    "agent",
    "answer_key",
    "answered",
    "ask_user",
    "branch",
    "build_manifest",
    "call_model",
    "clear_execution",
    "default_layers",
    "diff_manifests",
    "final_answer",
    "invoke_tool",
    "loop",
    "manifest_hash",
    "reattach_live_children",
    "run_append_pipeline",
    "run_code",
    "run_spawned_agent",
    "run_tool_calls",
    "run_unit",
    "sequence",
    "spawn",
    "step_identity",
    "tool",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
