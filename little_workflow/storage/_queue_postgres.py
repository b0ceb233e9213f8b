"""``PostgresRunQueue``: the run queue in the ``run_queue`` and ``workers`` tables.

Claims use ``FOR UPDATE SKIP LOCKED``: concurrent workers each take different rows
without waiting on one another, and a row another worker is appending under (its
fenced append holds the row ``FOR SHARE``) is skipped until that append commits. Every
time is the server's (``clock_timestamp()``), so workers on machines whose clocks
disagree still agree on when a lease ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Final

from little_workflow.ids import validate_id
from little_workflow.storage import _limits_postgres as limits
from little_workflow.storage._fence import Fence
from little_workflow.storage._limits import (
    DEFAULT_QUEUE,
    Limit,
    LimitKind,
    Permit,
    check_limit_name,
)
from little_workflow.storage._postgres_db import PostgresDatabase
from little_workflow.storage._queue import Claim, QueueEntry, WorkerInfo

__all__ = ["PostgresRunQueue"]

_NOW: Final = "extract(epoch FROM clock_timestamp())::double precision"

_SUBMIT: Final = f"""
INSERT INTO run_queue (run_id, state, submitted_at, parent_run_id, queue)
VALUES (%s, 'queued', {_NOW}, %s, %s)
ON CONFLICT (run_id) DO NOTHING
"""
# Queued runs first (oldest first), then runs whose lease expired: a run abandoned by a
# dead worker is picked up as soon as a slot is free, but never ahead of the backlog's
# order among themselves.
_CLAIM: Final = f"""
WITH ready AS (
    SELECT run_id FROM (
        (SELECT run_id, submitted_at, parent_run_id FROM run_queue
         WHERE state = 'queued' AND (not_before IS NULL OR not_before <= {_NOW})
         ORDER BY (parent_run_id IS NULL), submitted_at LIMIT %(limit)s)
        UNION ALL
        (SELECT run_id, submitted_at, parent_run_id FROM run_queue
         WHERE state = 'leased' AND lease_expires_at < {_NOW}
         ORDER BY lease_expires_at LIMIT %(limit)s)
    ) candidates
    ORDER BY (parent_run_id IS NULL), submitted_at
    LIMIT %(limit)s
), locked AS (
    SELECT q.run_id FROM run_queue q JOIN ready USING (run_id)
    WHERE (q.state = 'queued' AND (q.not_before IS NULL OR q.not_before <= {_NOW}))
        OR (q.state = 'leased' AND q.lease_expires_at < {_NOW})
    FOR UPDATE OF q SKIP LOCKED
)
UPDATE run_queue q SET
    state = 'leased',
    worker_id = %(worker)s,
    lease_token = nextval('lease_tokens'),
    lease_expires_at = {_NOW} + %(seconds)s,
    attempts = q.attempts + 1
FROM locked WHERE q.run_id = locked.run_id
RETURNING q.run_id, q.lease_token, q.attempts, q.lease_expires_at
"""
# One named run, if nobody holds it: a worker waiting for its sub-run drives it itself
# rather than wait for a free worker (which, with every slot waiting, might never come).
_CLAIM_ONE: Final = f"""
UPDATE run_queue q SET
    state = 'leased',
    worker_id = %(worker)s,
    lease_token = nextval('lease_tokens'),
    lease_expires_at = {_NOW} + %(seconds)s,
    attempts = q.attempts + 1
FROM (SELECT run_id FROM run_queue
      WHERE run_id = %(run_id)s
        AND (state = 'queued' OR (state = 'leased' AND lease_expires_at < {_NOW}))
      FOR UPDATE SKIP LOCKED) free
WHERE q.run_id = free.run_id
RETURNING q.run_id, q.lease_token, q.attempts, q.lease_expires_at
"""
_RENEW: Final = f"""
UPDATE run_queue q SET lease_expires_at = {_NOW} + %(seconds)s
FROM unnest(%(runs)s::text[], %(tokens)s::bigint[]) AS held(run_id, token)
WHERE q.run_id = held.run_id AND q.lease_token = held.token AND q.state = 'leased'
    AND q.worker_id = %(worker)s AND q.lease_expires_at >= {_NOW}
RETURNING q.run_id
"""
_FINISH: Final = f"""
UPDATE run_queue SET state = 'done', finished_at = {_NOW}, outcome = %s,
    lease_expires_at = NULL
WHERE run_id = %s AND lease_token = %s AND state = 'leased'
"""
# ``not_before``: a run that waits (docs/waits.md) is queued again, claimable from then.
_RELEASE: Final = """
UPDATE run_queue SET state = 'queued', worker_id = NULL, lease_expires_at = NULL,
    not_before = %s
WHERE run_id = %s AND lease_token = %s AND state = 'leased'
"""
_HOLDER: Final = f"""
SELECT worker_id FROM run_queue
WHERE run_id = %s AND state = 'leased' AND lease_expires_at >= {_NOW}
"""
_ATTENDED: Final = f"""
SELECT run_id FROM run_queue
WHERE run_id = ANY(%s::text[])
  AND (state = 'queued' OR (state = 'leased' AND lease_expires_at >= {_NOW}))
"""
# Row-locked like a claim (SKIP LOCKED: a row a worker is claiming or appending under is
# not ours to settle), so a claim cannot take the run between the check and the update.
_SETTLE: Final = f"""
UPDATE run_queue q SET state = 'done', finished_at = {_NOW}, outcome = %s,
    lease_expires_at = NULL
FROM (SELECT run_id FROM run_queue
      WHERE run_id = %s
        AND (state = 'queued' OR (state = 'leased' AND lease_expires_at < {_NOW}))
      FOR UPDATE SKIP LOCKED) free
WHERE q.run_id = free.run_id
"""
_FORGET: Final = "DELETE FROM run_queue WHERE run_id = ANY(%s::text[]) AND state = 'done'"
_COLUMNS: Final = (
    "run_id, state, submitted_at, worker_id, lease_token, lease_expires_at, attempts, "
    "finished_at, outcome, queue"
)
_GET: Final = f"SELECT {_COLUMNS} FROM run_queue WHERE run_id = %s"
_EXPIRED: Final = (
    f"SELECT {_COLUMNS} FROM run_queue WHERE state = 'leased' AND lease_expires_at < {_NOW} "
    "ORDER BY lease_expires_at"
)
_REGISTER: Final = f"""
INSERT INTO workers (worker_id, host, pid, concurrency, started_at, heartbeat_at)
VALUES (%s, %s, %s, %s, {_NOW}, {_NOW})
ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid,
    concurrency = EXCLUDED.concurrency, started_at = EXCLUDED.started_at,
    heartbeat_at = EXCLUDED.heartbeat_at, stopped_at = NULL
"""
_HEARTBEAT: Final = f"UPDATE workers SET heartbeat_at = {_NOW} WHERE worker_id = %s"
_STOP: Final = f"UPDATE workers SET stopped_at = {_NOW} WHERE worker_id = %s"
_WORKERS: Final = """
SELECT w.worker_id, w.host, w.pid, w.concurrency, w.started_at, w.heartbeat_at,
       w.stopped_at,
       COALESCE(array_agg(q.run_id ORDER BY q.run_id) FILTER (WHERE q.run_id IS NOT NULL),
                '{}'),
       COALESCE(array_agg(q.lease_token ORDER BY q.run_id)
                FILTER (WHERE q.run_id IS NOT NULL), '{}'),
       COALESCE(array_agg(q.lease_expires_at ORDER BY q.run_id)
                FILTER (WHERE q.run_id IS NOT NULL), '{}')
FROM workers w
LEFT JOIN run_queue q ON q.worker_id = w.worker_id AND q.state = 'leased'
WHERE %s OR w.stopped_at IS NULL
GROUP BY w.worker_id
ORDER BY w.started_at DESC, w.worker_id
"""


class PostgresRunQueue:
    """A ``RunQueue`` on a ``PostgresDatabase`` (shared with the store's log and KV)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def submit(
        self, run_id: str, *, parent_run_id: str | None = None, queue: str = DEFAULT_QUEUE
    ) -> bool:
        """Queue ``run_id`` on ``queue``; ``False`` if it was submitted before."""
        validate_id(run_id, what="run id")
        check_limit_name("queue", queue)
        doing = f"submit run {run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_SUBMIT, [run_id, parent_run_id, queue])
            return cursor.rowcount == 1

    async def claim_run(self, run_id: str, worker_id: str, *, lease_seconds: float) -> Claim | None:
        """Claim ``run_id`` itself if nobody holds it (queued, or its lease expired)."""
        doing = f"claim run {run_id!r} for worker {worker_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(
                _CLAIM_ONE, {"run_id": run_id, "worker": worker_id, "seconds": lease_seconds}
            )
            row = await cursor.fetchone()
        if row is None:
            return None
        _, token, attempts, expires = row
        return Claim(
            fence=Fence(run_id=run_id, token=int(token)),
            attempts=int(attempts),
            expires_at=float(expires),
        )

    async def claim(self, worker_id: str, *, limit: int, lease_seconds: float) -> list[Claim]:
        """Up to ``limit`` ready runs, each under a new lease for ``worker_id``."""
        if limit < 1:
            return []
        doing = f"claim runs for worker {worker_id!r}"
        params = {"limit": limit, "worker": worker_id, "seconds": lease_seconds}
        async with self._database.transaction(doing) as conn:
            # Limited queues' rows stay locked until this claim commits: the next claim
            # counts the leases taken here.
            locked = await limits.lock_limits(conn, "queue")
            if not locked:
                cursor = await conn.execute(_CLAIM, params)
                rows = [row[:4] for row in await cursor.fetchall()]
            else:
                room = await limits.room_left(conn, locked)
                cursor = await conn.execute(
                    limits.CLAIM_LIMITED,
                    {**params, "queues": list(room), "room": list(room.values())},
                )
                taken = await cursor.fetchall()
                started = [row[4] for row in taken if row[5] is None and row[4] in room]
                await limits.record_starts(conn, "queue", started, locked)
                rows = [row[:4] for row in taken]
        return [
            Claim(
                fence=Fence(run_id=run_id, token=int(token)),
                attempts=int(attempts),
                expires_at=float(expires),
            )
            for run_id, token, attempts, expires in rows
        ]

    async def renew(
        self, worker_id: str, fences: Sequence[Fence], *, lease_seconds: float
    ) -> set[str]:
        """Extend the unexpired leases ``worker_id`` still holds; the renewed run ids."""
        if not fences:
            return set()
        doing = f"renew {len(fences)} lease(s) of worker {worker_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(
                _RENEW,
                {
                    "seconds": lease_seconds,
                    "runs": [fence.run_id for fence in fences],
                    "tokens": [fence.token for fence in fences],
                    "worker": worker_id,
                },
            )
            return {row[0] for row in await cursor.fetchall()}

    async def finish(self, fence: Fence, outcome: str) -> bool:
        """Mark the run done, if ``fence`` still holds it."""
        doing = f"finish run {fence.run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_FINISH, [outcome, fence.run_id, fence.token])
            return cursor.rowcount == 1

    async def release(self, fence: Fence, *, not_before: float | None = None) -> bool:
        """Queue the run again (claimable from ``not_before``), if ``fence`` still holds it."""
        doing = f"release run {fence.run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_RELEASE, [not_before, fence.run_id, fence.token])
            return cursor.rowcount == 1

    async def holder(self, run_id: str) -> str | None:
        """The worker whose unexpired lease holds ``run_id``, if any."""
        validate_id(run_id, what="run id")
        doing = f"read the lease on run {run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_HOLDER, [run_id])
            row = await cursor.fetchone()
        return None if row is None else str(row[0])

    async def attended(self, run_ids: Sequence[str]) -> set[str]:
        """The runs among ``run_ids`` that are queued or under an unexpired lease."""
        wanted = [validate_id(run_id, what="run id") for run_id in run_ids]
        if not wanted:
            return set()
        doing = f"read the queue rows of {len(wanted)} run(s)"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_ATTENDED, [wanted])
            return {str(row[0]) for row in await cursor.fetchall()}

    async def settle(self, run_id: str, outcome: str) -> bool:
        """Mark the run done with ``outcome`` if nobody holds it."""
        validate_id(run_id, what="run id")
        doing = f"settle run {run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_SETTLE, [outcome, run_id])
            return cursor.rowcount == 1

    async def get(self, run_id: str) -> QueueEntry | None:
        """The run's queue row, or ``None``."""
        validate_id(run_id, what="run id")
        doing = f"read the queue row of run {run_id!r}"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_GET, [run_id])
            row = await cursor.fetchone()
        return None if row is None else QueueEntry.from_row(row)

    async def forget(self, run_ids: Sequence[str]) -> int:
        """Delete the done rows of these runs."""
        wanted = [validate_id(run_id, what="run id") for run_id in run_ids]
        if not wanted:
            return 0
        doing = f"forget {len(wanted)} run(s) in the queue"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_FORGET, [wanted])
            return max(cursor.rowcount, 0)

    async def expired(self) -> list[QueueEntry]:
        """Leased runs whose lease has expired."""
        doing = "list expired leases"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_EXPIRED)
            return [QueueEntry.from_row(row) for row in await cursor.fetchall()]

    async def register_worker(
        self, worker_id: str, *, host: str, pid: int, concurrency: int
    ) -> None:
        """Record a starting worker."""
        doing = f"register worker {worker_id!r}"
        async with self._database.connection(doing) as conn:
            await conn.execute(_REGISTER, [worker_id, host, pid, concurrency])

    async def heartbeat_worker(self, worker_id: str) -> None:
        """Record that the worker is alive."""
        doing = f"record a heartbeat of worker {worker_id!r}"
        async with self._database.connection(doing) as conn:
            await conn.execute(_HEARTBEAT, [worker_id])

    async def stop_worker(self, worker_id: str) -> None:
        """Record that the worker stopped."""
        doing = f"record that worker {worker_id!r} stopped"
        async with self._database.connection(doing) as conn:
            await conn.execute(_STOP, [worker_id])

    async def workers(self, *, include_stopped: bool = False) -> list[WorkerInfo]:
        """Registered workers, newest first, with the runs each holds."""
        doing = "list workers"
        async with self._database.connection(doing) as conn:
            cursor = await conn.execute(_WORKERS, [include_stopped])
            rows = await cursor.fetchall()
        return [
            WorkerInfo(
                worker_id=row[0],
                host=row[1],
                pid=int(row[2]),
                concurrency=int(row[3]),
                started_at=float(row[4]),
                heartbeat_at=float(row[5]),
                stopped_at=None if row[6] is None else float(row[6]),
                runs=tuple(
                    (run, int(token), float(expires))
                    for run, token, expires in zip(row[7], row[8], row[9], strict=True)
                ),
            )
            for row in rows
        ]

    # --- limits (``storage/_limits.py``) --------------------------------------------

    async def set_limit(self, kind: LimitKind, name: str, limit: Limit) -> None:
        """Store the limit of queue or model slot ``name`` (replacing any before)."""
        kind, name = check_limit_name(kind, name)
        async with self._database.connection(f"set the limit of {kind} {name!r}") as conn:
            await limits.write_limit(conn, kind, name, limit)

    async def limits(self, kind: LimitKind) -> dict[str, Limit]:
        """The stored limits of ``kind``, by name."""
        kind, _ = check_limit_name(kind, DEFAULT_QUEUE)
        async with self._database.connection(f"read the {kind} limits") as conn:
            return await limits.read_limits(conn, kind)

    async def remove_limit(self, kind: LimitKind, name: str) -> bool:
        """Delete the limit of ``name``; whether there was one."""
        kind, name = check_limit_name(kind, name)
        async with self._database.transaction(f"remove the limit of {kind} {name!r}") as conn:
            return await limits.remove_limit(conn, kind, name)

    async def acquire_permit(
        self, kind: LimitKind, name: str, *, lease_seconds: float
    ) -> Permit | float | None:
        """A permit of ``name`` now; ``None`` if it has no limit; else seconds to wait."""
        kind, name = check_limit_name(kind, name)
        permit_id = uuid.uuid4().hex
        # Most slots have no limit: a look first, without a transaction or a row lock.
        if name not in await self.limits(kind):
            return None
        async with self._database.transaction(f"take a permit of {kind} {name!r}") as conn:
            return await limits.acquire_permit(
                conn, kind, name, permit_id=permit_id, lease_seconds=lease_seconds
            )

    async def renew_permits(self, permits: Sequence[Permit], *, lease_seconds: float) -> set[str]:
        """Extend the permits still held; the permit ids renewed."""
        if not permits:
            return set()
        async with self._database.connection(f"renew {len(permits)} permit(s)") as conn:
            cursor = await conn.execute(
                f"UPDATE lw_permits SET expires_at = {_NOW} + %s "
                f"WHERE permit_id = ANY(%s::text[]) AND expires_at >= {_NOW} RETURNING permit_id",
                [lease_seconds, [permit.permit_id for permit in permits]],
            )
            return {str(row[0]) for row in await cursor.fetchall()}

    async def release_permit(self, permit: Permit) -> bool:
        """Give ``permit`` back; whether it was still held."""
        async with self._database.connection(f"release permit of {permit.name!r}") as conn:
            cursor = await conn.execute(
                "DELETE FROM lw_permits WHERE permit_id = %s", [permit.permit_id]
            )
            return cursor.rowcount == 1
