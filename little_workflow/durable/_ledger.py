"""The step-completion ledger: one entry per completed step, replayed on resume.

A restored context knows what happened but not how far it got. The ledger records, for
every step of a harness execution that completed, its path, identity, kind and output,
one key per step (``execution:<id>:ledger:<seq>``, so an append costs the same however
long the run). A resumed execution replays recorded outputs instead of running the
steps: memoization, not fast-forward, since a model call made again would answer
differently from what the rest of the run already saw.

* Only successes are recorded: a step that raised runs again.
* A step whose identity changed at a recorded path runs fresh, and its recorded subtree
  is discarded (``MemoTable`` with the ``rerun`` policy).
* A completed composite step replays whole, without descending into its children.

Retention bounds the ledger on two axes (``StepLedgerRetention``): the largest output
recorded (UTF-8 bytes of its JSON) and the entries kept per execution. A step over
either bound is simply not recorded, so it runs again on resume: that costs work, never
a wrong value. The first drop of each kind logs one warning.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.durable._memo import MemoTable
from little_workflow.durable._recorder import Recorded, Unit
from little_workflow.errors import ConfigError, CorruptDataError
from little_workflow.ids import validate_id
from little_workflow.storage import StorageAdapter, read_many

__all__ = [
    "DEFAULT_STEP_LEDGER_RETENTION",
    "StepLedger",
    "StepLedgerRetention",
    "ledger_key",
    "ledger_prefix",
]

logger = logging.getLogger("little_workflow.durable")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLedgerRetention:
    """How much of an execution the ledger keeps; ``math.inf`` disables an axis.

    A cap that is not positive, or NaN, raises ``ConfigError`` with code
    ``STEP_LEDGER_RETENTION_INVALID`` here, at construction: a silently wrong cap would
    record nothing while the run still looked healthy.
    """

    #: The largest output recorded, in UTF-8 bytes of its JSON.
    max_entry_bytes: float = 128 * 1024
    #: Entries retained per execution.
    max_entries: float = 1_000

    def __post_init__(self) -> None:
        for name in ("max_entry_bytes", "max_entries"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or math.isnan(value)
                or value <= 0
            ):
                raise ConfigError(
                    f"step ledger retention {name}={value!r} is not a positive number "
                    "(pass math.inf to disable the cap)",
                    code="STEP_LEDGER_RETENTION_INVALID",
                )


DEFAULT_STEP_LEDGER_RETENTION = StepLedgerRetention()


def ledger_prefix(execution_id: str) -> str:
    """``execution:<id>:ledger:``, the prefix of every entry of the execution."""
    return f"execution:{validate_id(execution_id, what='execution id')}:ledger:"


def ledger_key(execution_id: str, seq: int) -> str:
    """The key of entry ``seq`` (zero-padded, so keys sort in append order)."""
    return f"{ledger_prefix(execution_id)}{seq:010d}"


class StepLedger:
    """One execution's ledger, loaded once; a ``Recorder`` for the harness.

    Build it with ``await StepLedger.load(...)``: one ``list`` and one ``get_many`` (one
    query on SQLite and PostgreSQL), whatever the number of entries.
    """

    def __init__(
        self,
        storage: StorageAdapter,
        execution_id: str,
        retention: StepLedgerRetention,
        entries: Mapping[str, tuple[int, dict[str, JsonValue]]],
    ) -> None:
        self.storage = storage
        self.execution_id = execution_id
        self.retention = retention
        self.memo = MemoTable(scope=f"execution {execution_id!r}", on_mismatch="rerun")
        self._keys: dict[str, int] = {}
        for path, (seq, entry) in entries.items():
            identity = entry.get("identity")
            self.memo.record(
                path, identity if isinstance(identity, str) else "", entry.get("output")
            )
            self._keys[path] = seq
        self._next_seq = max((seq for seq, _ in entries.values()), default=0) + 1
        self._stale: list[int] = []
        self._warned: set[str] = set()
        #: Entries recorded by this process, and entries dropped by retention.
        self.recorded = 0
        self.dropped = 0

    @classmethod
    async def load(
        cls, storage: StorageAdapter, execution_id: str, retention: StepLedgerRetention
    ) -> StepLedger:
        """Read the execution's entries (the latest one per path wins)."""
        prefix = ledger_prefix(execution_id)
        keys = await storage.list(prefix)
        values = await read_many(storage, keys)
        entries: dict[str, tuple[int, dict[str, JsonValue]]] = {}
        for key in keys:
            value = values.get(key)
            suffix = key[len(prefix) :]
            if value is None:
                continue  # removed between list and read
            if not suffix.isdigit() or not isinstance(value, dict):
                raise CorruptDataError(f"ledger entry {key!r} is not a ledger entry")
            path = value.get("path")
            if not isinstance(path, str):
                raise CorruptDataError(f"ledger entry {key!r} has no path")
            entries[path] = (int(suffix), value)
        return cls(storage, execution_id, retention, entries)

    def __len__(self) -> int:
        return len(self.memo)

    # --- Recorder ---------------------------------------------------------------------

    def replay(self, unit: Unit) -> Recorded | None:
        """The recorded output at ``unit.path``; an edited step drops its recorded subtree."""
        before = {entry.path for entry in self.memo}
        entry = self.memo.lookup(unit.path, unit.identity)
        for path in before - {entry.path for entry in self.memo}:
            seq = self._keys.pop(path, None)
            if seq is not None:
                self._stale.append(seq)  # deleted at the next write
        return None if entry is None else Recorded(value=entry.value)

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """The ledger records outcomes only."""
        return None

    async def started(self, unit: Unit) -> None:
        """Nothing is recorded when a step starts."""

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """Only successes are recorded: a step that raised runs again."""

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """Record the step's output, within the retention bounds."""
        await self._delete_stale()
        size = len(codec.dumps(value, where=f"the output of {unit.path!r}").encode("utf-8"))
        if size > self.retention.max_entry_bytes:
            self._drop("max_entry_bytes", f"the output of step {unit.path!r} is {size} bytes")
            return
        if len(self.memo) >= self.retention.max_entries and unit.path not in self._keys:
            self._drop("max_entries", f"the ledger already holds {len(self.memo)} entries")
            return
        seq = self._next_seq
        self._next_seq += 1
        entry: dict[str, JsonValue] = {
            "path": unit.path,
            "identity": unit.identity,
            "kind": unit.kind,
            "output": value,
            "recordedAt": time.time(),
        }
        await self.storage.set(ledger_key(self.execution_id, seq), entry)
        previous = self._keys.get(unit.path)
        if previous is not None:
            self._stale.append(previous)
        self._keys[unit.path] = seq
        self.memo.record(unit.path, unit.identity, value)
        self.recorded += 1

    def _drop(self, kind: str, why: str) -> None:
        self.dropped += 1
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(
                "execution %r: a step was not recorded in the ledger (%s exceeds %s); it will "
                "run again on resume. Further drops of this kind are not logged.",
                self.execution_id,
                why,
                kind,
            )

    async def _delete_stale(self) -> None:
        while self._stale:
            await self.storage.delete(ledger_key(self.execution_id, self._stale.pop()))

    async def clear(self) -> None:
        """Remove every entry of the execution."""
        for key in await self.storage.list(ledger_prefix(self.execution_id)):
            await self.storage.delete(key)
        self.memo = MemoTable(scope=f"execution {self.execution_id!r}", on_mismatch="rerun")
        self._keys.clear()
