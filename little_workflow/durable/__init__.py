"""Durable: memoization by path, the recorder interface, checkpoints, the step ledger, locks.

Built on ``storage``; used by ``harness`` and ``runtime``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a run needs the memo and the locks,
# not the harness's checkpoints and step ledger (pydantic models, built at import).
if TYPE_CHECKING:
    from little_workflow.durable._checkpoints import (
        CHECKPOINT_SCHEMA_VERSION,
        AskUserRecord,
        CheckpointSnapshot,
        CheckpointStore,
        CwdRecord,
        FrontierEntry,
        create_checkpoint_store,
        snapshot_key,
    )
    from little_workflow.durable._ledger import (
        DEFAULT_STEP_LEDGER_RETENTION,
        StepLedger,
        StepLedgerRetention,
    )
    from little_workflow.durable._locks import FileLock, LockOwner
    from little_workflow.durable._memo import (
        MemoEntry,
        MemoMismatchError,
        MemoTable,
        MismatchPolicy,
    )
    from little_workflow.durable._recorder import (
        NullRecorder,
        Recorded,
        Recorder,
        Unit,
        UnitKind,
        run_unit,
    )

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.durable._checkpoints": (
        "CHECKPOINT_SCHEMA_VERSION",
        "AskUserRecord",
        "CheckpointSnapshot",
        "CheckpointStore",
        "CwdRecord",
        "FrontierEntry",
        "create_checkpoint_store",
        "snapshot_key",
    ),
    "little_workflow.durable._ledger": (
        "DEFAULT_STEP_LEDGER_RETENTION",
        "StepLedger",
        "StepLedgerRetention",
    ),
    "little_workflow.durable._locks": ("FileLock", "LockOwner"),
    "little_workflow.durable._memo": (
        "MemoEntry",
        "MemoMismatchError",
        "MemoTable",
        "MismatchPolicy",
    ),
    "little_workflow.durable._recorder": (
        "NullRecorder",
        "Recorded",
        "Recorder",
        "Unit",
        "UnitKind",
        "run_unit",
    ),
}

__all__ = [
    "CHECKPOINT_SCHEMA_VERSION",
    "DEFAULT_STEP_LEDGER_RETENTION",
    "AskUserRecord",
    "CheckpointSnapshot",
    "CheckpointStore",
    "CwdRecord",
    "FileLock",
    "FrontierEntry",
    "LockOwner",
    "MemoEntry",
    "MemoMismatchError",
    "MemoTable",
    "MismatchPolicy",
    "NullRecorder",
    "Recorded",
    "Recorder",
    "StepLedger",
    "StepLedgerRetention",
    "Unit",
    "UnitKind",
    "create_checkpoint_store",
    "run_unit",
    "snapshot_key",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
