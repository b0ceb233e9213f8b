"""``PostgresBlobStore``: blobs in the ``blobs`` table of the store's schema.

Beside the event log, in the same database, so every worker of a shared store reads
the blobs any other wrote. ``put`` is one upsert, committed (so durable) before it
returns; a repeated put only refreshes ``created_at`` (see ``_blobs``), from the
server's clock like the event log's timestamps.

An append's blobs are put *behind* (``LoggedBlobStore``): one statement, committed with
``synchronous_commit`` off, just before the append. The server's WAL is one sequence, and
the append's synchronous commit returns only once the WAL is flushed up to its own commit
record, which comes after the blobs' one: when the append is durable, so are its blobs. A
crash between the two loses blobs no event refers to. (The setting is made by
``set_config(..., true)`` in a CTE the insert reads, so it lasts for that one statement's
transaction and never reaches the pooled connection's next user.)
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable
from typing import Final

from little_workflow.errors import BlobNotFoundError
from little_workflow.storage._blobs import (
    BlobInfo,
    BlobRef,
    blob_digest,
    validate_digest,
    verified,
)
from little_workflow.storage._postgres import PostgresEventLog
from little_workflow.storage._postgres_db import PostgresDatabase

__all__ = ["PostgresBlobStore"]

_NOW: Final = "extract(epoch from statement_timestamp())"
_PUT: Final = (
    "INSERT INTO blobs (digest, size, data, created_at) VALUES (%s, %s, %s, " + _NOW + ")"
    " ON CONFLICT (digest) DO UPDATE SET created_at = EXCLUDED.created_at"
)
_PUT_BEHIND: Final = (
    "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true))"
    " INSERT INTO blobs (digest, size, data, created_at)"
    " SELECT b.digest, b.size, b.data, " + _NOW + " FROM relaxed,"
    " unnest(%s::text[], %s::bigint[], %s::bytea[]) AS b(digest, size, data)"
    " ON CONFLICT (digest) DO UPDATE SET created_at = EXCLUDED.created_at"
)
_GET: Final = "SELECT data FROM blobs WHERE digest = %s"
_HAS: Final = "SELECT 1 FROM blobs WHERE digest = %s"
_DELETE: Final = "DELETE FROM blobs WHERE digest = %s"
_SWEEP: Final = (
    "DELETE FROM blobs WHERE digest = ANY(%s::text[]) AND created_at <= " + _NOW + " - %s"
    " RETURNING digest, size, created_at"
)
_LIST: Final = "SELECT digest, size, created_at FROM blobs ORDER BY digest"


class PostgresBlobStore:
    """A ``BlobStore`` on a ``PostgresDatabase`` (shared with the event log and KV)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database

    async def put(self, data: bytes) -> BlobRef:
        """Store ``data`` under its SHA-256 (refreshing ``created_at`` if present)."""
        digest = blob_digest(data)
        doing = f"write blob {digest}"
        async with self.database.connection(doing) as conn:
            # The data is sent even when the row exists: asking first would cost a round
            # trip on every put to save one on the rare repeated one.
            await conn.execute(_PUT, [digest, len(data), data])
        return BlobRef(digest=digest, size=len(data))

    def shares_log_with(self, log: object) -> bool:
        """Whether ``log`` is an event log on this store's database (one WAL)."""
        return isinstance(log, PostgresEventLog) and log.database is self.database

    async def put_behind(self, blobs: Iterable[bytes]) -> None:
        """All of ``blobs`` in one statement, committed without waiting for the WAL's
        flush, which the append that follows waits for (see the module docstring)."""
        unique = {blob_digest(data): data for data in blobs}
        if not unique:
            return
        doing = f"write {len(unique)} blob(s)"
        async with self.database.connection(doing) as conn:
            await conn.execute(
                _PUT_BEHIND,
                [list(unique), [len(data) for data in unique.values()], list(unique.values())],
            )

    async def get(self, digest: str) -> bytes:
        """The verified bytes of blob ``digest``."""
        doing = f"read blob {validate_digest(digest)}"
        async with self.database.connection(doing) as conn:
            cursor = await conn.execute(_GET, [digest])
            row = await cursor.fetchone()
        if row is None:
            raise BlobNotFoundError(f"blob {digest} is not in {self.database.description}")
        return verified(digest, bytes(row[0]), where=self.database.description)

    async def has(self, digest: str) -> bool:
        """Whether blob ``digest`` is stored."""
        doing = f"look up blob {validate_digest(digest)}"
        async with self.database.connection(doing) as conn:
            cursor = await conn.execute(_HAS, [digest])
            return await cursor.fetchone() is not None

    async def delete(self, digest: str) -> None:
        """Remove blob ``digest`` if present."""
        doing = f"delete blob {validate_digest(digest)}"
        async with self.database.connection(doing) as conn:
            await conn.execute(_DELETE, [digest])

    async def list(self) -> builtins.list[BlobInfo]:
        """Every blob, sorted by digest."""
        doing = "list blobs"
        async with self.database.connection(doing) as conn:
            cursor = await conn.execute(_LIST)
            rows = await cursor.fetchall()
        return [
            BlobInfo(digest=str(digest), size=int(size), created_at=float(created_at))
            for digest, size, created_at in rows
        ]

    async def sweep(self, digests: Iterable[str], *, grace: float) -> builtins.list[BlobInfo]:
        """Delete those of ``digests`` put at least ``grace`` seconds ago (see ``BlobStore``).

        One statement: the age test and the delete are one atomic step under the row
        lock a concurrent put's upsert waits for, with the server's clock.
        """
        wanted = list(dict.fromkeys(validate_digest(digest) for digest in digests))
        if not wanted:
            return []
        doing = f"sweep {len(wanted)} blob(s)"
        async with self.database.connection(doing) as conn:
            cursor = await conn.execute(_SWEEP, [wanted, float(grace)])
            rows = await cursor.fetchall()
        swept = [
            BlobInfo(digest=str(digest), size=int(size), created_at=float(created_at))
            for digest, size, created_at in rows
        ]
        swept.sort(key=lambda info: info.digest)
        return swept

    async def close(self) -> None:
        """Nothing of its own: the database's owner closes it."""
