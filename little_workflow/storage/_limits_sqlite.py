"""Limits on SQLite (``storage/_limits.py``): the rows, the room left, model-slot permits.

Everything here runs inside a transaction of the caller's (``SqliteDatabase.write`` is
``BEGIN IMMEDIATE``): counting what a limit leaves and taking it happen under the one
write lock every process of the file shares, so two processes cannot both take the last
place. A permit's holder is its process (pid and start time, as a run lease's): a permit
of a killed process is free at once, one of a live but stalled process when its lease
expires.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Iterable

from little_workflow.storage._limits import Limit, LimitKind, Permit, Rate

__all__ = [
    "acquire_permit",
    "read_limits",
    "record_starts",
    "release_permit",
    "remove_limit",
    "renew_permits",
    "room_left",
    "write_limit",
]


def _limit(concurrency: int | None, count: int | None, period: float | None) -> Limit:
    rate = None if count is None or period is None else Rate(int(count), float(period))
    return Limit(concurrency=None if concurrency is None else int(concurrency), rate=rate)


def read_limits(conn: sqlite3.Connection, kind: LimitKind) -> dict[str, Limit]:
    """Every stored limit of ``kind``, by name."""
    rows = conn.execute(
        "SELECT name, concurrency, rate_count, rate_period FROM lw_limits WHERE kind = ? "
        "ORDER BY name",
        (kind,),
    ).fetchall()
    return {name: _limit(c, n, p) for name, c, n, p in rows}


def write_limit(
    conn: sqlite3.Connection, kind: LimitKind, name: str, limit: Limit, now: float
) -> None:
    """Store (or replace) the limit of ``kind`` ``name``."""
    rate = limit.rate
    conn.execute(
        "INSERT INTO lw_limits (kind, name, concurrency, rate_count, rate_period, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (kind, name) DO UPDATE SET "
        "concurrency = excluded.concurrency, rate_count = excluded.rate_count, "
        "rate_period = excluded.rate_period, updated_at = excluded.updated_at",
        (
            kind,
            name,
            limit.concurrency,
            None if rate is None else rate.count,
            None if rate is None else rate.per,
            now,
        ),
    )


def remove_limit(conn: sqlite3.Connection, kind: LimitKind, name: str) -> bool:
    """Delete the limit of ``kind`` ``name``; whether there was one."""
    cursor = conn.execute("DELETE FROM lw_limits WHERE kind = ? AND name = ?", (kind, name))
    conn.execute("DELETE FROM lw_limit_starts WHERE kind = ? AND name = ?", (kind, name))
    return cursor.rowcount == 1


def _recent_starts(
    conn: sqlite3.Connection, kind: LimitKind, name: str, rate: Rate, now: float
) -> tuple[int, float | None]:
    """Starts within the window, and when the oldest of them leaves it."""
    count, oldest = conn.execute(
        "SELECT count(*), min(at) FROM lw_limit_starts WHERE kind = ? AND name = ? AND at > ?",
        (kind, name, now - rate.per),
    ).fetchone()
    return int(count), None if oldest is None else float(oldest) + rate.per


def room_left(
    conn: sqlite3.Connection,
    kind: LimitKind,
    held: Callable[[str], int],
    now: float,
) -> dict[str, int]:
    """How many more each limited name of ``kind`` may start now (0: none).

    ``held(name)`` counts what is held under that name now (live leases, live permits).
    A name with no stored limit is absent: unlimited.
    """
    room: dict[str, int] = {}
    for name, limit in read_limits(conn, kind).items():
        left = math.inf
        if limit.concurrency is not None:
            left = min(left, limit.concurrency - held(name))
        if limit.rate is not None:
            recent, _ = _recent_starts(conn, kind, name, limit.rate, now)
            left = min(left, limit.rate.count - recent)
        if left != math.inf:
            room[name] = max(int(left), 0)
    return room


def record_starts(
    conn: sqlite3.Connection, kind: LimitKind, names: Iterable[str], now: float
) -> None:
    """Record one start for each of ``names`` that has a rate, and forget old starts."""
    limits = read_limits(conn, kind)
    for name in names:
        rate = limits[name].rate if name in limits else None
        if rate is None:
            continue
        conn.execute(
            "DELETE FROM lw_limit_starts WHERE kind = ? AND name = ? AND at <= ?",
            (kind, name, now - rate.per),
        )
        conn.execute(
            "INSERT INTO lw_limit_starts (kind, name, at) VALUES (?, ?, ?)", (kind, name, now)
        )


def _live_permits(
    conn: sqlite3.Connection, kind: LimitKind, name: str, now: float, alive: Callable[[str], bool]
) -> int:
    """Permits of ``name`` that hold; the lapsed ones are deleted on the way."""
    rows = conn.execute(
        "SELECT permit_id, holder, expires_at FROM lw_permits WHERE kind = ? AND name = ?",
        (kind, name),
    ).fetchall()
    lapsed = [permit for permit, holder, expires in rows if expires < now or not alive(holder)]
    if lapsed:
        conn.execute(
            "DELETE FROM lw_permits WHERE permit_id IN (SELECT value FROM json_each(?))",
            (json.dumps(lapsed),),
        )
    return len(rows) - len(lapsed)


def acquire_permit(
    conn: sqlite3.Connection,
    kind: LimitKind,
    name: str,
    *,
    permit_id: str,
    holder: str,
    lease_seconds: float,
    now: float,
    alive: Callable[[str], bool],
) -> Permit | float | None:
    """Take a permit of ``name``: the ``Permit``; ``None`` if ``name`` has no limit (go
    ahead, nothing to release); else the seconds worth waiting before asking again."""
    limit = read_limits(conn, kind).get(name)
    if limit is None:
        return None
    retry = 0.05
    concurrency = limit.concurrency
    if concurrency is not None and _live_permits(conn, kind, name, now, alive) >= concurrency:
        return retry  # a permit is released at no known time: ask again soon
    if limit.rate is not None:
        count, frees_at = _recent_starts(conn, kind, name, limit.rate, now)
        if count >= limit.rate.count:
            return max(retry, (frees_at or now) - now)
    conn.execute(
        "INSERT INTO lw_permits (permit_id, kind, name, holder, expires_at) VALUES (?, ?, ?, ?, ?)",
        (permit_id, kind, name, holder, now + lease_seconds),
    )
    record_starts(conn, kind, [name], now)
    return Permit(permit_id=permit_id, kind=kind, name=name, expires_at=now + lease_seconds)


def renew_permits(
    conn: sqlite3.Connection, permit_ids: Iterable[str], *, lease_seconds: float, now: float
) -> set[str]:
    """Extend the permits still held; the ids renewed."""
    renewed = set()
    for permit_id in permit_ids:
        cursor = conn.execute(
            "UPDATE lw_permits SET expires_at = ? WHERE permit_id = ? AND expires_at >= ?",
            (now + lease_seconds, permit_id, now),
        )
        if cursor.rowcount == 1:
            renewed.add(permit_id)
    return renewed


def release_permit(conn: sqlite3.Connection, permit_id: str) -> bool:
    """Give a permit back; whether it was still held."""
    cursor = conn.execute("DELETE FROM lw_permits WHERE permit_id = ?", (permit_id,))
    return cursor.rowcount == 1
