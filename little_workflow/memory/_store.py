"""``MemoryStore``: namespaced key/value memory for agents, durable across kills.

It sits on a ``StorageAdapter``, so it is as durable as that store and inherits its key
rules and atomic writes. Which one is decided once, at the edge (``open_memory``): the
embedded default keeps the seed's layout, one file per entry under
``<data_dir>/memory/`` (the file backend); a runtime given a store URL (PostgreSQL)
keeps memory in that store's KV under ``memory/``, so every worker sees the same memory
and there is one store to back up.

Keys in the store are ``<prefix><namespace>/<key>``. A namespace is an id
(``[A-Za-z0-9][A-Za-z0-9_.:-]*``, no ``..``); a key is any storage key (``/`` makes a
hierarchy). Each value is stored in an envelope, ``{"v": 1, "value", "updatedAt",
"runId", "stepPath"}``: the version lets a later format be told apart, and the run and
step that wrote it are shown by the command line.

Replay. Memory is not memoized: it is state outside the run's log. A step that runs
again after a crash writes again, which is harmless for a ``put`` (the same value, or the
value the re-run computed) but not for a read-modify-write (an increment counted twice):
write values, not deltas. Inside an agent's session the ``recall`` tool's answers *are*
recorded (tool results are), so a resumed session sees what it saw before.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from dataclasses import dataclass

from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import CorruptDataError, InvalidKeyError, SchemaVersionError
from little_workflow.ids import validate_id
from little_workflow.storage import StorageAdapter, read_many, validate_key, validate_prefix

__all__ = ["MemoryEntry", "MemoryStore"]

_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEntry:
    """One remembered value, and who wrote it when."""

    namespace: str
    key: str
    value: JsonValue
    #: Seconds since the epoch of the latest write.
    updated_at: float
    run_id: str | None = None
    step_path: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The entry with camelCase keys, as the command line prints it."""
        return {
            "namespace": self.namespace,
            "key": self.key,
            "value": self.value,
            "updatedAt": self.updated_at,
            "runId": self.run_id,
            "stepPath": self.step_path,
        }


class MemoryStore:
    """Namespaced memory over a ``StorageAdapter`` (see the module docstring).

    ``prefix`` places it inside a shared store (``"memory/"``); ``clock`` gives
    ``updatedAt``. ``bound(run_id, step_path)`` is the same store, recording that run
    and step as the writer of what it puts.
    """

    def __init__(
        self,
        storage: StorageAdapter,
        *,
        prefix: str = "",
        clock: Callable[[], float] = time.time,
        run_id: str | None = None,
        step_path: str | None = None,
    ) -> None:
        self.storage = storage
        self.prefix = validate_prefix(prefix)
        self._clock = clock
        self.run_id = run_id
        self.step_path = step_path

    def bound(self, run_id: str, step_path: str) -> MemoryStore:
        """This store, recording ``run_id`` and ``step_path`` as the writer of its puts."""
        return MemoryStore(
            self.storage,
            prefix=self.prefix,
            clock=self._clock,
            run_id=validate_id(run_id, what="run id"),
            step_path=step_path,
        )

    def _key(self, namespace: str, key: str) -> str:
        validate_id(namespace, what="memory namespace")
        try:
            validate_key(key)
        except InvalidKeyError as exc:
            raise InvalidKeyError(f"memory key: {exc.message}") from exc
        return validate_key(f"{self.prefix}{namespace}/{key}")

    async def get(self, namespace: str, key: str) -> JsonValue | None:
        """The value remembered at ``key`` of ``namespace``, or ``None``."""
        entry = await self.entry(namespace, key)
        return None if entry is None else entry.value

    async def entry(self, namespace: str, key: str) -> MemoryEntry | None:
        """The entry at ``key`` of ``namespace`` (value, writer, time), or ``None``."""
        stored_key = self._key(namespace, key)
        stored = await self.storage.get(stored_key)
        return None if stored is None else _entry(namespace, key, stored, stored_key)

    async def put(self, namespace: str, key: str, value: object) -> MemoryEntry:
        """Remember ``value`` (plain JSON; ``None`` too) at ``key`` of ``namespace``.

        Replaces what was there, atomically. ``InvalidIdError`` for a bad namespace,
        ``InvalidKeyError`` for a bad key, ``InvalidValueError`` for a value that is not
        JSON: refused before anything is written.
        """
        stored_key = self._key(namespace, key)
        check_json_value(value, where=f"memory {namespace}/{key}")
        entry = MemoryEntry(
            namespace=namespace,
            key=key,
            value=value,  # type: ignore[arg-type]  # checked just above
            updated_at=self._clock(),
            run_id=self.run_id,
            step_path=self.step_path,
        )
        envelope: dict[str, JsonValue] = {
            "v": _VERSION,
            "value": entry.value,
            "updatedAt": entry.updated_at,
            "runId": entry.run_id,
            "stepPath": entry.step_path,
        }
        await self.storage.set(stored_key, envelope)
        return entry

    async def delete(self, namespace: str, key: str) -> None:
        """Forget ``key`` of ``namespace``; forgetting what is not there is not an error."""
        await self.storage.delete(self._key(namespace, key))

    async def list(self, namespace: str, prefix: str = "") -> builtins.list[MemoryEntry]:
        """The entries of ``namespace`` whose key starts with ``prefix``, sorted by key."""
        validate_id(namespace, what="memory namespace")
        base = f"{self.prefix}{namespace}/"
        keys = await self.storage.list(base + validate_prefix(prefix))
        values = await read_many(self.storage, keys)
        return [
            _entry(namespace, stored_key[len(base) :], values[stored_key], stored_key)
            for stored_key in keys
            if stored_key in values  # deleted between the two reads
        ]

    async def namespaces(self) -> builtins.list[str]:
        """Every namespace holding at least one entry, sorted."""
        keys = await self.storage.list(self.prefix)
        return sorted({key[len(self.prefix) :].split("/", 1)[0] for key in keys})


def _entry(namespace: str, key: str, stored: JsonValue, stored_key: str) -> MemoryEntry:
    if not isinstance(stored, dict) or "v" not in stored:
        raise CorruptDataError(f"memory entry {stored_key!r} is not a memory envelope")
    if stored["v"] != _VERSION:
        raise SchemaVersionError(
            f"memory entry {stored_key!r} has format {stored['v']!r}; this program reads "
            f"format {_VERSION}"
        )
    updated, run_id, step_path = (
        stored.get("updatedAt"),
        stored.get("runId"),
        stored.get("stepPath"),
    )
    if (
        not isinstance(updated, int | float)
        or not isinstance(run_id, str | None)
        or not isinstance(step_path, str | None)
    ):
        raise CorruptDataError(f"memory entry {stored_key!r} is malformed")
    return MemoryEntry(
        namespace=namespace,
        key=key,
        value=stored.get("value"),
        updated_at=float(updated),
        run_id=run_id,
        step_path=step_path,
    )
