"""Write SQLite event rows behind the backend's back."""

from __future__ import annotations

import json
import sqlite3
import time
import zlib
from typing import Any

from little_workflow.storage import SqliteBlobStore, StoreSpec
from little_workflow.storage._checksum import event_checksum
from little_workflow.testing.eventlog_conformance import RawEventWriter


def event_text(data: str | bytes) -> str:
    """The JSON text of an ``events.data`` value read behind the backend's back: a long
    row is stored deflated, as a BLOB (``storage/_sqlite.py``)."""
    return zlib.decompress(data).decode() if isinstance(data, bytes) else data


def row_checksum(run_id: str, seq: int, type_name: str, ts: float, data: str | bytes) -> int:
    """``event_checksum`` of a row as stored (for ``create_function``: a test reseals rows)."""
    return event_checksum(run_id, seq, type_name, ts, event_text(data))


def event_json(data: str | bytes) -> Any:
    """The event an ``events.data`` value holds, parsed."""
    return json.loads(event_text(data))


def sqlite_writer(spec: StoreSpec) -> RawEventWriter:
    assert spec.path is not None
    path = spec.path

    async def write(run_id: str, seq: int, type_name: str, data: str) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            now = time.time()
            # A well-formed row, checksum and all: what is tested is what is in it.
            checksum = event_checksum(run_id, seq, type_name, now, data)
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO runs (run_id, created_at) VALUES (?, ?) ON CONFLICT DO NOTHING",
                (run_id, now),
            )
            conn.execute(
                "INSERT INTO events (run_id, seq, type, ts, data, checksum) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, seq, type_name, now, data, checksum),
            )
            conn.execute("COMMIT")
        finally:
            conn.close()

    return write


async def damage_sqlite_blob(blobs: SqliteBlobStore, digest: str, data: bytes | None) -> None:
    """Replace a SQLite store's blob behind its back, row or file; ``None`` removes it."""
    path = blobs.files.path(digest)
    if path.exists():
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
    elif data is None:
        await blobs.database.write(
            lambda conn: conn.execute("DELETE FROM blobs WHERE digest = ?", (digest,))
        )
    else:
        await blobs.database.write(
            lambda conn: conn.execute("UPDATE blobs SET data = ? WHERE digest = ?", (data, digest))
        )
