"""Limits on PostgreSQL (``storage/_limits.py``): the rows, the limited claim, permits.

A claim or a permit under a limit locks the limit's row ``FOR UPDATE`` first, then counts
(live leases or permits, recent starts) and takes, and commits: claims and permits under
one limit are serialized across every worker, while those under no limit never wait for
it. Rows are locked in name order, so two claims locking several never deadlock. Every
time is the server's clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

from psycopg import AsyncConnection
from psycopg.rows import TupleRow

from little_workflow.storage._limits import Limit, LimitKind, Permit, Rate

__all__ = [
    "CLAIM_LIMITED",
    "acquire_permit",
    "lock_limits",
    "read_limits",
    "record_starts",
    "remove_limit",
    "room_left",
    "write_limit",
]

NOW: Final = "extract(epoch FROM clock_timestamp())::double precision"

_READ: Final = (
    "SELECT name, concurrency, rate_count, rate_period FROM lw_limits WHERE kind = %s ORDER BY name"
)
_WRITE: Final = f"""
INSERT INTO lw_limits (kind, name, concurrency, rate_count, rate_period, updated_at)
VALUES (%s, %s, %s, %s, %s, {NOW})
ON CONFLICT (kind, name) DO UPDATE SET concurrency = EXCLUDED.concurrency,
    rate_count = EXCLUDED.rate_count, rate_period = EXCLUDED.rate_period,
    updated_at = EXCLUDED.updated_at
"""
# Live leases of runs (not sub-runs: their parent holds the place) per limited queue.
_LEASED: Final = f"""
SELECT queue, count(*) FROM run_queue
WHERE state = 'leased' AND lease_expires_at >= {NOW} AND parent_run_id IS NULL
    AND queue = ANY(%s::text[])
GROUP BY queue
"""
_STARTS: Final = f"""
SELECT s.name, count(*), min(s.at) + min(l.rate_period) FROM lw_limit_starts s
JOIN lw_limits l ON l.kind = s.kind AND l.name = s.name
WHERE s.kind = %s AND s.name = ANY(%s::text[]) AND l.rate_period IS NOT NULL
    AND s.at > {NOW} - l.rate_period
GROUP BY s.name
"""
_PERMITS: Final = f"""
SELECT count(*) FROM lw_permits WHERE kind = %s AND name = %s AND expires_at >= {NOW}
"""
#: The claim when some queue has a limit: ``room`` says how many more runs each limited
#: queue may start now. The candidates are bounded, so a long backlog is not scanned: the
#: oldest runs of unlimited queues and sub-runs (which take no place), the oldest ``room``
#: runs of each limited queue (index ``run_queue_queued_by_queue_idx``), and the expired
#: leases; then each limited queue's candidates are numbered in claim order and taken
#: while their number is within its room.
CLAIM_LIMITED: Final = f"""
WITH room AS (
    SELECT * FROM unnest(%(queues)s::text[], %(room)s::int[]) AS r(queue, room)
), candidates AS (
    (SELECT run_id, submitted_at, parent_run_id, queue FROM run_queue
     WHERE state = 'queued' AND (not_before IS NULL OR not_before <= {NOW})
        AND (parent_run_id IS NOT NULL OR NOT (queue = ANY(%(queues)s::text[])))
     ORDER BY (parent_run_id IS NULL), submitted_at LIMIT %(limit)s)
    UNION ALL
    (SELECT q.run_id, q.submitted_at, q.parent_run_id, q.queue
     FROM room r CROSS JOIN LATERAL (
        SELECT run_id, submitted_at, parent_run_id, queue FROM run_queue
        WHERE state = 'queued' AND parent_run_id IS NULL AND queue = r.queue
            AND (not_before IS NULL OR not_before <= {NOW})
        ORDER BY submitted_at LIMIT LEAST(r.room, %(limit)s)
     ) q
     WHERE r.room > 0)
    UNION ALL
    (SELECT run_id, submitted_at, parent_run_id, queue FROM run_queue
     WHERE state = 'leased' AND lease_expires_at < {NOW}
     ORDER BY lease_expires_at LIMIT %(limit)s)
), ranked AS (
    SELECT c.run_id, c.submitted_at, c.parent_run_id, r.room,
        row_number() OVER (
            PARTITION BY c.parent_run_id IS NULL, c.queue
            ORDER BY c.submitted_at, c.run_id
        ) AS n
    FROM candidates c LEFT JOIN room r ON c.parent_run_id IS NULL AND r.queue = c.queue
), ready AS (
    SELECT run_id FROM ranked WHERE room IS NULL OR n <= room
    ORDER BY (parent_run_id IS NULL), submitted_at
    LIMIT %(limit)s
), locked AS (
    SELECT q.run_id FROM run_queue q JOIN ready USING (run_id)
    WHERE (q.state = 'queued' AND (q.not_before IS NULL OR q.not_before <= {NOW}))
        OR (q.state = 'leased' AND q.lease_expires_at < {NOW})
    FOR UPDATE OF q SKIP LOCKED
)
UPDATE run_queue q SET
    state = 'leased',
    worker_id = %(worker)s,
    lease_token = nextval('lease_tokens'),
    lease_expires_at = {NOW} + %(seconds)s,
    attempts = q.attempts + 1
FROM locked WHERE q.run_id = locked.run_id
RETURNING q.run_id, q.lease_token, q.attempts, q.lease_expires_at, q.queue, q.parent_run_id
"""


def _limit(concurrency: int | None, count: int | None, period: float | None) -> Limit:
    rate = None if count is None or period is None else Rate(int(count), float(period))
    return Limit(concurrency=None if concurrency is None else int(concurrency), rate=rate)


async def read_limits(conn: AsyncConnection[TupleRow], kind: LimitKind) -> dict[str, Limit]:
    """Every stored limit of ``kind``, by name."""
    cursor = await conn.execute(_READ, [kind])
    return {name: _limit(c, n, p) for name, c, n, p in await cursor.fetchall()}


async def lock_limits(
    conn: AsyncConnection[TupleRow], kind: LimitKind, names: Sequence[str] | None = None
) -> dict[str, Limit]:
    """The limits of ``kind`` (of ``names``, or all), their rows locked in name order."""
    if names is None:
        cursor = await conn.execute(_READ + " FOR UPDATE", [kind])
    else:
        cursor = await conn.execute(
            "SELECT name, concurrency, rate_count, rate_period FROM lw_limits "
            "WHERE kind = %s AND name = ANY(%s::text[]) ORDER BY name FOR UPDATE",
            [kind, list(names)],
        )
    return {name: _limit(c, n, p) for name, c, n, p in await cursor.fetchall()}


async def write_limit(
    conn: AsyncConnection[TupleRow], kind: LimitKind, name: str, limit: Limit
) -> None:
    """Store (or replace) the limit of ``kind`` ``name``."""
    rate = limit.rate
    await conn.execute(
        _WRITE,
        [
            kind,
            name,
            limit.concurrency,
            None if rate is None else rate.count,
            None if rate is None else rate.per,
        ],
    )


async def remove_limit(conn: AsyncConnection[TupleRow], kind: LimitKind, name: str) -> bool:
    """Delete the limit of ``kind`` ``name``; whether there was one."""
    cursor = await conn.execute("DELETE FROM lw_limits WHERE kind = %s AND name = %s", [kind, name])
    await conn.execute("DELETE FROM lw_limit_starts WHERE kind = %s AND name = %s", [kind, name])
    return cursor.rowcount == 1


async def _starts(
    conn: AsyncConnection[TupleRow], kind: LimitKind, names: Sequence[str]
) -> dict[str, tuple[int, float]]:
    """Starts within each name's window, and when the oldest of them leaves it."""
    cursor = await conn.execute(_STARTS, [kind, list(names)])
    return {name: (int(count), float(frees)) for name, count, frees in await cursor.fetchall()}


async def room_left(conn: AsyncConnection[TupleRow], limits: dict[str, Limit]) -> dict[str, int]:
    """How many more runs each limited queue may start now (``limits`` locked already)."""
    names = sorted(limits)
    cursor = await conn.execute(_LEASED, [names])
    held = {queue: int(count) for queue, count in await cursor.fetchall()}
    starts = await _starts(conn, "queue", names)
    room: dict[str, int] = {}
    for name, limit in limits.items():
        left = math.inf
        if limit.concurrency is not None:
            left = min(left, limit.concurrency - held.get(name, 0))
        if limit.rate is not None:
            left = min(left, limit.rate.count - starts.get(name, (0, 0.0))[0])
        if left != math.inf:
            room[name] = max(int(left), 0)
    return room


async def record_starts(
    conn: AsyncConnection[TupleRow], kind: LimitKind, names: Sequence[str], limits: dict[str, Limit]
) -> None:
    """Record one start for each of ``names`` with a rate; forget starts out of the window."""
    rated = [name for name in names if name in limits and limits[name].rate is not None]
    if not rated:
        return
    await conn.execute(
        f"INSERT INTO lw_limit_starts (kind, name, at) SELECT %s, name, {NOW} "
        "FROM unnest(%s::text[]) AS n(name)",
        [kind, rated],
    )
    await conn.execute(
        f"DELETE FROM lw_limit_starts s USING lw_limits l WHERE s.kind = %s "
        "AND s.name = ANY(%s::text[]) AND l.kind = s.kind AND l.name = s.name "
        f"AND s.at <= {NOW} - l.rate_period",
        [kind, sorted(set(rated))],
    )


async def acquire_permit(
    conn: AsyncConnection[TupleRow],
    kind: LimitKind,
    name: str,
    *,
    permit_id: str,
    lease_seconds: float,
) -> Permit | float | None:
    """As ``_limits_sqlite.acquire_permit``, inside the caller's transaction."""
    locked = await lock_limits(conn, kind, [name])
    limit = locked.get(name)
    if limit is None:
        return None
    retry = 0.05
    if limit.concurrency is not None:
        await conn.execute(
            f"DELETE FROM lw_permits WHERE kind = %s AND name = %s AND expires_at < {NOW}",
            [kind, name],
        )
        cursor = await conn.execute(_PERMITS, [kind, name])
        row = await cursor.fetchone()
        if row is not None and int(row[0]) >= limit.concurrency:
            return retry
    if limit.rate is not None:
        count, frees_at = (await _starts(conn, kind, [name])).get(name, (0, 0.0))
        if count >= limit.rate.count:
            cursor = await conn.execute(f"SELECT {NOW}")
            now_row = await cursor.fetchone()
            now = float(now_row[0]) if now_row is not None else 0.0
            return max(retry, frees_at - now)
    cursor = await conn.execute(
        f"INSERT INTO lw_permits (permit_id, kind, name, expires_at) "
        f"VALUES (%s, %s, %s, {NOW} + %s) RETURNING expires_at",
        [permit_id, kind, name, lease_seconds],
    )
    inserted = await cursor.fetchone()
    await record_starts(conn, kind, [name], locked)
    expires = float(inserted[0]) if inserted is not None else 0.0
    return Permit(permit_id=permit_id, kind=kind, name=name, expires_at=expires)
