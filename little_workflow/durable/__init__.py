"""Durable: run locks and leases, memoization by path, the replay cursor.

Built on ``storage``; used by ``harness`` and ``runtime``.
"""

from __future__ import annotations

from little_workflow.durable._locks import FileLock, LockOwner
from little_workflow.durable._memo import MemoEntry, MemoMismatchError, MemoTable, MismatchPolicy

__all__ = ["FileLock", "LockOwner", "MemoEntry", "MemoMismatchError", "MemoTable", "MismatchPolicy"]
