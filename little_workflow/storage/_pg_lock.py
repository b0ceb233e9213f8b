"""``PostgresRunLock``: a run lock that every machine sharing a PostgreSQL store sees.

File locks (``durable/_locks.py``) are per machine. When the store is PostgreSQL, two
processes on two machines may ``resume`` the same run; this lock makes the second wait
(or give up with ``LockTimeoutError``), as a file lock does on one machine. It is a
session-level advisory lock (``pg_try_advisory_lock``) held on one pooled connection for
as long as the run is driven (one connection holds all of a process's run locks): the
server releases it when that connection ends, however the process ends, so a killed
holder frees it at once.

What it does not do is fence: a holder cut off from the server loses the lock with its
connection while it may still be running. Its next append then fails (its connection is
gone), and an append made on a fresh connection after another process took the run over
is refused by ``expected_seq`` (the log's next seq moved on). Workers get real fencing
tokens (``_queue.py``); this lock is for ``run``/``resume`` by hand.

The lock key is a 64-bit hash of the schema and the run id, so stores in different schemas
of one database never share a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
import weakref
from collections.abc import Iterable

import psycopg
from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from little_workflow.errors import LockTimeoutError
from little_workflow.storage._postgres_db import PostgresDatabase

__all__ = ["PostgresRunLock", "held_run_locks"]

_HOLDER = """
SELECT a.pid, a.application_name, COALESCE(host(a.client_addr), 'local'), a.backend_start
FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.classid = ((%(key)s::bigint >> 32) & 4294967295)::oid
  AND l.objid = (%(key)s::bigint & 4294967295)::oid AND l.objsubid = 1
LIMIT 1
"""

# Every run lock granted in this database now, as the signed key pg_try_advisory_lock took
# (a bigint key is stored as its high and low 32 bits in classid and objid).
_HELD = """
SELECT (l.classid::bigint << 32) | l.objid::bigint
FROM pg_catalog.pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
"""


def lock_key(schema: str, run_id: str) -> int:
    """The advisory-lock key of ``run_id`` in ``schema`` (a signed 64-bit integer)."""
    digest = hashlib.sha256(f"little-workflow:run:{schema}:{run_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class _LockSession:
    """One pooled connection holding every run lock this process holds on one database.

    Advisory locks belong to a session, and one session can hold any number of them, so
    a process driving many runs at once needs one connection for all their locks, not
    one each (which drained the pool: the soak in docs/faults.md). The connection is
    taken when the first lock is and given back when the last goes.
    """

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database
        self._mutex = asyncio.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._conn: AsyncConnection[TupleRow] | None = None
        self._held: dict[int, int] = {}

    async def try_lock(self, key: int, doing: str) -> bool:
        async with self._mutex:
            conn = await self._connection(doing)
            try:
                cursor = await conn.execute("SELECT pg_try_advisory_lock(%s)", [key])
                row = await cursor.fetchone()
            except BaseException as exc:
                await self._close(exc)
                raise
            if row is not None and row[0]:
                self._held[key] = self._held.get(key, 0) + 1
                return True
            if not self._held:
                await self._close(None)
            return False

    async def unlock(self, key: int) -> None:
        async with self._mutex:
            count = self._held.pop(key, 0)
            if count == 0 or self._conn is None:
                return
            if count > 1:
                self._held[key] = count - 1
            with contextlib.suppress(psycopg.Error, OSError):
                await self._conn.execute("SELECT pg_advisory_unlock(%s)", [key])
            if not self._held:
                await self._close(None)

    async def _connection(self, doing: str) -> AsyncConnection[TupleRow]:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        self._held.clear()  # a connection that ended took its locks with it
        stack = contextlib.AsyncExitStack()
        self._conn = await stack.enter_async_context(self._database.connection(doing))
        self._stack = stack
        return self._conn

    async def _close(self, exc: BaseException | None) -> None:
        stack, conn = self._stack, self._conn
        self._stack = self._conn = None
        if stack is None:
            return
        if conn is not None and exc is None:
            # Back to the pool without locks: a pooled connection keeps its session.
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.execute("SELECT pg_advisory_unlock_all()")
        if exc is None:
            await stack.aclose()
        elif not await stack.__aexit__(type(exc), exc, exc.__traceback__):
            return  # the caller re-raises; a driver error was translated on the way


_SESSIONS: weakref.WeakKeyDictionary[PostgresDatabase, _LockSession] = weakref.WeakKeyDictionary()


def _session(database: PostgresDatabase) -> _LockSession:
    session = _SESSIONS.get(database)
    if session is None:
        session = _SESSIONS[database] = _LockSession(database)
    return session


class PostgresRunLock:
    """An exclusive lock on one run of a PostgreSQL store; see the module docstring."""

    def __init__(self, database: PostgresDatabase, run_id: str, *, purpose: str) -> None:
        self._database = database
        self.run_id = run_id
        self.purpose = purpose
        self.key = lock_key(database.schema, run_id)
        self._held = False

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._held

    async def try_acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        if self._held:
            raise RuntimeError(f"{self.purpose}: the lock is already held by this object")
        self._held = await _session(self._database).try_lock(self.key, f"lock {self.purpose}")
        return self._held

    async def acquire(self, *, timeout: float | None = None, poll: float = 0.02) -> None:
        """Wait until the lock is free and take it; ``LockTimeoutError`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while not await self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                raise LockTimeoutError(
                    f"{self.purpose} is held by {await self.holder() or 'another process'} "
                    f"(on {self._database.description}); gave up after waiting {timeout:g} s"
                )
            pause = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
            await asyncio.sleep(pause)
            delay = min(delay * 1.5, 0.25)

    async def holder(self) -> str | None:
        """Who holds the lock, as the server sees it (backend pid, application, host)."""
        async with self._database.connection(f"find the holder of {self.purpose}") as conn:
            cursor = await conn.execute(_HOLDER, {"key": self.key})
            row = await cursor.fetchone()
        if row is None:
            return None
        pid, application, host, _ = row
        return f"a session of {application or 'a client'} on {host} (server pid {pid})"

    async def release(self) -> None:
        """Release the lock. Idempotent."""
        if self._held:
            self._held = False
            await _session(self._database).unlock(self.key)


async def held_run_locks(database: PostgresDatabase, run_ids: Iterable[str]) -> set[str]:
    """Which of ``run_ids`` a session (of any process, on any machine) holds the lock of.

    One query for all of them, whatever their number: ``runs`` asks this of every
    unfinished run it lists.
    """
    keys = {lock_key(database.schema, run_id): run_id for run_id in run_ids}
    if not keys:
        return set()
    async with database.connection("list the run locks held") as conn:
        cursor = await conn.execute(_HELD)
        rows = await cursor.fetchall()
    return {keys[row[0]] for row in rows if row[0] in keys}
