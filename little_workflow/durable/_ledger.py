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
* A completed composite step replays whole, without descending into its children. Its
  entry records where the item log stood when it ended (``itemPosition``), and its
  replay moves the log's replay position there: later steps see what its children
  appended although they did not run (entries written before this had none).

Retention bounds the ledger on two axes (``StepLedgerRetention``): the largest output
recorded (UTF-8 bytes of its JSON) and the entries kept per execution. A step over
either bound is simply not recorded, so it runs again on resume: that costs work, never
a wrong value. The first drop of each kind logs one warning.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

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
    "entry_keys",
    "ledger_key",
    "ledger_prefix",
    "step_ledger_retention",
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

#: The keys a retention mapping may have: the seed's names, and the Python ones.
_RETENTION_KEYS = {
    "maxEntryBytes": "max_entry_bytes",
    "max_entry_bytes": "max_entry_bytes",
    "maxEntries": "max_entries",
    "max_entries": "max_entries",
}


def step_ledger_retention(value: StepLedgerRetention | Mapping[str, Any]) -> StepLedgerRetention:
    """``value`` as a ``StepLedgerRetention``; a mapping is the seed's shape.

    ``{"maxEntryBytes": ..., "maxEntries": ...}`` (or the snake_case names); an axis left
    out keeps its default. Anything else, an unknown key, or a cap that is not positive
    raises ``ConfigError`` with code ``STEP_LEDGER_RETENTION_INVALID``.
    """
    if isinstance(value, StepLedgerRetention):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"step ledger retention {value!r} is a {type(value).__name__}; pass a "
            "StepLedgerRetention or a mapping {'maxEntryBytes': ..., 'maxEntries': ...}",
            code="STEP_LEDGER_RETENTION_INVALID",
        )
    fields: dict[str, Any] = {}
    for key, cap in value.items():
        name = _RETENTION_KEYS.get(key) if isinstance(key, str) else None
        if name is None:
            raise ConfigError(
                f"step ledger retention has an unknown key {key!r}; the caps are "
                "'maxEntryBytes' (the largest output recorded, UTF-8 bytes of its JSON) and "
                "'maxEntries' (entries per execution)",
                code="STEP_LEDGER_RETENTION_INVALID",
            )
        if name in fields:
            raise ConfigError(
                f"step ledger retention gives {name} twice ({key!r} and another spelling)",
                code="STEP_LEDGER_RETENTION_INVALID",
            )
        fields[name] = cap
    return StepLedgerRetention(**fields)


def ledger_prefix(execution_id: str) -> str:
    """``execution:<id>:ledger:``, the prefix of every entry of the execution."""
    return f"execution:{validate_id(execution_id, what='execution id')}:ledger:"


def ledger_key(execution_id: str, seq: int) -> str:
    """The key of entry ``seq`` (zero-padded, so keys sort in append order)."""
    return f"{ledger_prefix(execution_id)}{seq:010d}"


def _entry_seq(prefix: str, key: str) -> int | None:
    """The sequence number of an entry key under ``prefix``; ``None`` for another key.

    An execution id may contain ``:``, so ``execution:a:ledger:`` is also a prefix of
    the keys of an execution called ``a:ledger:x``; those are not this ledger's.
    """
    suffix = key[len(prefix) :]
    return int(suffix) if suffix.isdigit() and suffix.isascii() else None


async def entry_keys(storage: StorageAdapter, execution_id: str) -> list[str]:
    """The keys of every entry of the execution's ledger, in append order."""
    prefix = ledger_prefix(execution_id)
    return [key for key in await storage.list(prefix) if _entry_seq(prefix, key) is not None]


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
        superseded: Iterable[int] = (),
    ) -> None:
        self.storage = storage
        self.execution_id = execution_id
        self.retention = retention
        self.memo = MemoTable(scope=f"execution {execution_id!r}", on_mismatch="rerun")
        self._keys: dict[str, int] = {}
        #: path → the item-log position recorded with its entry, when it has one.
        self._positions: dict[str, int] = {}
        for path, (seq, entry) in entries.items():
            identity = entry.get("identity")
            self.memo.record(
                path, identity if isinstance(identity, str) else "", entry.get("output")
            )
            self._keys[path] = seq
            position = entry.get("itemPosition")
            if isinstance(position, int) and not isinstance(position, bool) and position >= 0:
                self._positions[path] = position
        self._next_seq = max((seq for seq, _ in entries.values()), default=0) + 1
        #: Entries no longer wanted (superseded, or under an edited step): deleted at the
        #: next write, so that a discard costs nothing until the run records again.
        self._stale: list[int] = list(superseded)
        self._warned: set[str] = set()
        #: Entries recorded by this process, and entries dropped by retention.
        self.recorded = 0
        self.dropped = 0
        #: Entries this process could not write (the store failed).
        self.failed_writes = 0

    @classmethod
    async def load(
        cls, storage: StorageAdapter, execution_id: str, retention: StepLedgerRetention
    ) -> StepLedger:
        """Read the execution's entries (the latest one per path wins)."""
        prefix = ledger_prefix(execution_id)
        keys = await entry_keys(storage, execution_id)
        values = await read_many(storage, keys)
        entries: dict[str, tuple[int, dict[str, JsonValue]]] = {}
        superseded: list[int] = []
        for key in keys:  # in append order: the latest entry of a path wins
            value = values.get(key)
            seq = _entry_seq(prefix, key)
            assert seq is not None
            if value is None:
                continue  # removed between list and read
            if not isinstance(value, dict):
                raise CorruptDataError(f"ledger entry {key!r} is not a ledger entry")
            path = value.get("path")
            if not isinstance(path, str):
                raise CorruptDataError(f"ledger entry {key!r} has no path")
            previous = entries.get(path)
            if previous is not None:
                superseded.append(previous[0])
            entries[path] = (seq, value)
        return cls(storage, execution_id, retention, entries, superseded)

    def __len__(self) -> int:
        return len(self.memo)

    # --- Recorder ---------------------------------------------------------------------

    def replay(self, unit: Unit) -> Recorded | None:
        """The recorded output at ``unit.path``; an edited step drops its recorded subtree."""
        recorded = self.memo.peek(unit.path)
        if recorded is None:
            return None
        if recorded.identity == unit.identity:
            return Recorded(value=recorded.value, item_position=self._positions.get(unit.path))
        before = set(self._keys)
        self.memo.lookup(unit.path, unit.identity)  # the "rerun" policy: drops the subtree
        for path in before.difference(entry.path for entry in self.memo):
            seq = self._keys.pop(path, None)
            if seq is not None:
                self._stale.append(seq)  # deleted at the next write
        return None

    def last_recorded(self, match: Callable[[str], bool]) -> str | None:
        """The most recently recorded path among those ``match`` accepts, if any."""
        found = [(seq, path) for path, seq in self._keys.items() if match(path)]
        return max(found)[1] if found else None

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """The ledger records outcomes only."""
        return None

    async def started(self, unit: Unit) -> None:
        """Nothing is recorded when a step starts."""

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """Only successes are recorded: a step that raised runs again."""

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """Record the step's output, within the retention bounds.

        A write that fails is logged and swallowed, like a failing checkpoint: the step
        succeeded, and without its entry it only runs again on resume.
        """
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
        if unit.item_position is not None:
            entry["itemPosition"] = unit.item_position
        try:
            await self.storage.set(ledger_key(self.execution_id, seq), entry)
        except Exception as exc:
            self._warn_once(
                "write",
                "execution %r: step %r was not recorded in the ledger (%s); it will run "
                "again on resume. Further failed writes are not logged.",
                self.execution_id,
                unit.path,
                exc,
            )
            self.failed_writes += 1
            return
        previous = self._keys.get(unit.path)
        if previous is not None:
            self._stale.append(previous)
        self._keys[unit.path] = seq
        if unit.item_position is None:
            self._positions.pop(unit.path, None)
        else:
            self._positions[unit.path] = unit.item_position
        self.memo.record(unit.path, unit.identity, value)
        self.recorded += 1

    def _drop(self, kind: str, why: str) -> None:
        self.dropped += 1
        self._warn_once(
            kind,
            "execution %r: a step was not recorded in the ledger (%s exceeds %s); it will "
            "run again on resume. Further drops of this kind are not logged.",
            self.execution_id,
            why,
            kind,
        )

    def _warn_once(self, kind: str, message: str, *args: object) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            logger.warning(message, *args)

    async def _delete_stale(self) -> None:
        while self._stale:
            seq = self._stale[-1]
            try:
                await self.storage.delete(ledger_key(self.execution_id, seq))
            except Exception as exc:  # kept for the next write; harmless meanwhile
                self._warn_once(
                    "delete",
                    "execution %r: a superseded ledger entry was not deleted (%s)",
                    self.execution_id,
                    exc,
                )
                return
            self._stale.pop()

    @staticmethod
    async def clear_execution(storage: StorageAdapter, execution_id: str) -> None:
        """Remove every entry of the execution's ledger (without reading them)."""
        for key in await entry_keys(storage, execution_id):
            await storage.delete(key)

    async def clear(self) -> None:
        """Remove every entry of the execution."""
        await self.clear_execution(self.storage, self.execution_id)
        self.memo = MemoTable(scope=f"execution {self.execution_id!r}", on_mismatch="rerun")
        self._keys.clear()
        self._positions.clear()
        self._stale.clear()
