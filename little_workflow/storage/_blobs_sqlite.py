"""``SqliteBlobStore``: a SQLite store's blobs, small ones in its database, large ones as files.

Most blobs of an agent's run are small: a conversation node holds one turn's new messages,
compressed, a few hundred bytes to a few KiB. As files (``FileBlobStore``) each took a
filesystem block (4 KiB) and a directory entry, and cost its put two fsyncs (the file's,
then its directory's): at 100-byte messages a 200-turn session's blobs took 19x the
conversation on disk, at 1 KiB 6x (``python -m bench.history --sweep``). Rows of the
``blobs`` table share pages and commit with one WAL fsync.

A blob larger than ``file_bytes`` (64 KiB by default) is still a file: a 50 MiB tool result
is written once by a plain file write, and never passes through the WAL, where it would be
written twice and copied again at checkpoint. Where a blob lives follows from its size
alone, but a store written before this table existed has small blobs as files, so every
read looks in the table first and then in the files, and ``list``, ``delete`` and
``sweep`` cover both.

The table is a rowid table, not ``WITHOUT ROWID``: in a ``WITHOUT ROWID`` table (an index
b-tree) a row over about 1 KiB of a 4 KiB page spills to overflow pages, in a rowid table
only a row over about 4 KiB does.

A row's ``data`` is deflated (zlib) when that saves at least an eighth of it: ``size`` is
always the blob's own size, so a row whose ``data`` is shorter than ``size`` is deflated
and one of equal length is the bytes themselves (every row written before was). Rows share
pages whole, so at 4 KiB pages two rows of 2.1 KiB each took a page of their own, half of
it empty: the 4 KiB turns of ``bench.history --sweep`` took 3.4x their conversation, since
their blobs are mostly text a model or a tool wrote, which deflates to about half. A blob
that is deflated already (a conversation node) is stored as it is, at the cost of one
failed try (``_deflate.py``). What a row holds is checked against its digest
after inflating, as a file's bytes are.
"""

from __future__ import annotations

import builtins
import heapq
import json
import sqlite3
import time
from collections.abc import Iterable
from typing import Final

from little_workflow.errors import BlobNotFoundError, CorruptDataError
from little_workflow.storage._blobs import (
    BlobInfo,
    BlobRef,
    blob_digest,
    validate_digest,
    verified,
)
from little_workflow.storage._blobs_file import FileBlobStore
from little_workflow.storage._deflate import InflateError, deflated, inflated
from little_workflow.storage._sqlite import SqliteEventLog
from little_workflow.storage._sqlite_db import SqliteDatabase

__all__ = ["FILE_BLOB_BYTES", "SqliteBlobStore"]

#: Blobs larger than this are files; the rest are rows of the database.
FILE_BLOB_BYTES: Final = 64 * 1024


def _row(data: bytes) -> tuple[str, int, bytes, float]:
    """The row of blob ``data``: deflated when that saves at least an eighth."""
    packed = deflated(data) if len(data) >= 64 else None
    return blob_digest(data), len(data), data if packed is None else packed, time.time()


_PUT: Final = (
    "INSERT INTO blobs (digest, size, data, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (digest) DO UPDATE SET created_at = excluded.created_at"
)
_GET: Final = "SELECT size, data FROM blobs WHERE digest = ?"
_HAS: Final = "SELECT 1 FROM blobs WHERE digest = ?"
_DELETE: Final = "DELETE FROM blobs WHERE digest = ?"
_LIST: Final = "SELECT digest, size, created_at FROM blobs ORDER BY digest"
# One statement for any number of digests (json_each avoids the bound-parameter limit);
# the age test and the delete are one step under the write lock a put also takes.
_SWEEP: Final = (
    "DELETE FROM blobs WHERE digest IN (SELECT value FROM json_each(?)) AND created_at <= ? "
    "RETURNING digest, size, created_at"
)


class SqliteBlobStore:
    """A ``BlobStore`` over a SQLite store's ``blobs`` table and its blob directory."""

    def __init__(
        self, database: SqliteDatabase, files: FileBlobStore, *, file_bytes: int = FILE_BLOB_BYTES
    ) -> None:
        self.database = database
        #: Where blobs larger than ``file_bytes`` go (and where older stores kept all).
        self.files = files
        self.file_bytes = file_bytes

    @property
    def _where(self) -> str:
        return f"the SQLite database {str(self.database.path)!r}"

    async def put(self, data: bytes) -> BlobRef:
        """Store ``data`` under its SHA-256 (refreshing its age if present); durable."""
        if len(data) > self.file_bytes:
            return await self.files.put(data)
        row = _row(data)
        await self.database.write(lambda conn: conn.execute(_PUT, row))
        return BlobRef(digest=row[0], size=len(data))

    def shares_log_with(self, log: object) -> bool:
        """Whether ``log`` is an event log of this store's database (one WAL)."""
        return isinstance(log, SqliteEventLog) and log.db is self.database

    async def put_behind(self, blobs: Iterable[bytes]) -> None:
        """The rows in one commit without fsync, ordered before the append that follows
        (``LoggedBlobStore``); a file is written, and synced, at once."""
        rows = []
        for data in blobs:
            if len(data) > self.file_bytes:
                await self.files.put(data)
            else:
                rows.append(_row(data))
        if rows:
            await self.database.write(lambda conn: conn.executemany(_PUT, rows), sync=False)

    async def get(self, digest: str) -> bytes:
        """The verified bytes of blob ``digest``, from the table or else its file."""
        validate_digest(digest)
        found = await self.database.read(lambda conn: conn.execute(_GET, (digest,)).fetchone())
        if found is None:
            try:
                return await self.files.get(digest)
            except BlobNotFoundError:
                raise BlobNotFoundError(
                    f"blob {digest} is neither in {self._where} nor in {str(self.files.root)!r}"
                ) from None
        size, stored = int(found[0]), bytes(found[1])
        return verified(digest, self._inflate(digest, size, stored), where=self._where)

    def _inflate(self, digest: str, size: int, stored: bytes) -> bytes:
        if len(stored) >= size:
            return stored
        try:
            # Never more than the row says: a damaged row cannot inflate without bound.
            data = inflated(stored, limit=size)
        except InflateError as exc:
            raise CorruptDataError(
                f"blob {digest} in {self._where} does not inflate: {exc}"
            ) from exc
        if len(data) != size:
            raise CorruptDataError(
                f"blob {digest} in {self._where} inflates to other than its {size} bytes"
            )
        return data

    async def has(self, digest: str) -> bool:
        """Whether blob ``digest`` is stored, in either place."""
        validate_digest(digest)
        found = await self.database.read(lambda conn: conn.execute(_HAS, (digest,)).fetchone())
        return found is not None or await self.files.has(digest)

    async def delete(self, digest: str) -> None:
        """Remove blob ``digest`` wherever it is; a missing one is not an error."""
        validate_digest(digest)
        await self.database.write(lambda conn: conn.execute(_DELETE, (digest,)))
        await self.files.delete(digest)

    async def list(self) -> builtins.list[BlobInfo]:
        """Every blob in both places, sorted by digest."""

        def query(conn: sqlite3.Connection) -> builtins.list[BlobInfo]:
            return [
                BlobInfo(digest=str(digest), size=int(size), created_at=float(created_at))
                for digest, size, created_at in conn.execute(_LIST)
            ]

        rows = await self.database.read(query)
        return list(heapq.merge(rows, await self.files.list(), key=lambda info: info.digest))

    async def sweep(self, digests: Iterable[str], *, grace: float) -> builtins.list[BlobInfo]:
        """Delete those of ``digests`` put at least ``grace`` seconds ago (see ``BlobStore``)."""
        wanted = list(dict.fromkeys(validate_digest(digest) for digest in digests))
        cutoff = time.time() - grace

        def delete(conn: sqlite3.Connection) -> builtins.list[BlobInfo]:
            return [
                BlobInfo(digest=str(digest), size=int(size), created_at=float(created_at))
                for digest, size, created_at in conn.execute(_SWEEP, (json.dumps(wanted), cutoff))
            ]

        swept = await self.database.write(delete) if wanted else []
        rows = {info.digest for info in swept}
        # The files' sweep also puts back what a killed sweep left aside, so it runs even
        # when every digest was a row.
        swept.extend(await self.files.sweep([d for d in wanted if d not in rows], grace=grace))
        swept.sort(key=lambda info: info.digest)
        return swept

    async def close(self) -> None:
        """Nothing of its own: the database's owner closes it."""
        await self.files.close()
