"""Durable: memoization by path, the recorder interface, checkpoints, the step ledger, locks.

Built on ``storage``; used by ``harness`` and ``runtime``.
"""

from __future__ import annotations

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
from little_workflow.durable._memo import MemoEntry, MemoMismatchError, MemoTable, MismatchPolicy
from little_workflow.durable._recorder import (
    NullRecorder,
    Recorded,
    Recorder,
    Unit,
    UnitKind,
    run_unit,
)

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
