"""Long event rows on SQLite are stored deflated (a BLOB), short ones as JSON text; both
read back as written, a damaged deflated row is corrupt data, and a store holding them is
refused by a version that knows nothing of them."""

from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import pytest

from little_workflow.errors import CorruptDataError, SchemaVersionError
from little_workflow.events import StepCompleted, encode_event
from little_workflow.storage import _sqlite_db as sqlite_db
from little_workflow.storage import open_store, parse_store_url
from tests.storage.raw_sqlite import event_text, sqlite_writer

RUN = "run_deflate"
PROSE = " ".join(f"word{i % 97} said the model" for i in range(40))


def _completed(index: int, output: str) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id=f"s{index}", kind="execute", output=output)


def _rows(db: Path) -> list[tuple[int, str | bytes]]:
    conn = sqlite3.connect(db)
    try:
        return list(
            conn.execute("SELECT seq, data FROM events WHERE run_id = ? ORDER BY seq", (RUN,))
        )
    finally:
        conn.close()


async def test_long_rows_are_deflated_short_ones_text_and_both_read_as_written(
    tmp_path: Path,
) -> None:
    db = tmp_path / "little-workflow.db"
    events = [_completed(1, "short"), _completed(2, PROSE), _completed(3, "again")]
    store = await open_store(f"sqlite:///{db}")
    try:
        await store.events.append(RUN, events[:2])
        await store.events.append(RUN, events[2:])
        read = [record.event for record in await store.events.read(RUN)]
    finally:
        await store.close()
    assert read == events
    rows = _rows(db)
    assert [type(data) for _, data in rows] == [str, bytes, str]
    deflated = rows[1][1]
    assert isinstance(deflated, bytes)
    assert event_text(deflated) == encode_event(events[1])
    assert len(deflated) < len(encode_event(events[1])) // 2


async def test_a_long_row_stored_as_text_reads_too(tmp_path: Path) -> None:
    # What a store written before deflating holds: JSON text of any length.
    url = f"sqlite:///{tmp_path}/little-workflow.db"
    store = await open_store(url)
    await store.close()
    await sqlite_writer(parse_store_url(url))(
        RUN, 1, "StepCompleted", encode_event(_completed(1, PROSE))
    )
    store = await open_store(url)
    try:
        [record] = await store.events.read(RUN)
    finally:
        await store.close()
    assert record.event == _completed(1, PROSE)


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[: len(data) // 2],  # cut short
        lambda data: b"\x00" + data[1:],  # not a zlib stream
        lambda data: zlib.compress(b"\xff\xfe" + zlib.decompress(data)),  # not UTF-8
        lambda data: zlib.compress(zlib.decompress(data).replace(b"word1", b"word2", 1)),
    ],
    ids=["truncated", "not-zlib", "not-utf8", "other-json"],
)
async def test_a_damaged_deflated_row_is_corrupt_data_and_nothing_is_read(
    tmp_path: Path, damage: object
) -> None:
    db = tmp_path / "little-workflow.db"
    store = await open_store(f"sqlite:///{db}")
    try:
        await store.events.append(RUN, [_completed(1, "short"), _completed(2, PROSE)])
        [(_, data)] = [row for row in _rows(db) if isinstance(row[1], bytes)]
        assert isinstance(data, bytes)
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(
                "UPDATE events SET data = ? WHERE run_id = ? AND seq = 2",
                (damage(data), RUN),  # type: ignore[operator]
            )
        conn.close()
        with pytest.raises(CorruptDataError, match=f"run '{RUN}' seq 2"):
            await store.events.read(RUN)
    finally:
        await store.close()


async def test_a_version_without_deflated_rows_refuses_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path}/little-workflow.db"
    store = await open_store(url)
    await store.events.append(RUN, [_completed(1, PROSE)])
    await store.close()
    mine = sqlite_db.MIGRATIONS.index(("SELECT 1",))  # the version of deflated rows
    monkeypatch.setattr(sqlite_db, "MIGRATIONS", sqlite_db.MIGRATIONS[:mine])
    with pytest.raises(SchemaVersionError, match="Upgrade little-workflow"):
        await open_store(url)
