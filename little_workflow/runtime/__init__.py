"""Runtime: LWIR runs with per-step durability (Layer A), run locks, replay and retry.

``Runtime`` starts, resumes, retries, replays and collects (``gc``) runs; ``fold`` turns a
run's events into its ``RunState`` (the one reading of a log that the CLI and UI share).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a resume through the CLI needs
# ``Runtime``, not the code-first API, the worker, gc or outer loops.
if TYPE_CHECKING:
    from little_workflow._deltas import DeltaStream, RunDelta
    from little_workflow.durable._side_effects import Happened, SideEffect, side_effect
    from little_workflow.runtime._code_api import step, workflow
    from little_workflow.runtime._code_context import Decision, WorkflowContext
    from little_workflow.runtime._code_run import current_step
    from little_workflow.runtime._core import Site
    from little_workflow.runtime._datadir import DataDir
    from little_workflow.runtime._faults import CRASH_ENV, CRASH_EXIT_CODE, FAULT_ENV
    from little_workflow.runtime._functions import StepContext
    from little_workflow.runtime._gc import GcReport, KeptRun
    from little_workflow.runtime._outer import (
        Continue,
        Cycle,
        CycleRecord,
        Done,
        OuterLoopManifest,
        OuterLoopOutcome,
    )
    from little_workflow.runtime._runtime import CancelOutcome, ReplayResult, RunResult, Runtime
    from little_workflow.runtime._schedules import Schedule
    from little_workflow.runtime._setup import RuntimeSetup, load_setup
    from little_workflow.runtime._state import RunState, StepRecord, apply, fold
    from little_workflow.runtime._worker import Worker, WorkerReport
    from little_workflow.runtime._workflows import WorkflowVersion

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow._deltas": ("DeltaStream", "RunDelta"),
    "little_workflow.durable._side_effects": ("Happened", "SideEffect", "side_effect"),
    "little_workflow.runtime._code_api": ("step", "workflow"),
    "little_workflow.runtime._code_context": ("Decision", "WorkflowContext"),
    "little_workflow.runtime._code_run": ("current_step",),
    "little_workflow.runtime._core": ("Site",),
    "little_workflow.runtime._datadir": ("DataDir",),
    "little_workflow.runtime._faults": ("CRASH_ENV", "CRASH_EXIT_CODE", "FAULT_ENV"),
    "little_workflow.runtime._functions": ("StepContext",),
    "little_workflow.runtime._gc": ("GcReport", "KeptRun"),
    "little_workflow.runtime._outer": (
        "Continue",
        "Cycle",
        "CycleRecord",
        "Done",
        "OuterLoopManifest",
        "OuterLoopOutcome",
    ),
    "little_workflow.runtime._runtime": ("CancelOutcome", "ReplayResult", "RunResult", "Runtime"),
    "little_workflow.runtime._schedules": ("Schedule",),
    "little_workflow.runtime._setup": ("RuntimeSetup", "load_setup"),
    "little_workflow.runtime._state": ("RunState", "StepRecord", "apply", "fold"),
    "little_workflow.runtime._worker": ("Worker", "WorkerReport"),
    "little_workflow.runtime._workflows": ("WorkflowVersion",),
}

__all__ = [
    "CRASH_ENV",
    "CRASH_EXIT_CODE",
    "FAULT_ENV",
    "CancelOutcome",
    "Continue",
    "Cycle",
    "CycleRecord",
    "DataDir",
    "Decision",
    "DeltaStream",
    "Done",
    "GcReport",
    "Happened",
    "KeptRun",
    "OuterLoopManifest",
    "OuterLoopOutcome",
    "ReplayResult",
    "RunDelta",
    "RunResult",
    "RunState",
    "Runtime",
    "RuntimeSetup",
    "Schedule",
    "SideEffect",
    "Site",
    "StepContext",
    "StepRecord",
    "Worker",
    "WorkerReport",
    "WorkflowContext",
    "WorkflowVersion",
    "apply",
    "current_step",
    "fold",
    "load_setup",
    "side_effect",
    "step",
    "workflow",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
