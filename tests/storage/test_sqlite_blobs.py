"""A SQLite store's blobs: small ones rows of its database, large ones files, and a store
written before the blobs table (every blob a file) read, extended and swept as it is."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import JsonValue

from little_workflow.events import HarnessModelCalled, RunStarted
from little_workflow.storage import (
    FileBlobStore,
    PayloadLog,
    SqliteBlobStore,
    open_store,
    parse_store_url,
    payload_refs,
    referenced_digests,
)
from little_workflow.storage import _sqlite_db as sqlite_db
from little_workflow.storage._blobs_sqlite import FILE_BLOB_BYTES
from little_workflow.storage._sqlite import SqliteEventLog

RUN = "run_blobs"


def _files(root: Path) -> list[Path]:
    return [path for path in (root / "blobs").rglob("*") if path.is_file()]


async def test_small_blobs_are_rows_and_large_ones_files(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        assert isinstance(store.blobs, SqliteBlobStore)
        small = await store.blobs.put(b"s" * FILE_BLOB_BYTES)
        large = await store.blobs.put(os.urandom(FILE_BLOB_BYTES + 1))
        assert [path.name for path in _files(tmp_path)] == [large.digest]
        rows = await store.blobs.database.read(
            lambda conn: conn.execute("SELECT digest, size FROM blobs").fetchall()
        )
        assert rows == [(small.digest, FILE_BLOB_BYTES)]
        assert [info.digest for info in await store.blobs.list()] == sorted(
            [small.digest, large.digest]
        )
    finally:
        await store.close()


def _request(turn: int) -> dict[str, JsonValue]:
    messages: list[JsonValue] = [{"role": "user", "content": "u" * 5000}]
    for index in range(turn):
        messages.append({"role": "assistant", "content": f"answer {index} " + "a" * 300})
    return {"model": "m", "messages": messages, "tools": [], "temperature": None}


def _called(turn: int) -> HarnessModelCalled:
    return HarnessModelCalled(session_id="s", call_id=f"c{turn}", slot="x", request=_request(turn))


async def test_a_store_from_before_the_blobs_table_reads_extends_and_sweeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/little-workflow.db"
    started = RunStarted(
        workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
    )
    with monkeypatch.context() as patch:
        # The version before: its schema has no blobs table, and every blob is a file.
        [mine] = [i for i, m in enumerate(sqlite_db.MIGRATIONS) if "CREATE TABLE blobs" in str(m)]
        patch.setattr(sqlite_db, "MIGRATIONS", sqlite_db.MIGRATIONS[:mine])
        database = await sqlite_db.SqliteDatabase.open(parse_store_url(url))
        old = PayloadLog(SqliteEventLog(database), FileBlobStore(tmp_path / "blobs"))
        await old.append(RUN, [started, *(_called(turn) for turn in range(3))])
        await database.close()
    legacy = {path.name for path in _files(tmp_path)}
    assert len(legacy) == 3  # one conversation node per call

    store = await open_store(url)
    try:
        log = PayloadLog(store.events, store.blobs)
        read = [r.event for r in await log.read(RUN)]
        assert [e.request for e in read if isinstance(e, HarnessModelCalled)] == [
            _request(turn) for turn in range(3)
        ]
        await log.append(RUN, [_called(3), _called(4)])
        # The new nodes are rows: no file was added.
        assert {path.name for path in _files(tmp_path)} == legacy
        listed = {info.digest for info in await store.blobs.list()}
        assert len(listed) == 5
        assert legacy < listed
        stored = [record.event for record in await store.events.read(RUN)]
        refs = [ref for event in stored for ref in payload_refs(event)]
        assert await referenced_digests(refs, store.blobs) == listed
        assert [
            e.request
            for e in (r.event for r in await PayloadLog(store.events, store.blobs).read(RUN))
            if isinstance(e, HarnessModelCalled)
        ] == [_request(turn) for turn in range(5)]
        # A sweep (what gc does for unreferenced blobs) reaches both places.
        swept = await store.blobs.sweep(sorted(listed), grace=0)
        assert {info.digest for info in swept} == listed
        assert await store.blobs.list() == []
        assert _files(tmp_path) == []
    finally:
        await store.close()
