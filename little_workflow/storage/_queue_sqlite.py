"""``SqliteRunQueue``: the run queue in the ``run_queue`` and ``workers`` tables of a SQLite file.

The same contract as ``PostgresRunQueue`` (``testing/runqueue_conformance.py`` holds both
to it), on one machine. Every change runs under ``BEGIN IMMEDIATE``, so a claim, a
renewal and a fenced append (``check_fence``, called by ``SqliteEventLog.append`` inside
its own transaction) are serialized by the database's write lock: two workers cannot
take one row, and an append cannot commit under a lease another claim just replaced.

What a lease means here: every process sharing a SQLite file runs on this machine, so the
clock is the machine's (``time.time()``) and a lease is held while it has not expired
**and** the process that claimed it is alive (its pid and start time, recorded in the
row: a reused pid does not count). A worker killed outright frees its runs at once, not
``lease_seconds`` later; a worker that is alive but paused past its lease (SIGSTOP, a
suspended laptop) loses it by time, as on PostgreSQL. A wall clock set back lengthens the
leases held then; one set forward shortens them (a holder that loses its lease that way
stops at its next append, and the run is replayed by its next holder: late, never twice).
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from typing import Final

from little_workflow.errors import LeaseLostError
from little_workflow.ids import validate_id
from little_workflow.platform._proc import ProcessIdentity, current_process, is_alive
from little_workflow.storage import _limits_sqlite as limits
from little_workflow.storage._fence import Fence
from little_workflow.storage._limits import (
    DEFAULT_QUEUE,
    Limit,
    LimitKind,
    Permit,
    check_limit_name,
)
from little_workflow.storage._queue import Claim, QueueEntry, WorkerInfo
from little_workflow.storage._sqlite_db import SqliteDatabase

__all__ = ["SqliteRunQueue", "check_fence"]

_COLUMNS: Final = (
    "run_id, state, submitted_at, worker_id, lease_token, lease_expires_at, attempts, "
    "finished_at, outcome, queue"
)
#: A queued run is claimable once its ``not_before`` (a timer, a wait's timeout) has come.
_DUE: Final = "(not_before IS NULL OR not_before <= ?)"
_CANDIDATES: Final = (
    "SELECT run_id, queue, parent_run_id IS NULL, submitted_at, rowid FROM run_queue "
)
_LEASED: Final = (
    "SELECT run_id, lease_expires_at, holder, queue, parent_run_id FROM run_queue "
    "WHERE state = 'leased'"
)


def _holder_alive(holder: str | None) -> bool:
    if holder is None:
        return False
    try:
        identity = ProcessIdentity.from_json(json.loads(holder))
    except ValueError:
        return False
    return identity is not None and is_alive(identity)


def _live(expires_at: float | None, holder: str | None, now: float) -> bool:
    """Whether a leased row's lease holds: not expired, and its holder process alive."""
    return expires_at is not None and expires_at >= now and _holder_alive(holder)


def _lapsed_leases(conn: sqlite3.Connection, now: float) -> list[str]:
    """Run ids of leased rows whose lease no longer holds (expired, or holder dead)."""
    return _leases(conn, now)[0]


def _leases(conn: sqlite3.Connection, now: float) -> tuple[list[str], Counter[str]]:
    """The lapsed leases' run ids, and how many live leases each queue has.

    A sub-run (it has a parent run) counts in no queue: its parent holds a place already.
    """
    lapsed, live = [], Counter[str]()
    for run_id, expires, holder, queue, parent in conn.execute(_LEASED).fetchall():
        if not _live(expires, holder, now):
            lapsed.append(run_id)
        elif parent is None:
            live[queue] += 1
    return lapsed, live


def check_fence(conn: sqlite3.Connection, fence: Fence, *, appending_to: str) -> None:
    """Raise ``LeaseLostError`` unless ``fence`` is its run's live lease (inside a write)."""
    row = conn.execute(
        "SELECT state, lease_token, lease_expires_at FROM run_queue WHERE run_id = ?",
        (fence.run_id,),
    ).fetchone()
    # The appender is the holder: its own process is alive, so only time can end the lease.
    if row is None or row[0] != "leased" or row[1] != fence.token or row[2] < time.time():
        raise LeaseLostError(
            f"cannot append to run {appending_to!r}: the lease on run {fence.run_id!r} "
            f"(token {fence.token}) expired or was taken over; nothing was written"
        )


class SqliteRunQueue:
    """A ``RunQueue`` on a ``SqliteDatabase`` (shared with the store's log and KV)."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database
        self._holder = json.dumps(current_process().to_json())

    def _lease(
        self, conn: sqlite3.Connection, run_ids: Sequence[str], worker_id: str, seconds: float
    ) -> list[Claim]:
        """Lease ``run_ids`` (each checked claimable by the caller) to ``worker_id``."""
        claims = []
        now = time.time()
        for run_id in run_ids:
            (token,) = conn.execute(
                "UPDATE lw_lease_tokens SET last = last + 1 RETURNING last"
            ).fetchone()
            (attempts,) = conn.execute(
                "UPDATE run_queue SET state = 'leased', worker_id = ?, lease_token = ?, "
                "lease_expires_at = ?, attempts = attempts + 1, holder = ? "
                "WHERE run_id = ? RETURNING attempts",
                (worker_id, token, now + seconds, self._holder, run_id),
            ).fetchone()
            claims.append(
                Claim(
                    fence=Fence(run_id=run_id, token=int(token)),
                    attempts=int(attempts),
                    expires_at=now + seconds,
                )
            )
        return claims

    async def submit(
        self, run_id: str, *, parent_run_id: str | None = None, queue: str = DEFAULT_QUEUE
    ) -> bool:
        """Queue ``run_id`` on ``queue``; ``False`` if it was submitted before."""
        validate_id(run_id, what="run id")
        check_limit_name("queue", queue)

        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "INSERT INTO run_queue (run_id, state, submitted_at, parent_run_id, queue) "
                "VALUES (?, 'queued', ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
                (run_id, time.time(), parent_run_id, queue),
            )
            return cursor.rowcount == 1

        return await self._database.write(work)

    async def claim_run(self, run_id: str, worker_id: str, *, lease_seconds: float) -> Claim | None:
        """Claim ``run_id`` itself if nobody holds it (queued, or its lease lapsed)."""

        def work(conn: sqlite3.Connection) -> Claim | None:
            row = conn.execute(
                "SELECT state, lease_expires_at, holder FROM run_queue WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None or row[0] == "done":
                return None
            if row[0] == "leased" and _live(row[1], row[2], time.time()):
                return None
            return self._lease(conn, [run_id], worker_id, lease_seconds)[0]

        return await self._database.write(work)

    async def claim(self, worker_id: str, *, limit: int, lease_seconds: float) -> list[Claim]:
        """Up to ``limit`` ready runs: sub-runs first, then the oldest submitted."""
        if limit < 1:
            return []

        def ready(conn: sqlite3.Connection) -> list[tuple[str, str | None]]:
            """The runs to claim, each with the limited queue it takes a place in."""
            now = time.time()
            lapsed, live = _leases(conn, now)
            room = limits.room_left(conn, "queue", live.__getitem__, now)
            # Bounded reads, so that a long backlog in a full queue is not read at each
            # poll: the oldest runs of unlimited queues and sub-runs, the oldest ``room``
            # runs of each limited queue, and the lapsed leases; then in claim order.
            rows = conn.execute(
                _CANDIDATES + "WHERE state = 'queued' AND " + _DUE + " AND (parent_run_id "
                "IS NOT NULL OR queue NOT IN (SELECT value FROM json_each(?))) "
                "ORDER BY (parent_run_id IS NULL), submitted_at, rowid LIMIT ?",
                (now, json.dumps(sorted(room)), limit),
            ).fetchall()
            for name, left in room.items():
                if left > 0:
                    rows += conn.execute(
                        _CANDIDATES + "WHERE state = 'queued' AND " + _DUE + " AND "
                        "parent_run_id IS NULL AND queue = ? ORDER BY submitted_at, rowid LIMIT ?",
                        (now, name, min(left, limit)),
                    ).fetchall()
            if lapsed:
                rows += conn.execute(
                    _CANDIDATES + "WHERE run_id IN (SELECT value FROM json_each(?))",
                    (json.dumps(lapsed),),
                ).fetchall()
            rows.sort(key=lambda row: (row[2], row[3], row[4]))
            chosen: list[tuple[str, str | None]] = []
            for run_id, queue, limited, _, _ in rows:
                if len(chosen) == limit:
                    break
                if not limited or queue not in room:
                    chosen.append((run_id, None))
                elif room[queue] > 0:
                    room[queue] -= 1
                    chosen.append((run_id, queue))
            return chosen

        def take(conn: sqlite3.Connection) -> list[Claim]:
            chosen = ready(conn)
            claims = self._lease(conn, [run_id for run_id, _ in chosen], worker_id, lease_seconds)
            limited = [queue for _, queue in chosen if queue is not None]
            limits.record_starts(conn, "queue", limited, time.time())
            return claims

        # An idle worker polls: a look first, so that a poll finding nothing (or only
        # runs of full queues) never takes the write lock the runs being driven append
        # under.
        if not await self._database.read(ready):
            return []
        return await self._database.write(take)

    async def renew(
        self, worker_id: str, fences: Sequence[Fence], *, lease_seconds: float
    ) -> set[str]:
        """Extend the unexpired leases ``worker_id`` still holds; the renewed run ids."""
        if not fences:
            return set()

        def work(conn: sqlite3.Connection) -> set[str]:
            now = time.time()
            renewed = set()
            for fence in fences:
                cursor = conn.execute(
                    "UPDATE run_queue SET lease_expires_at = ? WHERE run_id = ? "
                    "AND lease_token = ? AND state = 'leased' AND worker_id = ? "
                    "AND lease_expires_at >= ?",
                    (now + lease_seconds, fence.run_id, fence.token, worker_id, now),
                )
                if cursor.rowcount == 1:
                    renewed.add(fence.run_id)
            return renewed

        return await self._database.write(work)

    async def finish(self, fence: Fence, outcome: str) -> bool:
        """Mark the run done, if ``fence`` still holds it."""

        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE run_queue SET state = 'done', finished_at = ?, outcome = ?, "
                "lease_expires_at = NULL, holder = NULL "
                "WHERE run_id = ? AND lease_token = ? AND state = 'leased'",
                (time.time(), outcome, fence.run_id, fence.token),
            )
            return cursor.rowcount == 1

        return await self._database.write(work)

    async def release(self, fence: Fence, *, not_before: float | None = None) -> bool:
        """Queue the run again (claimable from ``not_before``), if ``fence`` still holds it."""

        def work(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE run_queue SET state = 'queued', worker_id = NULL, "
                "lease_expires_at = NULL, holder = NULL, not_before = ? "
                "WHERE run_id = ? AND lease_token = ? AND state = 'leased'",
                (not_before, fence.run_id, fence.token),
            )
            return cursor.rowcount == 1

        return await self._database.write(work)

    async def holder(self, run_id: str) -> str | None:
        """The worker whose live lease holds ``run_id``, if any."""
        validate_id(run_id, what="run id")
        row = await self._database.read(
            lambda conn: conn.execute(
                "SELECT worker_id, lease_expires_at, holder FROM run_queue "
                "WHERE run_id = ? AND state = 'leased'",
                (run_id,),
            ).fetchone()
        )
        if row is None or not _live(row[1], row[2], time.time()):
            return None
        return str(row[0])

    async def attended(self, run_ids: Sequence[str]) -> set[str]:
        """The runs among ``run_ids`` that are queued or under a live lease."""
        wanted = [validate_id(run_id, what="run id") for run_id in run_ids]
        if not wanted:
            return set()
        rows = await self._database.read(
            lambda conn: conn.execute(
                "SELECT run_id, state, lease_expires_at, holder FROM run_queue "
                "WHERE run_id IN (SELECT value FROM json_each(?)) AND state != 'done'",
                (json.dumps(wanted),),
            ).fetchall()
        )
        now = time.time()
        return {
            str(run_id)
            for run_id, state, expires, holder in rows
            if state == "queued" or _live(expires, holder, now)
        }

    async def settle(self, run_id: str, outcome: str) -> bool:
        """Mark the run done with ``outcome`` if nobody holds it."""
        validate_id(run_id, what="run id")

        def work(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT state, lease_expires_at, holder FROM run_queue WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            if row is None or row[0] == "done":
                return False
            if row[0] == "leased" and _live(row[1], row[2], time.time()):
                return False
            conn.execute(
                "UPDATE run_queue SET state = 'done', finished_at = ?, outcome = ?, "
                "lease_expires_at = NULL, holder = NULL WHERE run_id = ?",
                (time.time(), outcome, run_id),
            )
            return True

        return await self._database.write(work)

    async def get(self, run_id: str) -> QueueEntry | None:
        """The run's queue row, or ``None``."""
        validate_id(run_id, what="run id")
        row = await self._database.read(
            lambda conn: conn.execute(
                f"SELECT {_COLUMNS} FROM run_queue WHERE run_id = ?", (run_id,)
            ).fetchone()
        )
        return None if row is None else QueueEntry.from_row(row)

    async def forget(self, run_ids: Sequence[str]) -> int:
        """Delete the done rows of these runs."""
        wanted = [validate_id(run_id, what="run id") for run_id in run_ids]
        if not wanted:
            return 0

        def work(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(
                "DELETE FROM run_queue WHERE run_id IN (SELECT value FROM json_each(?)) "
                "AND state = 'done'",
                (json.dumps(wanted),),
            )
            return max(cursor.rowcount, 0)

        return await self._database.write(work)

    async def expired(self) -> list[QueueEntry]:
        """Leased runs whose lease no longer holds (expired, or its holder died)."""

        def query(conn: sqlite3.Connection) -> list[QueueEntry]:
            lapsed = _lapsed_leases(conn, time.time())
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM run_queue "
                "WHERE run_id IN (SELECT value FROM json_each(?)) ORDER BY lease_expires_at",
                (json.dumps(lapsed),),
            ).fetchall()
            return [QueueEntry.from_row(row) for row in rows]

        return await self._database.read(query)

    async def register_worker(
        self, worker_id: str, *, host: str, pid: int, concurrency: int
    ) -> None:
        """Record a starting worker."""
        now = time.time()
        await self._database.write(
            lambda conn: conn.execute(
                "INSERT INTO workers (worker_id, host, pid, concurrency, started_at, "
                "heartbeat_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (worker_id) DO UPDATE "
                "SET host = excluded.host, pid = excluded.pid, "
                "concurrency = excluded.concurrency, started_at = excluded.started_at, "
                "heartbeat_at = excluded.heartbeat_at, stopped_at = NULL",
                (worker_id, host, pid, concurrency, now, now),
            )
        )

    async def heartbeat_worker(self, worker_id: str) -> None:
        """Record that the worker is alive."""
        await self._database.write(
            lambda conn: conn.execute(
                "UPDATE workers SET heartbeat_at = ? WHERE worker_id = ?", (time.time(), worker_id)
            ),
            sync=False,
        )

    async def stop_worker(self, worker_id: str) -> None:
        """Record that the worker stopped."""
        await self._database.write(
            lambda conn: conn.execute(
                "UPDATE workers SET stopped_at = ? WHERE worker_id = ?", (time.time(), worker_id)
            )
        )

    async def workers(self, *, include_stopped: bool = False) -> list[WorkerInfo]:
        """Registered workers, newest first, with the runs each holds."""

        def query(conn: sqlite3.Connection) -> list[WorkerInfo]:
            found = conn.execute(
                "SELECT worker_id, host, pid, concurrency, started_at, heartbeat_at, "
                "stopped_at FROM workers WHERE ? OR stopped_at IS NULL "
                "ORDER BY started_at DESC, worker_id",
                (include_stopped,),
            ).fetchall()
            held: dict[str, list[tuple[str, int, float]]] = {}
            for worker, run_id, token, expires in conn.execute(
                "SELECT worker_id, run_id, lease_token, lease_expires_at FROM run_queue "
                "WHERE state = 'leased' ORDER BY run_id"
            ):
                held.setdefault(worker, []).append((run_id, int(token), float(expires)))
            return [
                WorkerInfo(
                    worker_id=row[0],
                    host=row[1],
                    pid=int(row[2]),
                    concurrency=int(row[3]),
                    started_at=float(row[4]),
                    heartbeat_at=float(row[5]),
                    stopped_at=None if row[6] is None else float(row[6]),
                    runs=tuple(held.get(row[0], ())),
                )
                for row in found
            ]

        return await self._database.read(query)

    # --- limits (``storage/_limits.py``) --------------------------------------------

    async def set_limit(self, kind: LimitKind, name: str, limit: Limit) -> None:
        """Store the limit of queue or model slot ``name`` (replacing any before)."""
        kind, name = check_limit_name(kind, name)
        await self._database.write(
            lambda conn: limits.write_limit(conn, kind, name, limit, time.time())
        )

    async def limits(self, kind: LimitKind) -> dict[str, Limit]:
        """The stored limits of ``kind``, by name."""
        kind, _ = check_limit_name(kind, DEFAULT_QUEUE)
        return await self._database.read(lambda conn: limits.read_limits(conn, kind))

    async def remove_limit(self, kind: LimitKind, name: str) -> bool:
        """Delete the limit of ``name``; whether there was one."""
        kind, name = check_limit_name(kind, name)
        return await self._database.write(lambda conn: limits.remove_limit(conn, kind, name))

    async def acquire_permit(
        self, kind: LimitKind, name: str, *, lease_seconds: float
    ) -> Permit | float | None:
        """A permit of ``name`` now; ``None`` if it has no limit; else seconds to wait."""
        kind, name = check_limit_name(kind, name)
        permit_id = uuid.uuid4().hex
        # Most slots have no limit: a look, so that their calls never take the write lock.
        if name not in await self._database.read(lambda conn: limits.read_limits(conn, kind)):
            return None

        def work(conn: sqlite3.Connection) -> Permit | float | None:
            return limits.acquire_permit(
                conn,
                kind,
                name,
                permit_id=permit_id,
                holder=self._holder,
                lease_seconds=lease_seconds,
                now=time.time(),
                alive=_holder_alive,
            )

        return await self._database.write(work)

    async def renew_permits(self, permits: Sequence[Permit], *, lease_seconds: float) -> set[str]:
        """Extend the permits still held; the permit ids renewed."""
        if not permits:
            return set()
        ids = [permit.permit_id for permit in permits]
        return await self._database.write(
            lambda conn: limits.renew_permits(
                conn, ids, lease_seconds=lease_seconds, now=time.time()
            ),
            sync=False,
        )

    async def release_permit(self, permit: Permit) -> bool:
        """Give ``permit`` back; whether it was still held."""
        return await self._database.write(
            lambda conn: limits.release_permit(conn, permit.permit_id), sync=False
        )
