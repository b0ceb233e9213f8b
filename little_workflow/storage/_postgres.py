"""PostgreSQL backends: ``PostgresStorage`` (KV) and ``PostgresEventLog``.

Both run on a ``PostgresDatabase`` (pool, schema, migrations: see ``_postgres_db``).
Each ``open_*`` function opens its own; pass one database to both constructors to share
a pool, and close the database yourself.

How an append stays gap-free across processes: one transaction upserts the run's row in
``runs`` with ``last_seq = last_seq + n ... RETURNING last_seq``. The upsert takes the
row lock, so a concurrent appender to the same run (in this process or on another
machine) waits until this transaction ends and then reads the new ``last_seq``; the
events are inserted with the sequence numbers that reservation gave, in the same
transaction. A failed ``expected_seq`` check raises inside the transaction, which rolls
the reservation back. Rejected: ``SELECT max(seq) + 1`` (two appenders read the same
max; the primary key would then refuse one, forcing retries) and a PostgreSQL sequence
per run (sequences are not transactional, so a rollback would leave a gap).

Timestamps come from the server's clock (``statement_timestamp()``), the one clock
every worker shares, so ``list_runs`` orders runs created on different machines
consistently and a run's event timestamps never go backwards.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Sequence
from typing import Any, Final

import psycopg
from psycopg import sql

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.errors import ConflictError, CorruptDataError, LeaseLostError, StorageError
from little_workflow.events import Event, RecordedEvent, RunStatus, encode_event
from little_workflow.ids import validate_id
from little_workflow.storage._checksum import checked_records, data_crc
from little_workflow.storage._fence import current_fence
from little_workflow.storage._keys import prefix_upper_bound, validate_key, validate_prefix
from little_workflow.storage._postgres_db import PostgresDatabase
from little_workflow.storage._protocols import RunInfo, apply_run_index
from little_workflow.storage._url import StoreSpec
from little_workflow.storage._values import encode_value

__all__ = [
    "PostgresDatabase",
    "PostgresEventLog",
    "PostgresStorage",
    "open_postgres_event_log",
    "open_postgres_storage",
]


class _Backend:
    """What both backends share: the database, whether they own it, closing."""

    def __init__(self, database: PostgresDatabase, *, owns_database: bool) -> None:
        self._database = database
        self._owns_database = owns_database
        self._closed = False

    @property
    def database(self) -> PostgresDatabase:
        """The database this backend runs on (share it with another backend)."""
        return self._database

    def _open_database(self, doing: str) -> PostgresDatabase:
        if self._closed:
            raise StorageError(
                f"cannot {doing}: the store on {self._database.description} was closed"
            )
        return self._database

    async def close(self) -> None:
        """Stop using the database; close it too if this backend opened it."""
        if self._closed:
            return
        self._closed = True
        if self._owns_database:
            await self._database.close()


# --- key-value store -----------------------------------------------------------------

_GET: Final = "SELECT value FROM kv WHERE key = %s"
_GET_MANY: Final = "SELECT key, value FROM kv WHERE key = ANY(%s::text[])"
_SET: Final = (
    "INSERT INTO kv (key, value) VALUES (%s, %s)"
    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value"
)
_DELETE: Final = "DELETE FROM kv WHERE key = %s"
_LIST_ALL: Final = "SELECT key FROM kv ORDER BY key"
_LIST_RANGE: Final = "SELECT key FROM kv WHERE key >= %s AND key < %s ORDER BY key"
# Only for a prefix with no upper bound (made of U+10FFFF alone): never in practice.
_LIST_STARTS_WITH: Final = "SELECT key FROM kv WHERE starts_with(key, %s) ORDER BY key"


class PostgresStorage(_Backend):
    """A ``StorageAdapter`` in the ``kv`` table of a PostgreSQL schema.

    Values are stored as the exact JSON text ``encode_value`` produces. ``get_many`` is
    one statement for any number of keys; ``list`` is a range scan on the primary key.
    """

    def __init__(self, database: PostgresDatabase, *, owns_database: bool = False) -> None:
        """Use ``database``; with ``owns_database`` ``close()`` closes it too."""
        super().__init__(database, owns_database=owns_database)

    def _where(self, key: str) -> str:
        return f"value of key {key!r} in {self._database.description}"

    async def get(self, key: str) -> JsonValue | None:
        """The value at ``key``, or ``None``."""
        validate_key(key)
        doing = f"read key {key!r}"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(_GET, [key])
            row = await cursor.fetchone()
        return None if row is None else codec.loads(row[0], where=self._where(key))

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        """Every stored value among ``keys``, in one statement; missing keys are absent."""
        wanted = list(dict.fromkeys(validate_key(key) for key in keys))
        if not wanted:
            return {}
        doing = f"read {len(wanted)} keys"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(_GET_MANY, [wanted])
            rows = await cursor.fetchall()
        found: dict[str, str] = {row[0]: row[1] for row in rows}
        return {
            key: codec.loads(found[key], where=self._where(key)) for key in wanted if key in found
        }

    async def set(self, key: str, value: JsonValue) -> None:
        """Store ``value`` at ``key`` (an upsert: atomic whether or not it existed)."""
        text = encode_value(validate_key(key), value)
        doing = f"write key {key!r}"
        async with self._open_database(doing).connection(doing) as conn:
            await conn.execute(_SET, [key, text])

    async def delete(self, key: str) -> None:
        """Remove ``key`` if present."""
        validate_key(key)
        doing = f"delete key {key!r}"
        async with self._open_database(doing).connection(doing) as conn:
            await conn.execute(_DELETE, [key])

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Keys starting with exactly ``prefix``, sorted by code point."""
        validate_prefix(prefix)
        bound = prefix_upper_bound(prefix)
        doing = f"list keys under {prefix!r}"
        async with self._open_database(doing).connection(doing) as conn:
            if not prefix:
                cursor = await conn.execute(_LIST_ALL)
            elif bound is not None:
                cursor = await conn.execute(_LIST_RANGE, [prefix, bound])
            else:
                cursor = await conn.execute(_LIST_STARTS_WITH, [prefix])
            rows = await cursor.fetchall()
        return [row[0] for row in rows]


# --- event log -----------------------------------------------------------------------

# The whole append, one statement: ``lw_append`` (``_postgres_db`` migration 3; 6 adds checksums)
# reserves the run's next sequence numbers under its row lock (see the module
# docstring), checks ``expected_seq`` and inserts the events. One round trip instead of
# four (BEGIN, reserve, insert, COMMIT): on this machine kind that is most of what a
# durable step costs on Postgres.
# The two arrays go in binary (``%b``): psycopg's text format escapes every character of
# every element in Python, ~170 µs for a step's two events here; binary copies them.
_APPEND: Final = (
    "SELECT out_last_seq, out_ts FROM lw_append(%s, %s, %s, %s, %s, %b, %b, %b, %s, %s, %s)"
)
#: The SQLSTATE ``lw_append`` raises when ``expected_seq`` does not match.
_CONFLICT_SQLSTATE: Final = "LW409"
#: The SQLSTATE ``lw_append`` raises when the append's fence is no longer the lease.
_LEASE_LOST_SQLSTATE: Final = "LW410"
_READ: Final = (
    "SELECT seq, type, ts, data, checksum FROM events WHERE run_id = %s AND seq > %s"
    " ORDER BY seq LIMIT %s"
)
_LAST_SEQ: Final = "SELECT last_seq FROM runs WHERE run_id = %s"
_DELETE_RUNS: Final = "DELETE FROM runs WHERE run_id = ANY(%s::text[])"
_DELETE_EVENTS: Final = "DELETE FROM events WHERE run_id = ANY(%s::text[])"
_RUN_COLUMNS: Final = (
    "SELECT run_id, status, workflow, parent_run_id, created_at, updated_at, last_seq FROM runs"
)


class PostgresEventLog(_Backend):
    """An ``EventLog`` in the ``events`` and ``runs`` tables of a PostgreSQL schema.

    Safe for any number of processes on any number of machines: sequence numbers are
    reserved under the run's row lock, so they are 1, 2, 3, ... with no gap or duplicate.
    """

    def __init__(self, database: PostgresDatabase, *, owns_database: bool = False) -> None:
        """Use ``database``; with ``owns_database`` ``close()`` closes it too."""
        super().__init__(database, owns_database=owns_database)

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        """Append ``events`` in one transaction; see ``EventLog.append``.

        ``sync=False`` commits with ``synchronous_commit`` off for this transaction only:
        visible at once, flushed by the server's WAL writer a moment later. If the
        connection drops while committing, the outcome is unknown (as with any database);
        a caller that retries should pass ``expected_seq`` so a retry cannot duplicate.
        """
        validate_id(run_id, what="run id")
        types = [event.TYPE for event in events]
        data = [encode_event(event) for event in events]
        # The checksums' CRC part; lw_append folds in the seq and time it gives each row.
        crcs = [
            data_crc(run_id, type_name, text) for type_name, text in zip(types, data, strict=True)
        ]
        if not events:
            if expected_seq is not None:
                found = await self.last_seq(run_id)
                if found != expected_seq:
                    raise _conflict(run_id, expected_seq, found)
            return []
        index = apply_run_index(events)
        count = len(events)
        doing = f"append {count} event(s) to run {run_id!r}"
        fence = current_fence()
        params = (
            run_id,
            None if index.status is None else index.status.value,
            index.workflow,
            index.parent_run_id,
            expected_seq,
            types,
            data,
            crcs,
            sync,
            None if fence is None else fence.run_id,
            None if fence is None else fence.token,
        )
        async with self._open_database(doing).connection(doing) as conn:
            try:
                cursor = await conn.execute(_APPEND, params)
            except psycopg.Error as exc:
                if exc.sqlstate == _LEASE_LOST_SQLSTATE and fence is not None:
                    raise LeaseLostError(
                        f"cannot append to run {run_id!r}: the lease on run "
                        f"{fence.run_id!r} (token {fence.token}) expired or was taken over; "
                        "nothing was written"
                    ) from None
                if exc.sqlstate != _CONFLICT_SQLSTATE or expected_seq is None:
                    raise
                found = int(exc.diag.message_detail or -1)
                raise _conflict(run_id, expected_seq, found) from None
            row = await cursor.fetchone()
        assert row is not None  # a function with OUT parameters returns one row
        last = int(row[0])
        before = last - count
        return list(range(before + 1, last + 1))

    async def read(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[RecordedEvent]:
        """The run's events with ``seq > after``, in order (at most ``limit``)."""
        validate_id(run_id, what="run id")
        doing = f"read run {run_id!r}"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(
                _READ, [run_id, max(after, 0), None if limit is None else max(limit, 0)]
            )
            rows = await cursor.fetchall()
        where = self._database.description
        return checked_records(run_id, rows, after=after, where=where)

    async def last_seq(self, run_id: str) -> int:
        """The run's latest sequence number, 0 if it has none."""
        validate_id(run_id, what="run id")
        doing = f"read the last seq of run {run_id!r}"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(_LAST_SEQ, [run_id])
            row = await cursor.fetchone()
        return 0 if row is None else int(row[0])

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run's index row, or ``None`` if it has no events."""
        validate_id(run_id, what="run id")
        doing = f"read run {run_id!r}"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(_RUN_COLUMNS + " WHERE run_id = %s", [run_id])
            row = await cursor.fetchone()
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
        """Runs matching every given filter, newest first (ties: run id, descending)."""
        # Only the filters given go into the WHERE clause, so each combination gets a
        # plan that can use its index; "(%s IS NULL OR col = %s)" would defeat them.
        clauses: list[sql.Composable] = []
        params: list[Any] = []
        for column, value in (
            ("status", None if status is None else str(status)),
            ("workflow", workflow),
            ("parent_run_id", parent_run_id),
        ):
            if value is not None:
                clauses.append(sql.SQL("{} = %s").format(sql.Identifier(column)))
                params.append(value)
        if top_level:
            # The partial index runs_top_created_idx (migration 7) has this very WHERE.
            clauses.append(sql.SQL("parent_run_id IS NULL"))
        if before is not None:
            # A row comparison: the planner makes it a range of the (created_at DESC,
            # run_id DESC) indexes, so a deep page costs what the first one does.
            clauses.append(sql.SQL("(created_at, run_id) < (%s, %s)"))
            params.extend((float(before[0]), str(before[1])))
        where = sql.SQL(" WHERE ") + sql.SQL(" AND ").join(clauses) if clauses else sql.SQL("")
        query = sql.SQL("{}{} ORDER BY created_at DESC, run_id DESC LIMIT %s").format(
            sql.SQL(_RUN_COLUMNS), where
        )
        params.append(None if limit is None else max(limit, 0))
        doing = "list runs"
        async with self._open_database(doing).connection(doing) as conn:
            cursor = await conn.execute(query, params)
            rows = await cursor.fetchall()
        return [_run_info(row) for row in rows]

    async def delete_runs(self, run_ids: Iterable[str]) -> int:
        """Delete the named runs' events and index rows in one transaction.

        The ``runs`` rows go first: an append takes its run's row lock before it inserts
        events, so taking the row locks first here cannot deadlock with one.
        """
        wanted = list(dict.fromkeys(validate_id(run_id, what="run id") for run_id in run_ids))
        if not wanted:
            return 0
        doing = f"delete {len(wanted)} run(s)"
        async with self._open_database(doing).transaction(doing) as conn:
            await conn.execute(_DELETE_RUNS, [wanted])
            cursor = await conn.execute(_DELETE_EVENTS, [wanted])
            return max(cursor.rowcount, 0)


def _conflict(run_id: str, expected: int, found: int) -> ConflictError:
    if found < expected:
        # A log never shrinks under a writer unless the server lost commits it had
        # acknowledged: those made with synchronous_commit off (``sync=False``) die with
        # a server crash before the WAL writer flushes them.
        return ConflictError(
            f"run {run_id!r}: expected last seq {expected}, found {found}; events "
            "committed without sync were lost (the server crashed or was restarted "
            "immediately) or the run was deleted. Nothing was written; resume the run."
        )
    return ConflictError(
        f"run {run_id!r}: expected last seq {expected}, found {found}; "
        "another writer appended first"
    )


def _run_info(row: tuple[Any, ...]) -> RunInfo:
    run_id, status, workflow, parent_run_id, created_at, updated_at, last_seq = row
    try:
        run_status = None if status is None else RunStatus(status)
    except ValueError as exc:
        raise CorruptDataError(
            f"run {run_id!r}: the run index holds an unknown status {status!r}"
        ) from exc
    return RunInfo(
        run_id=run_id,
        status=run_status,
        workflow=workflow,
        parent_run_id=parent_run_id,
        created_at=float(created_at),
        updated_at=float(updated_at),
        last_seq=int(last_seq),
    )


# --- opening -------------------------------------------------------------------------


async def open_postgres_storage(spec: StoreSpec) -> PostgresStorage:
    """Open a ``PostgresStorage`` on its own ``PostgresDatabase``, closed with it."""
    return PostgresStorage(await PostgresDatabase.open(spec), owns_database=True)


async def open_postgres_event_log(spec: StoreSpec) -> PostgresEventLog:
    """Open a ``PostgresEventLog`` on its own ``PostgresDatabase``, closed with it."""
    return PostgresEventLog(await PostgresDatabase.open(spec), owns_database=True)
