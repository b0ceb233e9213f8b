"""The two pluggable storage interfaces: ``StorageAdapter`` (KV) and ``EventLog``.

Both are ``Protocol``s, so a backend is any object with the right async methods; the
conformance suites in ``little_workflow.testing`` decide whether it is correct. Only
JSON crosses either boundary (see ``little_workflow.codec``).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from little_workflow.codec import JsonValue
from little_workflow.events import Event, RecordedEvent, RunIndexUpdate, RunStatus

__all__ = [
    "EventLog",
    "ManagedStorage",
    "RunInfo",
    "StorageAdapter",
    "SupportsGetMany",
    "apply_run_index",
    "read_many",
]


@runtime_checkable
class StorageAdapter(Protocol):
    """An async key-value store of JSON values.

    ``None`` is not a storable value: ``get`` returns ``None`` for a missing key and only
    then. Keys follow the rules of ``little_workflow.storage.validate_key``; a refused
    key raises ``InvalidKeyError`` and writes nothing.
    """

    async def get(self, key: str) -> JsonValue | None:
        """The value stored at ``key``, or ``None`` if there is none."""
        ...

    async def set(self, key: str, value: JsonValue) -> None:
        """Store ``value`` at ``key``, replacing any previous value atomically."""
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``; removing a missing key is not an error."""
        ...

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key that starts with exactly ``prefix``, sorted."""
        ...


@runtime_checkable
class SupportsGetMany(Protocol):
    """A ``StorageAdapter`` that can read many keys in one round trip."""

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        """The stored values of ``keys``; missing keys are absent, never ``None``."""
        ...


@runtime_checkable
class ManagedStorage(StorageAdapter, SupportsGetMany, Protocol):
    """What every built-in backend is: a batch-reading ``StorageAdapter`` that owns resources."""

    async def close(self) -> None:
        """Release connections and files. The store is unusable afterwards."""
        ...


async def read_many(storage: StorageAdapter, keys: Iterable[str]) -> dict[str, JsonValue]:
    """Read many keys: one ``get_many`` if the adapter has it, else concurrent ``get``s.

    Missing keys are absent from the result.
    """
    wanted = list(dict.fromkeys(keys))
    if isinstance(storage, SupportsGetMany):
        return await storage.get_many(wanted)
    values = await asyncio.gather(*(storage.get(key) for key in wanted))
    return {key: value for key, value in zip(wanted, values, strict=True) if value is not None}


@dataclass(frozen=True, slots=True, kw_only=True)
class RunInfo:
    """A run as the run index knows it, without reading its events."""

    run_id: str
    #: From the latest lifecycle event (``None`` until a ``RunStarted`` is appended).
    status: RunStatus | None
    workflow: str | None
    parent_run_id: str | None
    #: Seconds since the epoch of the first and the latest append.
    created_at: float
    updated_at: float
    #: The sequence number of the run's latest event, which is also its event count.
    last_seq: int


_NO_UPDATE = RunIndexUpdate()


def apply_run_index(events: Sequence[Event]) -> RunIndexUpdate:
    """Fold the run-index effects of ``events`` (in order) into one row update."""
    if all(event.RUN_STATUS is None for event in events):
        return _NO_UPDATE  # the common case: no lifecycle event in this append
    status: RunStatus | None = None
    workflow: str | None = None
    parent: str | None = None
    for event in events:
        update = event.run_index_update()
        if update is None:
            continue
        status = update.status
        workflow = update.workflow or workflow
        parent = update.parent_run_id or parent
    return RunIndexUpdate(status=status, workflow=workflow, parent_run_id=parent)


@runtime_checkable
class EventLog(Protocol):
    """An append-only log with one ordered stream of events per run.

    Sequence numbers are 1, 2, 3, ... per run, with no gap and no duplicate, even with
    several processes appending to one run at once.
    """

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        """Append ``events`` to ``run_id`` in one transaction; return their sequence numbers.

        With ``sync=True`` (the default) the numbers are returned only once the events
        are durable on disk. With ``sync=False`` they are committed (visible, and they
        survive the death of this process) but may wait for a later synced append to
        reach the disk: on SQLite in WAL mode a later synced commit makes every earlier
        one durable with it, so events written before a step's completion need not pay
        for their own fsync.

        With ``expected_seq`` the append happens only if the run's last sequence number
        is exactly that (0 for a new run); otherwise ``ConflictError`` and nothing is
        written.
        """
        ...

    async def read(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        """The run's events with ``seq > after``, in order (at most ``limit`` of them)."""
        ...

    async def last_seq(self, run_id: str) -> int:
        """The run's latest sequence number; 0 for a run with no events."""
        ...

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's index row, or ``None`` if the run has no events."""
        ...

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        parent_run_id: str | None = None,
        top_level: bool = False,
        before: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs matching every given filter, most recently created first (ties: run id,
        descending).

        ``top_level`` keeps only the runs without a parent run. ``before`` is a run's
        ``(created_at, run_id)``: only the runs after it in this order are listed, so the
        last row of a page is where the next page starts (keyset paging: each page costs
        the same, however deep; a run created meanwhile is never listed twice).
        """
        ...

    async def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the events and the index rows of ``run_ids``, in one transaction.

        Either every event and index row of every named run is gone, or (on an error)
        nothing is. A run with no events is skipped. Returns the number of events
        deleted. For retention (``Runtime.gc``): the caller makes sure no process is
        appending to these runs.
        """
        ...

    async def close(self) -> None:
        """Release connections and files. The log is unusable afterwards."""
        ...
