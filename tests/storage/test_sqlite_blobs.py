"""A SQLite store's blobs: small ones rows of its database, large ones files, and a store
written before the blobs table (every blob a file) read, extended and swept as it is."""

from __future__ import annotations

import asyncio
import base64
import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import JsonValue

from little_workflow.errors import CorruptDataError
from little_workflow.events import HarnessModelCalled, HarnessToolCallSucceeded, RunStarted
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


async def test_an_appends_blob_rows_ride_on_its_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        assert isinstance(store.blobs, SqliteBlobStore)
        assert store.blobs.shares_log_with(store.events)
        database = store.blobs.database
        commits: list[bool] = []
        write = database.write

        async def recorded(work: Any, *, sync: bool = True, group: str | None = None) -> Any:
            commits.append(sync)
            return await write(work, sync=sync, group=group)

        monkeypatch.setattr(database, "write", recorded)
        log = PayloadLog(store.events, store.blobs)
        large = os.urandom(FILE_BLOB_BYTES)  # base64 in a tool result: over 64 KiB of JSON
        started = RunStarted(
            workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
        )
        await log.append(RUN, [started])
        commits.clear()
        await log.append(RUN, [_called(1)])  # a conversation node: a row
        # One durable commit for the append; the node's row committed just before, unsynced.
        assert commits == [False, True]
        commits.clear()
        result = HarnessToolCallSucceeded(
            session_id="s", call_id="t", result=base64.b64encode(large).decode()
        )
        await log.append(RUN, [result])
        # The large result is a file, written (and synced) before the append: no row.
        assert commits == [True]
        assert len(_files(tmp_path)) == 1
        read = [r.event for r in await PayloadLog(store.events, store.blobs).read(RUN)]
        assert read[1] == _called(1)
        assert read[2] == result
    finally:
        await store.close()


async def test_blobs_of_another_database_are_put_durably_one_by_one(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    other = await open_store(f"sqlite:///{tmp_path}/other.db")
    try:
        assert isinstance(store.blobs, SqliteBlobStore)
        assert not store.blobs.shares_log_with(other.events)
        assert not store.blobs.shares_log_with(object())
    finally:
        await other.close()
        await store.close()


async def _rows(store: Any) -> dict[str, tuple[int, bytes]]:
    found = await store.blobs.database.read(
        lambda conn: conn.execute("SELECT digest, size, data FROM blobs").fetchall()
    )
    return {str(digest): (int(size), bytes(data)) for digest, size, data in found}


async def test_a_row_is_deflated_only_when_that_saves_an_eighth(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        text = b" ".join(b"word%d" % (i % 300) for i in range(2000))
        noise = os.urandom(3000)
        assert isinstance(store.blobs, SqliteBlobStore)
        deflated, kept = await store.blobs.put(text), await store.blobs.put(noise)
        await store.blobs.put_behind([text[:1500]])  # the append's path deflates too
        rows = await _rows(store)
        size, data = rows[deflated.digest]
        assert size == len(text)
        assert len(data) < len(text) // 2
        assert rows[kept.digest] == (len(noise), noise)
        assert sum(len(data) < size for size, data in rows.values()) == 2
        assert await store.blobs.get(deflated.digest) == text
        assert await store.blobs.get(kept.digest) == noise
        listed = {info.digest: info.size for info in await store.blobs.list()}
        assert listed[deflated.digest] == len(text)
    finally:
        await store.close()


@pytest.mark.parametrize(
    "damage",
    [
        lambda size, data: (size, data[: len(data) // 2]),  # cut short
        lambda size, data: (size, b"\x00" + data[1:]),  # not a zlib stream
        lambda size, data: (size - 10, data),  # inflates past the row's size
    ],
    ids=["truncated", "not-zlib", "too-long"],
)
async def test_a_damaged_deflated_row_is_a_typed_error(tmp_path: Path, damage: Any) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/little-workflow.db")
    try:
        text = b"the same sentence again. " * 200
        assert isinstance(store.blobs, SqliteBlobStore)
        database = store.blobs.database
        ref = await store.blobs.put(text)
        size, data = (await _rows(store))[ref.digest]
        bad_size, bad_data = damage(size, data)
        await database.write(
            lambda conn: conn.execute(
                "UPDATE blobs SET size = ?, data = ? WHERE digest = ?",
                (bad_size, bad_data, ref.digest),
            )
        )
        with pytest.raises(CorruptDataError, match=ref.digest):
            await store.blobs.get(ref.digest)
    finally:
        await store.close()


async def test_grouped_appends_of_many_runs_keep_their_blob_rows(tmp_path: Path) -> None:
    # Group commit across runs (``_sqlite_db.py``): each run's rows put behind still commit
    # before its append, which a reopened store reads whole.
    url = f"sqlite:///{tmp_path}/little-workflow.db"
    store = await open_store(url)
    try:
        assert isinstance(store.blobs, SqliteBlobStore)
        database = store.blobs.database
        log = PayloadLog(store.events, store.blobs)
        await log.append("run_first", [_called(0)])
        statements: list[str] = []
        connections = [database._conn, database._waiting()]
        for conn in connections:
            assert conn is not None
            conn.set_trace_callback(statements.append)
        seqs = await asyncio.gather(*(log.append(f"run_{n}", [_called(n)]) for n in range(8)))
        for conn in connections:
            assert conn is not None
            conn.set_trace_callback(None)
        assert seqs == [[1]] * 8
        # Eight appends and eight rows put behind, in fewer commits than appends.
        assert len([s for s in statements if s.strip().upper() == "COMMIT"]) < 8
    finally:
        await store.close()
    reopened = await open_store(url)
    try:
        for n in range(8):
            records = await PayloadLog(reopened.events, reopened.blobs).read(f"run_{n}")
            assert [r.event for r in records] == [_called(n)]
    finally:
        await reopened.close()
