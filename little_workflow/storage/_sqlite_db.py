"""One SQLite database file in WAL mode, shared by the KV store and the event log.

How writes run, and why:

* **In the event-loop thread, when the database is free.** A hop to a worker thread
  (``asyncio.to_thread``) costs about 100 µs on these machines, as much as the fsync of
  a commit. Each write transaction is synchronous Python with no ``await`` inside, so
  coroutines of this loop cannot interleave within it. The loop is blocked for the
  length of the commit (one fsync with ``synchronous=FULL``), which is the price of the
  durable step itself.
* **In one worker thread, when another process holds the write lock.** The loop's
  connection has ``busy_timeout=0``: a busy database fails ``BEGIN IMMEDIATE`` at once,
  and the transaction is re-run on a second connection, in a single worker thread, whose
  busy handler waits (up to ``busy_timeout``) without blocking the loop. The single
  thread keeps this process's contended writes in order. A write that waits longer than
  ``busy_timeout`` raises ``StorageBusyError``; ``database is locked`` never escapes.
* **Grouped, in the worker thread, when several writers are ready at once.** A write
  that names a ``group`` (the event log passes the run id) and follows a write of another
  group, or any write made while a group is under way, is queued; one leader task takes
  every write queued, runs them in one transaction in the worker thread, each inside a
  ``SAVEPOINT`` of its own (one that raises is rolled back alone and its error goes to
  its caller only), and commits them with one fsync. Each caller returns once that
  commit has. The callers a commit resolves run on to their next write before the
  leader takes the next batch, so with N runs driven at once each commit (one fsync)
  carries up to N appends. A write whose caller is cancelled before its batch is taken
  writes nothing. One run alone always writes to the group it wrote to last, so it
  keeps the inline path and pays nothing for this (no task, no thread hop); nor does a
  store with ``synchronous=NORMAL``, or a write asked with ``sync=False``, start a
  group: a commit without fsync costs less than the hop.

Rejected: aiosqlite-style "every call in a thread" (the hop doubles the cost of a
durable step), and a blocking busy handler on the loop's connection (one slow writer in
another process would freeze every coroutine here for up to the busy timeout).
Rejected for grouping (measured in docs/performance.md, "Group commit across runs"): a
fixed wait for more writers (it delays every commit, a lone run's too); grouping whenever
more than one run is open (a worker whose other runs wait on timers would pay the hop on
every step for nothing); pipelining, a batch sent to the thread while the loop still
computes the callers of the last (the thread cannot start before the loop lets go of the
GIL, so the batch waits for the loop anyway); and committing without fsync in the loop,
then syncing the WAL file from a thread (other connections would read events that a
power loss can take back).

Durability: ``synchronous=FULL`` syncs the WAL at every commit. A write asked with
``sync=False`` commits with ``synchronous=NORMAL`` (no fsync); in WAL mode, the next
FULL commit's fsync makes every earlier frame durable with it, because the WAL is one
file written in order.

Schema: an append-only list of migrations whose index + 1 is the version, recorded in
``lw_schema_migrations``; applied under ``BEGIN IMMEDIATE`` so two processes opening a
new file at once do not both migrate.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from little_workflow.errors import (
    CorruptDataError,
    SchemaVersionError,
    StorageBusyError,
    StorageError,
    StorageUnavailableError,
)
from little_workflow.storage._dirs import make_private_dirs
from little_workflow.storage._url import StoreSpec

__all__ = ["MIGRATIONS", "SqliteDatabase"]

T = TypeVar("T")

#: A write queued for the next group commit: its work, ``sync``, group and caller's future.
_Request = tuple[Callable[[sqlite3.Connection], Any], bool, str | None, "asyncio.Future[Any]"]


class _TransactionLost(Exception):
    """A grouped write's error made SQLite roll back the whole transaction (I/O, full disk)."""

    def __init__(self, index: int, error: BaseException) -> None:
        super().__init__(str(error))
        self.index = index
        self.error = error


#: Append-only: never edit or reorder an entry; add a new one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE TABLE kv (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        # The run index. Its last seq and update time are read from ``events`` rather
        # than kept here: updating this row on every append would add a second page to
        # every commit, nearly doubling the cost of a non-fsynced append.
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            status TEXT,
            workflow TEXT,
            parent_run_id TEXT,
            created_at REAL NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX runs_by_created ON runs (created_at, run_id)",
        "CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL",
        """CREATE TABLE events (
            run_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            type TEXT NOT NULL,
            ts REAL NOT NULL,
            data TEXT NOT NULL,
            PRIMARY KEY (run_id, seq)
        ) WITHOUT ROWID""",
    ),
    # The run queue (``_queue_sqlite.py``). ``holder`` is the claiming process's identity
    # (pid and start time, JSON): a lease held by a dead process is free at once.
    (
        """CREATE TABLE run_queue (
            run_id TEXT PRIMARY KEY,
            state TEXT NOT NULL CHECK (state IN ('queued', 'leased', 'done')),
            submitted_at REAL NOT NULL,
            parent_run_id TEXT,
            worker_id TEXT,
            lease_token INTEGER,
            lease_expires_at REAL,
            holder TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            finished_at REAL,
            outcome TEXT
        )""",
        "CREATE INDEX run_queue_by_state ON run_queue (state, submitted_at)",
        # One row: the last lease token issued. Tokens only grow, even past ``forget``.
        "CREATE TABLE lw_lease_tokens (last INTEGER NOT NULL)",
        "INSERT INTO lw_lease_tokens (last) VALUES (0)",
        """CREATE TABLE workers (
            worker_id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            concurrency INTEGER NOT NULL,
            started_at REAL NOT NULL,
            heartbeat_at REAL NOT NULL,
            stopped_at REAL
        )""",
    ),
    # 3: queues and limits (``storage/_limits.py``): each submitted run names its queue; a
    # queue's or a model slot's limit is a row of ``lw_limits``; ``lw_limit_starts`` holds
    # the starts (claims, permits) of the last rate period; ``lw_permits`` the permits of
    # limited model slots held now (``holder``: the process, as in ``run_queue``).
    (
        "ALTER TABLE run_queue ADD COLUMN queue TEXT NOT NULL DEFAULT 'default'",
        "CREATE INDEX run_queue_queued_by_queue ON run_queue (queue, submitted_at) "
        "WHERE state = 'queued' AND parent_run_id IS NULL",
        """CREATE TABLE lw_limits (
            kind TEXT NOT NULL CHECK (kind IN ('queue', 'model')),
            name TEXT NOT NULL,
            concurrency INTEGER,
            rate_count INTEGER,
            rate_period REAL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (kind, name)
        ) WITHOUT ROWID""",
        "CREATE TABLE lw_limit_starts (kind TEXT NOT NULL, name TEXT NOT NULL, at REAL NOT NULL)",
        "CREATE INDEX lw_limit_starts_by_name ON lw_limit_starts (kind, name, at)",
        """CREATE TABLE lw_permits (
            permit_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            holder TEXT NOT NULL,
            expires_at REAL NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX lw_permits_by_name ON lw_permits (kind, name)",
    ),
    # 4: a queued run claimable only from ``not_before`` (a run waiting for a timer or an
    # event, docs/waits.md); NULL: at once.
    ("ALTER TABLE run_queue ADD COLUMN not_before REAL",),
    # 5: event checksums (``_checksum.py``): NULL in the rows written before, which are
    # read unverified; every append from here on fills it.
    ("ALTER TABLE events ADD COLUMN checksum INTEGER",),
    # 6: blobs of up to 64 KiB (``_blobs_sqlite.py``); larger ones stay files. A rowid
    # table: rows up to about a page stay in their leaf, not in overflow pages.
    (
        """CREATE TABLE blobs (
            digest TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            data BLOB NOT NULL,
            created_at REAL NOT NULL
        )""",
    ),
    # 7: an event's ``data`` may be a BLOB, its JSON deflated (``_sqlite.py``). Nothing
    # to change in the rows written before, which stay TEXT and read as they are: the
    # version is what makes an older little-workflow refuse the store rather than read
    # deflated rows as damaged ones.
    ("SELECT 1",),
    # 8: the runs list at any size (docs/performance.md, "A data directory with many
    # runs"). Each filter of ``list_runs`` gets an index ending in (created_at, run_id),
    # the list's order, so a page is read in order and stops after its rows: at 100,000
    # runs the unfiltered top-level list scanned ``runs_by_created`` skipping sub-runs,
    # and a status or workflow filter read every run of the store to keep a few. The
    # partial index serves the default list (top-level runs). The parent index gains
    # the order too: a map of sub-runs may give one parent thousands of children.
    (
        "CREATE INDEX runs_top_by_created ON runs (created_at, run_id) WHERE parent_run_id IS NULL",
        "CREATE INDEX runs_by_status ON runs (status, created_at, run_id)",
        "CREATE INDEX runs_by_workflow ON runs (workflow, created_at, run_id)",
        "CREATE INDEX runs_by_parent_created ON runs (parent_run_id, created_at, run_id) "
        "WHERE parent_run_id IS NOT NULL",
        "DROP INDEX runs_by_parent",
    ),
)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    text = str(exc)
    return "database is locked" in text or "database is busy" in text


class SqliteDatabase:
    """An open SQLite file: two connections (loop, waiting), migrations, write helpers.

    Use from one event loop. Close it with ``await db.close()``.
    """

    def __init__(self, spec: StoreSpec) -> None:
        if spec.kind != "sqlite" or spec.path is None:
            raise ValueError("SqliteDatabase needs a sqlite StoreSpec")
        self.path: Path = spec.path
        self.synchronous = spec.synchronous
        self.busy_timeout = spec.busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._waiting_conn: sqlite3.Connection | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._conn_synchronous = spec.synchronous
        self._lock = threading.Lock()
        # Writes handed to the worker thread and not finished yet. While there are any,
        # reads go through the same thread, after them: a caller whose write was
        # cancelled mid-wait can still read what it committed.
        self._pending_writes = 0
        self._waiting_synchronous: str | None = None
        # Group commit (see the module docstring): the group of the last grouped write,
        # the writes waiting for the next batch, and the task that commits them.
        self._last_group: str | None = None
        self._queue: list[_Request] = []
        self._leader: asyncio.Task[None] | None = None

    # --- opening ----------------------------------------------------------------------

    @classmethod
    async def open(cls, spec: StoreSpec) -> SqliteDatabase:
        """Open (creating if needed) the database file and bring its schema up to date."""
        db = cls(spec)
        try:
            db._open()
        except BaseException:
            db._close_connections()
            raise
        return db

    def _open(self) -> None:
        parent = self.path.parent
        try:
            if not parent.exists():
                make_private_dirs(parent)
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create the directory {str(parent)!r} for the SQLite database: {exc}"
            ) from exc
        try:
            # Created here, owner-only, so that SQLite's -wal and -shm files, which copy
            # the database file's permissions, are owner-only too.
            os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create the SQLite database {str(self.path)!r}: {exc}"
            ) from exc
        # Opened waiting for the lock like any polite writer: another process may be
        # creating the file, switching it to WAL or migrating it at this very moment, and
        # until it is in WAL mode even a read waits for that. Only once the schema is
        # known does the loop's connection stop waiting (see the module docstring).
        waiting_ms = int(self.busy_timeout * 1000)
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.005
        while True:
            try:
                self._conn = self._connect(busy_timeout_ms=waiting_ms)
                self._migrate()
                break
            except StorageBusyError:
                # SQLite skips the busy handler where waiting could deadlock: switching a
                # new file to WAL, or reading a schema another process is writing. Such
                # a BUSY is as transient as any other: try again until the timeout.
                self._close_connections()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.1)
        self._conn.execute("PRAGMA busy_timeout = 0")

    def _connect(self, *, busy_timeout_ms: int) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path,
                isolation_level=None,
                check_same_thread=False,
                cached_statements=256,
                timeout=busy_timeout_ms / 1000,
            )
        except sqlite3.Error as exc:
            raise StorageUnavailableError(
                f"cannot open the SQLite database {str(self.path)!r}: {exc}"
            ) from exc
        try:
            # journal_mode needs the write lock the first time; wait for it politely.
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                raise StorageUnavailableError(
                    f"SQLite database {str(self.path)!r} cannot use WAL mode (got {mode!r}); "
                    "is it on a network filesystem?"
                )
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        except sqlite3.Error as exc:
            conn.close()
            raise self._translate(exc, "open") from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _migrate(self) -> None:
        conn = self._conn
        assert conn is not None

        def current(cursor: sqlite3.Connection) -> int:
            exists = cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lw_schema_migrations'"
            ).fetchone()
            if exists is None:
                return 0
            row = cursor.execute("SELECT MAX(version) FROM lw_schema_migrations").fetchone()
            return int(row[0] or 0)

        def check(version: int) -> None:
            if version > len(MIGRATIONS):
                raise SchemaVersionError(
                    f"SQLite database {str(self.path)!r} has schema version {version}; this "
                    f"version of little-workflow knows versions 1-{len(MIGRATIONS)}. "
                    "Upgrade little-workflow to read it."
                )

        def apply(cursor: sqlite3.Connection) -> None:
            version = current(cursor)
            check(version)
            if version == 0:
                cursor.execute(
                    "CREATE TABLE IF NOT EXISTS lw_schema_migrations "
                    "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
                )
            for index in range(version, len(MIGRATIONS)):
                for statement in MIGRATIONS[index]:
                    cursor.execute(statement)
                cursor.execute(
                    "INSERT INTO lw_schema_migrations (version, applied_at) VALUES (?, ?)",
                    (index + 1, time.time()),
                )

        try:
            version = current(conn)
        except sqlite3.Error as exc:
            raise self._translate(exc, "read the schema version of") from exc
        check(version)
        if version < len(MIGRATIONS):
            self._run_write_blocking(apply, busy_timeout_ms=int(self.busy_timeout * 1000))

    # --- running work -----------------------------------------------------------------

    async def write(
        self,
        work: Callable[[sqlite3.Connection], T],
        *,
        sync: bool = True,
        group: str | None = None,
    ) -> T:
        """Run ``work`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``; return its result.

        ``work`` must be synchronous and must not commit. If it raises, its writes are
        rolled back and the exception propagates. ``sync=False`` commits without fsync
        (see the module docstring). ``group`` names the writer (a run id): a write that
        follows another group's may be committed together with other writers' (see
        "Grouped" in the module docstring), never before it is durable.
        """
        conn = self._require()
        if self._leader is not None:
            return cast(T, await self._join(work, sync, group))
        if group is not None and group != self._last_group:
            last, self._last_group = self._last_group, group
            # Only a commit that waits for an fsync is worth sharing: without one it
            # costs less than the hop to the thread.
            if last is not None and sync and self.synchronous == "FULL":
                return cast(T, await self._join(work, sync, group))
        try:
            self._set_synchronous(conn, sync)
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if not _is_busy(exc):
                raise self._translate(exc, "write to") from exc
            self._pending_writes += 1
            future = self._submit(lambda: self._write_waiting(work, sync))
            future.add_done_callback(self._write_done)
            return await future
        return self._finish(conn, work)

    def _write_done(self, _: object) -> None:
        self._pending_writes -= 1

    def _finish(self, conn: sqlite3.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            result = work(conn)
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:
                # The original error is the one worth reporting.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise self._translate(exc, "write to") from exc
            raise
        return result

    def _set_synchronous(self, conn: sqlite3.Connection, sync: bool) -> None:
        wanted = self.synchronous if sync else "NORMAL"
        if conn is self._conn:
            if self._conn_synchronous != wanted:
                conn.execute(f"PRAGMA synchronous = {wanted}")
                self._conn_synchronous = wanted
        elif self._waiting_synchronous != wanted:
            conn.execute(f"PRAGMA synchronous = {wanted}")
            self._waiting_synchronous = wanted

    def _join(
        self, work: Callable[[sqlite3.Connection], Any], sync: bool, group: str | None
    ) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((work, sync, group, future))
        # Counted until its batch has returned, so that reads wait for it (``read``).
        self._pending_writes += 1
        if self._leader is None:
            self._leader = loop.create_task(self._lead(), name="little-workflow group commit")
        return future

    async def _lead(self) -> None:
        """Commit what is queued, a batch per transaction, until nothing more comes."""
        try:
            while True:
                queued, self._queue = self._queue, []
                # A caller cancelled while queued gave up its write: nothing of it is run.
                batch = [request for request in queued if not request[3].done()]
                self._pending_writes -= len(queued) - len(batch)
                if batch:
                    await self._commit_batch(batch)
                groups = {request[2] for request in batch}
                groups.discard(None)
                if len(groups) < 2 and not self._queue:
                    # One writer alone: it goes back to the inline path (its next write
                    # names the group it wrote last), the hop to the thread is not paid.
                    if groups:
                        self._last_group = groups.pop()
                    return
                # The callers just resolved run first (their wake-ups were scheduled
                # before this one): those that write again at once join the next batch.
                await asyncio.sleep(0)
                if not self._queue:
                    return
        finally:
            self._leader = None
            for *_, future in self._queue:
                future.cancel()
            self._pending_writes -= len(self._queue)
            self._queue = []

    async def _commit_batch(self, batch: list[_Request]) -> None:
        try:
            outcomes = await self._submit(functools.partial(self._run_batch, batch))
        except asyncio.CancelledError:
            # The loop is going away; the thread finishes the batch on its own.
            for *_, future in batch:
                future.cancel()
            raise
        except Exception as error:
            outcomes = [(False, error)] * len(batch)
        finally:
            self._pending_writes -= len(batch)
        for (*_, future), (ok, value) in zip(batch, outcomes, strict=True):
            if future.done():
                continue
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    def _run_batch(self, batch: list[_Request]) -> list[tuple[bool, Any]]:
        """In the worker thread: ``batch`` in one transaction, each write in a savepoint."""
        outcomes: dict[int, tuple[bool, Any]] = {}
        pending = list(range(len(batch)))
        while pending:
            try:
                results = self._run_write_blocking(
                    functools.partial(self._grouped, batch=batch, pending=pending),
                    busy_timeout_ms=int(self.busy_timeout * 1000),
                    sync=any(batch[index][1] for index in pending),
                )
            except _TransactionLost as lost:
                # The writes before it were rolled back with it: they go again, without it.
                outcomes[lost.index] = (False, lost.error)
                pending = [index for index in pending if index != lost.index]
                continue
            except Exception as error:
                results = [(False, error)] * len(pending)
            outcomes.update(zip(pending, results, strict=True))
            break
        return [outcomes[index] for index in range(len(batch))]

    def _grouped(
        self, conn: sqlite3.Connection, *, batch: list[_Request], pending: list[int]
    ) -> list[tuple[bool, Any]]:
        if len(pending) == 1:
            # Alone in its transaction: the transaction is its savepoint.
            return [(True, batch[pending[0]][0](conn))]
        results: list[tuple[bool, Any]] = []
        for index in pending:
            conn.execute("SAVEPOINT lw_grouped")
            try:
                result = batch[index][0](conn)
            except Exception as exc:
                error = self._translate(exc, "write to") if isinstance(exc, sqlite3.Error) else exc
                if not conn.in_transaction:
                    raise _TransactionLost(index, error) from exc
                conn.execute("ROLLBACK TO lw_grouped")
                conn.execute("RELEASE lw_grouped")
                results.append((False, error))
            else:
                conn.execute("RELEASE lw_grouped")
                results.append((True, result))
        return results

    def _write_waiting(self, work: Callable[[sqlite3.Connection], T], sync: bool) -> T:
        return self._run_write_blocking(
            work, busy_timeout_ms=int(self.busy_timeout * 1000), sync=sync
        )

    def _run_write_blocking(
        self, work: Callable[[sqlite3.Connection], T], *, busy_timeout_ms: int, sync: bool = True
    ) -> T:
        conn = self._waiting()
        deadline = time.monotonic() + busy_timeout_ms / 1000
        delay = 0.005
        while True:
            try:
                self._set_synchronous(conn, sync)
                conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    raise self._translate(exc, "write to") from exc
                # SQLite's busy handler already waited; a few more polite tries cover
                # the rare BUSY it returns without waiting (a lock taken mid-recovery).
                if time.monotonic() >= deadline:
                    raise StorageBusyError(
                        f"SQLite database {str(self.path)!r} stayed locked by another "
                        f"process for {busy_timeout_ms / 1000:g} s; nothing was written"
                    ) from exc
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
        return self._finish(conn, work)

    async def read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read-only ``work`` and return its result (WAL readers never block writers)."""
        conn = self._require()
        if self._pending_writes:
            return await self._submit(lambda: self._read_waiting(work))
        try:
            return work(conn)
        except sqlite3.Error as exc:
            if not _is_busy(exc):
                raise self._translate(exc, "read from") from exc
        return await self._submit(lambda: self._read_waiting(work))

    def _read_waiting(self, work: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return work(self._waiting())
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise StorageBusyError(
                    f"SQLite database {str(self.path)!r} stayed busy for "
                    f"{self.busy_timeout:g} s while reading"
                ) from exc
            raise self._translate(exc, "read from") from exc

    def _submit(self, call: Callable[[], T]) -> asyncio.Future[T]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix="little-workflow-sqlite"
                )
            executor = self._executor
        return asyncio.get_running_loop().run_in_executor(executor, call)

    def _waiting(self) -> sqlite3.Connection:
        if self._waiting_conn is None:
            self._waiting_conn = self._connect(busy_timeout_ms=int(self.busy_timeout * 1000))
            self._waiting_conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        return self._waiting_conn

    def _require(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StorageError(f"SQLite database {str(self.path)!r} is closed")
        return self._conn

    def _translate(self, exc: sqlite3.Error, action: str) -> StorageError:
        text = str(exc)
        where = f"SQLite database {str(self.path)!r}"
        if isinstance(exc, sqlite3.DatabaseError) and (
            "not a database" in text or "malformed" in text
        ):
            return CorruptDataError(f"cannot {action} {where}: {text}")
        if "unable to open" in text or "readonly" in text or "disk I/O error" in text:
            return StorageUnavailableError(f"cannot {action} {where}: {text}")
        if _is_busy(exc):
            return StorageBusyError(f"cannot {action} {where}: {text}")
        return StorageError(f"cannot {action} {where}: {text}")

    # --- closing ----------------------------------------------------------------------

    def _close_connections(self) -> None:
        for conn in (self._conn, self._waiting_conn):
            if conn is not None:
                conn.close()
        self._conn = self._waiting_conn = None

    async def close(self) -> None:
        """Close both connections and the worker thread. Idempotent."""
        if self._leader is not None:
            # Writes already queued are committed before the connections close.
            await asyncio.gather(self._leader, return_exceptions=True)
        executor, self._executor = self._executor, None
        if executor is not None:
            # Let a contended write in flight finish before its connection closes.
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown, True)
        self._close_connections()
