"""In-memory backends: for tests, and for a zero-config harness that persists nothing.

Values are kept as JSON text, not as the objects handed in, so the memory backends
behave like the durable ones: a caller that mutates a value after ``set`` does not
change what is stored, and a value that would not survive a real backend is refused
here too.
"""

from __future__ import annotations

import bisect
import builtins
import time
from collections.abc import Iterable, Sequence

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.errors import ConflictError
from little_workflow.events import Event, RecordedEvent, RunStatus, decode_event, encode_event
from little_workflow.ids import validate_id
from little_workflow.storage._fence import refuse_fence
from little_workflow.storage._keys import validate_key, validate_prefix
from little_workflow.storage._protocols import RunInfo, apply_run_index
from little_workflow.storage._values import encode_value

__all__ = [
    "MemoryEventLog",
    "MemoryStorage",
    "create_in_memory_event_log",
    "create_in_memory_storage",
]


class MemoryStorage:
    """A ``StorageAdapter`` held in this process's memory. Nothing survives the process."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._sorted: builtins.list[str] = []

    async def get(self, key: str) -> JsonValue | None:
        """The value at ``key``, or ``None``."""
        text = self._data.get(validate_key(key))
        return None if text is None else codec.loads(text, where=f"memory key {key!r}")

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        """Every stored value among ``keys``; missing keys are absent."""
        result: dict[str, JsonValue] = {}
        for key in keys:
            text = self._data.get(validate_key(key))
            if text is not None:
                result[key] = codec.loads(text, where=f"memory key {key!r}")
        return result

    async def set(self, key: str, value: JsonValue) -> None:
        """Store ``value`` at ``key``."""
        text = encode_value(validate_key(key), value)
        if key not in self._data:
            bisect.insort(self._sorted, key)
        self._data[key] = text

    async def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        if self._data.pop(validate_key(key), None) is not None:
            index = bisect.bisect_left(self._sorted, key)
            del self._sorted[index]

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Keys starting with ``prefix``, sorted."""
        validate_prefix(prefix)
        start = bisect.bisect_left(self._sorted, prefix)
        result: builtins.list[str] = []
        for key in self._sorted[start:]:
            if not key.startswith(prefix):
                break
            result.append(key)
        return result

    async def close(self) -> None:
        """Nothing to release."""


def create_in_memory_storage() -> MemoryStorage:
    """A fresh, empty in-memory ``StorageAdapter``."""
    return MemoryStorage()


class _MemoryRun:
    __slots__ = ("created_at", "events", "parent_run_id", "status", "updated_at", "workflow")

    def __init__(self, now: float) -> None:
        self.events: list[tuple[float, str, str]] = []
        self.status: RunStatus | None = None
        self.workflow: str | None = None
        self.parent_run_id: str | None = None
        self.created_at = now
        self.updated_at = now


class MemoryEventLog:
    """An ``EventLog`` in memory, for tests. Events are stored encoded and decoded on read."""

    def __init__(self) -> None:
        self._runs: dict[str, _MemoryRun] = {}

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        """Append ``events``; see ``EventLog.append``."""
        refuse_fence("in-memory")
        validate_id(run_id, what="run id")
        run = self._runs.get(run_id)
        last = len(run.events) if run is not None else 0
        if expected_seq is not None and expected_seq != last:
            raise ConflictError(
                f"run {run_id!r}: expected last seq {expected_seq}, found {last}; "
                "another writer appended first"
            )
        if not events:
            return []
        encoded = [(event.TYPE, encode_event(event)) for event in events]
        now = time.time()
        if run is None:
            run = self._runs[run_id] = _MemoryRun(now)
        run.events.extend((now, type_name, data) for type_name, data in encoded)
        run.updated_at = now
        update = apply_run_index(events)
        run.status = update.status or run.status
        run.workflow = update.workflow or run.workflow
        run.parent_run_id = update.parent_run_id or run.parent_run_id
        return list(range(last + 1, last + 1 + len(events)))

    async def read(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Events with ``seq > after``, in order."""
        validate_id(run_id, what="run id")
        run = self._runs.get(run_id)
        if run is None:
            return []
        stop = len(run.events) if limit is None else min(len(run.events), after + limit)
        return [
            RecordedEvent(
                run_id=run_id,
                seq=index + 1,
                ts=ts,
                event=decode_event(type_name, data, where=f"run {run_id!r} seq {index + 1}"),
            )
            for index, (ts, type_name, data) in enumerate(
                run.events[max(after, 0) : stop], start=max(after, 0)
            )
        ]

    async def last_seq(self, run_id: str) -> int:
        """The run's latest sequence number, 0 if none."""
        validate_id(run_id, what="run id")
        run = self._runs.get(run_id)
        return 0 if run is None else len(run.events)

    def _info(self, run_id: str, run: _MemoryRun) -> RunInfo:
        return RunInfo(
            run_id=run_id,
            status=run.status,
            workflow=run.workflow,
            parent_run_id=run.parent_run_id,
            created_at=run.created_at,
            updated_at=run.updated_at,
            last_seq=len(run.events),
        )

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's index row, or ``None``."""
        validate_id(run_id, what="run id")
        run = self._runs.get(run_id)
        return None if run is None else self._info(run_id, run)

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
        """Matching runs, newest first; see ``EventLog.list_runs``."""
        rows = [
            self._info(run_id, run)
            for run_id, run in self._runs.items()
            if (status is None or run.status == status)
            and (workflow is None or run.workflow == workflow)
            and (parent_run_id is None or run.parent_run_id == parent_run_id)
            and not (top_level and run.parent_run_id is not None)
        ]
        if before is not None:
            rows = [row for row in rows if (row.created_at, row.run_id) < before]
        rows.sort(key=lambda row: (row.created_at, row.run_id), reverse=True)
        return rows if limit is None else rows[:limit]

    async def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the named runs; see ``EventLog.delete_runs``."""
        # Validated first, so a bad id deletes nothing.
        wanted = [validate_id(run_id, what="run id") for run_id in run_ids]
        deleted = 0
        for run_id in dict.fromkeys(wanted):
            run = self._runs.pop(run_id, None)
            if run is not None:
                deleted += len(run.events)
        return deleted

    async def close(self) -> None:
        """Nothing to release."""


def create_in_memory_event_log() -> MemoryEventLog:
    """A fresh, empty in-memory ``EventLog`` (tests only: nothing is durable)."""
    return MemoryEventLog()
