"""SQLite backends: ``SqliteStorage`` (KV) and ``SqliteEventLog``, over one ``SqliteDatabase``.

The embedded default. Both may share one database file (and one ``SqliteDatabase``);
the owner of the database closes it. How writes are run, and why, is in
``_sqlite_db.py``.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import struct
import time
from collections.abc import Iterable, Sequence
from typing import Final
from zlib import crc32

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.errors import ConflictError, CorruptDataError
from little_workflow.events import (
    Event,
    RecordedEvent,
    RunIndexUpdate,
    RunStatus,
    encode_event,
)
from little_workflow.ids import validate_id
from little_workflow.storage._checksum import MASK, checked_records, data_crc
from little_workflow.storage._deflate import InflateError, deflated, inflated
from little_workflow.storage._fence import current_fence
from little_workflow.storage._keys import prefix_upper_bound, validate_key, validate_prefix
from little_workflow.storage._protocols import RunInfo, apply_run_index
from little_workflow.storage._queue_sqlite import check_fence
from little_workflow.storage._sqlite_db import SqliteDatabase
from little_workflow.storage._url import StoreSpec
from little_workflow.storage._values import encode_value

__all__ = [
    "SqliteEventLog",
    "SqliteStorage",
    "open_sqlite_event_log",
    "open_sqlite_storage",
]


class SqliteStorage:
    """A ``StorageAdapter`` in the ``kv`` table of a SQLite database."""

    def __init__(self, db: SqliteDatabase, *, owns_database: bool = False) -> None:
        self.db = db
        self._owns_database = owns_database

    def _where(self, key: str) -> str:
        return f"key {key!r} in {str(self.db.path)!r}"

    async def get(self, key: str) -> JsonValue | None:
        """The value at ``key``, or ``None``."""
        validate_key(key)
        row = await self.db.read(
            lambda conn: conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        )
        return None if row is None else codec.loads(row[0], where=self._where(key))

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        """Stored values among ``keys`` in one query; missing keys are absent."""
        wanted = [validate_key(key) for key in keys]
        if not wanted:
            return {}
        # One statement for any number of keys: a JSON array expanded by json_each avoids
        # SQLite's limit on bound parameters.
        rows = await self.db.read(
            lambda conn: conn.execute(
                "SELECT key, value FROM kv WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(wanted),),
            ).fetchall()
        )
        return {key: codec.loads(text, where=self._where(key)) for key, text in rows}

    async def set(self, key: str, value: JsonValue) -> None:
        """Store ``value`` at ``key``."""
        text = encode_value(validate_key(key), value)
        await self.db.write(
            lambda conn: conn.execute(
                "INSERT INTO kv (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, text),
            )
        )

    async def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        validate_key(key)
        await self.db.write(lambda conn: conn.execute("DELETE FROM kv WHERE key = ?", (key,)))

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Keys starting with ``prefix``, sorted by code point (SQLite's BINARY order)."""
        validate_prefix(prefix)
        bound = prefix_upper_bound(prefix)

        def query(conn: sqlite3.Connection) -> builtins.list[str]:
            if bound is None:
                cursor = conn.execute("SELECT key FROM kv WHERE key >= ? ORDER BY key", (prefix,))
            else:
                cursor = conn.execute(
                    "SELECT key FROM kv WHERE key >= ? AND key < ? ORDER BY key", (prefix, bound)
                )
            return [key for (key,) in cursor if key.startswith(prefix)]

        return await self.db.read(query)

    async def close(self) -> None:
        """Close the database if this store owns it."""
        if self._owns_database:
            await self.db.close()


# last_seq and updated_at come from the run's newest event (one index seek each).
_RUN_SELECT = (
    "SELECT r.run_id, r.status, r.workflow, r.parent_run_id, r.created_at, "
    "COALESCE((SELECT e.ts FROM events e WHERE e.run_id = r.run_id "
    "ORDER BY e.seq DESC LIMIT 1), r.created_at), "
    "COALESCE((SELECT MAX(e.seq) FROM events e WHERE e.run_id = r.run_id), 0) "
    "FROM runs r"
)


def _run_info(row: tuple[str, str | None, str | None, str | None, float, float, int]) -> RunInfo:
    run_id, status, workflow, parent, created_at, updated_at, last_seq = row
    return RunInfo(
        run_id=run_id,
        status=None if status is None else RunStatus(status),
        workflow=workflow,
        parent_run_id=parent,
        created_at=created_at,
        updated_at=updated_at,
        last_seq=last_seq,
    )


_NO_UPDATE = RunIndexUpdate()
_pack_double = struct.Struct(">d").pack
_unpack_quad = struct.Struct(">q").unpack


# An event's ``data`` of at least this many bytes is stored deflated (a BLOB; the rest
# stay TEXT) when that saves an eighth of it (``_deflate.py``). Rows share pages only whole,
# and an agent's events carry its messages: at 1 KiB turns the events table was 2x the
# conversation, mostly text a model or a tool wrote, which deflates to about 60%
# (docs/performance.md, "Bytes on disk per message size"). A trivial step's rows are
# shorter and never pay for a try. The checksum covers the JSON text, not what is stored.
_DEFLATE_MIN: Final = 256
# SQLite's own limit on a value (SQLITE_MAX_LENGTH): no row inflates past it.
_MAX_DATA: Final = 1_000_000_000


def _deflated(data: str) -> str | bytes:
    packed = deflated(data.encode())
    return data if packed is None else packed


def _inflated(run_id: str, row: tuple[object, ...], where: str) -> tuple[object, ...]:
    seq, type_name, ts, data, checksum = row
    assert isinstance(data, bytes)
    try:
        text = inflated(data, limit=_MAX_DATA).decode()
    except (InflateError, UnicodeDecodeError) as exc:
        raise CorruptDataError(
            f"run {run_id!r} seq {seq} in {where}: the stored event does not inflate ({exc}); "
            "the row was changed after it was written"
        ) from exc
    return seq, type_name, ts, text, checksum


class SqliteEventLog:
    """An ``EventLog`` in the ``events`` and ``runs`` tables of a SQLite database."""

    def __init__(self, db: SqliteDatabase, *, owns_database: bool = False) -> None:
        self.db = db
        self._owns_database = owns_database

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        """Append ``events`` in one transaction; see ``EventLog.append``."""
        validate_id(run_id, what="run id")
        fence = current_fence()
        # Encoding happens before the write lock is taken, so the lock is held only for
        # the inserts and the commit.
        encoded = [(event.TYPE, encode_event(event)) for event in events]
        # The checksums' CRC part, outside the lock too; the seq and time are folded in
        # once known (``_checksum.py``).
        # (``data_crc``, inlined: a call per event costs more than the CRC itself.)
        try:
            crcs = [crc32(f"{run_id}\0{type_name}\0{data}".encode()) for type_name, data in encoded]
        except UnicodeEncodeError:
            crcs = [data_crc(run_id, type_name, data) for type_name, data in encoded]
        stored = [data if len(data) < _DEFLATE_MIN else _deflated(data) for _, data in encoded]
        update = apply_run_index(events)
        status = None if update.status is None else update.status.value

        has_index_update = update != _NO_UPDATE

        def transaction(conn: sqlite3.Connection) -> list[int]:
            if fence is not None:
                # Under the same write lock as every claim: no claim can replace the
                # lease between this check and the commit.
                check_fence(conn, fence, appending_to=run_id)
            # Under BEGIN IMMEDIATE no other writer can interleave, so max + 1 is the
            # next seq for this process and every other one.
            (found,) = conn.execute(
                "SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
            last: int = found or 0
            if expected_seq is not None and expected_seq != last:
                raise ConflictError(
                    f"run {run_id!r}: expected last seq {expected_seq}, found {last}; "
                    "another writer appended first. Nothing was written."
                )
            if not encoded:
                return []
            now = time.time()
            if found is None:
                conn.execute(
                    "INSERT INTO runs (run_id, status, workflow, parent_run_id, created_at) "
                    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                    (run_id, status, update.workflow, update.parent_run_id, now),
                )
            elif has_index_update:
                conn.execute(
                    "UPDATE runs SET status = COALESCE(?, status), "
                    "workflow = COALESCE(?, workflow), "
                    "parent_run_id = COALESCE(?, parent_run_id) WHERE run_id = ?",
                    (status, update.workflow, update.parent_run_id, run_id),
                )
            # fold(seq, now) (``_checksum.py``), inlined: this runs for every append.
            bits: int = _unpack_quad(_pack_double(now))[0]
            at = bits ^ (bits >> 32)
            if len(encoded) == 1:
                type_name = encoded[0][0]
                seq = last + 1
                conn.execute(
                    "INSERT INTO events (run_id, seq, type, ts, data, checksum) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        seq,
                        type_name,
                        now,
                        stored[0],
                        (crcs[0] ^ at ^ seq ^ (seq >> 32)) & MASK,
                    ),
                )
            else:
                conn.executemany(
                    "INSERT INTO events (run_id, seq, type, ts, data, checksum) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (run_id, seq, type_name, now, data, (crc ^ at ^ seq ^ (seq >> 32)) & MASK)
                        for seq, (type_name, _), data, crc in zip(
                            range(last + 1, last + 1 + len(encoded)),
                            encoded,
                            stored,
                            crcs,
                            strict=True,
                        )
                    ],
                )
            return list(range(last + 1, last + 1 + len(encoded)))

        return await self.db.write(transaction, sync=sync, group=run_id)

    async def read(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        """Events with ``seq > after``, in order, in one query."""
        validate_id(run_id, what="run id")
        rows = await self.db.read(
            lambda conn: conn.execute(
                "SELECT seq, type, ts, data, checksum FROM events WHERE run_id = ? AND seq > ? "
                "ORDER BY seq LIMIT ?",
                (run_id, after, -1 if limit is None else limit),
            ).fetchall()
        )
        where = repr(str(self.db.path))
        rows = [_inflated(run_id, row, where) if type(row[3]) is bytes else row for row in rows]
        return checked_records(run_id, rows, after=after, where=where)

    async def last_seq(self, run_id: str) -> int:
        """The run's latest sequence number, 0 if none."""
        validate_id(run_id, what="run id")
        row = await self.db.read(
            lambda conn: conn.execute(
                "SELECT MAX(seq) FROM events WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return int(row[0] or 0)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's index row, or ``None``."""
        validate_id(run_id, what="run id")
        row = await self.db.read(
            lambda conn: conn.execute(f"{_RUN_SELECT} WHERE r.run_id = ?", (run_id,)).fetchone()
        )
        return None if row is None else _run_info(row)

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
        # Each filter has an index that ends in (created_at, run_id) (migration 8), so a
        # page reads its rows in order and stops: no sort, however many runs match.
        clauses: list[str] = []
        params: list[object] = []
        if top_level:
            # Spelled as the partial index's WHERE, or SQLite does not use it.
            clauses.append("r.parent_run_id IS NULL")
        if before is not None:
            clauses.append("(r.created_at, r.run_id) < (?, ?)")
            params.extend((float(before[0]), str(before[1])))
        for column, value in (
            ("status", None if status is None else RunStatus(status).value),
            ("workflow", workflow),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:
                clauses.append(f"r.{column} = ?")
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        params.append(-1 if limit is None else limit)
        sql = f"{_RUN_SELECT} {where} ORDER BY r.created_at DESC, r.run_id DESC LIMIT ?"
        rows = await self.db.read(lambda conn: conn.execute(sql, params).fetchall())
        return [_run_info(row) for row in rows]

    async def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the named runs' events and index rows in one transaction."""
        wanted = json.dumps(list(dict.fromkeys(validate_id(r, what="run id") for r in run_ids)))

        def transaction(conn: sqlite3.Connection) -> int:
            # One JSON array expanded by json_each: no limit on the number of ids.
            deleted = conn.execute(
                "DELETE FROM events WHERE run_id IN (SELECT value FROM json_each(?))", (wanted,)
            ).rowcount
            conn.execute(
                "DELETE FROM runs WHERE run_id IN (SELECT value FROM json_each(?))", (wanted,)
            )
            return int(deleted)

        return await self.db.write(transaction, sync=True)

    async def close(self) -> None:
        """Close the database if this log owns it."""
        if self._owns_database:
            await self.db.close()


async def open_sqlite_storage(spec: StoreSpec) -> SqliteStorage:
    """Open a ``SqliteStorage`` that owns its database."""
    return SqliteStorage(await SqliteDatabase.open(spec), owns_database=True)


async def open_sqlite_event_log(spec: StoreSpec) -> SqliteEventLog:
    """Open a ``SqliteEventLog`` that owns its database."""
    return SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
