"""Event checksums: a byte changed anywhere in a stored event row is ``CorruptDataError``.

A real run is cut off by a real crash (the CLI's crash hook: the process exits after its
Nth event), then one column of one stored row is changed behind the library's back with
the backend's own driver (sqlite3, psycopg), the way a failing disk or a careless hand
would. A flip inside a JSON string leaves valid JSON: only the checksum tells. The next
read raises ``CorruptDataError`` naming the run and seq, and ``resume`` (in-process and
from the CLI, exit code 4) stops there and writes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from little_workflow.errors import CorruptDataError
from little_workflow.runtime import Runtime
from little_workflow.storage import _postgres_db as postgres_db
from little_workflow.storage import _sqlite_db as sqlite_db
from little_workflow.storage import parse_store_url
from little_workflow.storage._checksum import FOLD_SQL, event_checksum, fold
from tests.runtime.support import cli
from tests.storage.raw_sqlite import event_text

FLOW = Path(__file__).resolve().parent / "flows" / "checksum.yaml"
NAME = "alice-0123456789"
STORAGE_ERROR = 4  # the CLI's exit code for a storage error (README, "Exit codes")


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/events.db"
    url: str = request.getfixturevalue("postgres_url")
    return url


@contextmanager
def raw(store: str) -> Iterator[Any]:
    """A DB-API connection to the store's tables, outside the library, committing on exit."""
    spec = parse_store_url(store)
    if spec.kind == "sqlite":
        assert spec.path is not None
        conn = sqlite3.connect(spec.path)
        try:
            with conn:
                yield conn
        finally:
            conn.close()
        return
    assert spec.conninfo is not None
    with psycopg.connect(spec.conninfo) as pg:
        pg.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(spec.schema)))
        yield _Postgres(pg)


class _Postgres:
    """``execute`` with sqlite3's ``?`` placeholders, so one SQL text serves both."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(query.replace("?", "%s"), params)  # type: ignore[arg-type]


def rows(store: str) -> list[tuple[Any, ...]]:
    with raw(store) as conn:
        return [
            (run_id, seq, kind, ts, event_text(data), checksum)
            for run_id, seq, kind, ts, data, checksum in conn.execute(
                "SELECT run_id, seq, type, ts, data, checksum FROM events ORDER BY run_id, seq"
            ).fetchall()
        ]


def crashed_run(tmp_path: Path, store: str) -> int:
    """A run cut off after its first step completed; the seq of that step's event."""
    done = cli(tmp_path / "data", "--store", store, "run", str(FLOW), "--input",
               json.dumps({"name": NAME}), "--run-id", "run-1", crash=3)  # fmt: skip
    assert done.returncode != 0
    [seq] = [row[1] for row in rows(store) if NAME in row[4] and row[2] == "StepCompleted"]
    return int(seq)


def flip_in_string(data: str) -> str:
    """One byte of the step's output changed, inside a JSON string: still valid JSON."""
    at = data.index(NAME) + len("alice-")
    damaged = data[:at] + chr(ord(data[at]) ^ 0x01) + data[at + 1 :]
    assert json.loads(damaged) != json.loads(data)
    return damaged


def flip_ts(ts: float) -> float:
    (bits,) = struct.unpack(">q", struct.pack(">d", ts))
    (changed,) = struct.unpack(">d", struct.pack(">q", bits ^ (1 << 20)))
    return float(changed)


DAMAGE = {
    "data": ("UPDATE events SET data = ? WHERE run_id = 'run-1' AND seq = ?", flip_in_string),
    "type": ("UPDATE events SET type = ? WHERE run_id = 'run-1' AND seq = ?", str.lower),
    "ts": ("UPDATE events SET ts = ? WHERE run_id = 'run-1' AND seq = ?", flip_ts),
}


@pytest.mark.parametrize("column", [*DAMAGE, "checksum", "seq"])
async def test_a_changed_row_is_corrupt_data_and_resume_writes_nothing(
    tmp_path: Path, store: str, column: str
) -> None:
    seq = crashed_run(tmp_path, store)
    with raw(store) as conn:
        if column == "checksum":
            # One bit flipped (SQLite has no XOR operator; this is one on both).
            conn.execute(
                "UPDATE events SET checksum = (checksum | 256) - (checksum & 256) "
                "WHERE run_id = 'run-1' AND seq = ?",
                (seq,),
            )
        elif column == "seq":
            # The last row moved past the end (seq + 256: one bit of the integer): the
            # seq it had is missing now.
            seq = max(row[1] for row in rows(store))
            conn.execute(
                "UPDATE events SET seq = seq + 256 WHERE run_id = 'run-1' AND seq = ?", (seq,)
            )
        else:
            statement, change = DAMAGE[column]
            (value,) = conn.execute(
                f"SELECT {column} FROM events WHERE run_id = 'run-1' AND seq = ?", (seq,)
            ).fetchone()
            # A long row is stored deflated: the damage is to its JSON, as written.
            conn.execute(statement, (change(event_text(value) if column == "data" else value), seq))
    before = rows(store)

    async with Runtime(tmp_path / "data", store=store) as rt:
        with pytest.raises(CorruptDataError) as read:
            await rt.events.read("run-1")
        with pytest.raises(CorruptDataError) as resumed:
            await rt.resume("run-1")
    for error in (read.value, resumed.value):
        assert f"run 'run-1' seq {seq}" in str(error)
        assert ("is missing" if column == "seq" else "checksum") in str(error)

    shown = cli(tmp_path / "data", "--store", store, "resume", "run-1")
    assert shown.returncode == STORAGE_ERROR, shown.stderr
    assert f"run 'run-1' seq {seq}" in shown.stderr
    assert rows(store) == before  # nothing written, nothing repaired


async def test_a_row_without_a_checksum_after_one_with_it_is_corrupt(
    tmp_path: Path, store: str
) -> None:
    """Turning a checksum into NULL (one bit of SQLite's record header) is no way around it."""
    crashed_run(tmp_path, store)
    last = max(row[1] for row in rows(store))
    assert last > 1
    with raw(store) as conn:
        conn.execute(
            "UPDATE events SET checksum = NULL WHERE run_id = 'run-1' AND seq = ?", (last,)
        )
    async with Runtime(tmp_path / "data", store=store) as rt:
        with pytest.raises(
            CorruptDataError, match=f"run 'run-1' seq {last} in .*: the event has no checksum"
        ):
            await rt.events.read("run-1")


async def test_a_row_missing_from_the_middle_is_corrupt(tmp_path: Path, store: str) -> None:
    seq = crashed_run(tmp_path, store)
    with raw(store) as conn:
        conn.execute("DELETE FROM events WHERE run_id = 'run-1' AND seq = ?", (seq - 1,))
    async with Runtime(tmp_path / "data", store=store) as rt:
        with pytest.raises(CorruptDataError, match=f"run 'run-1' seq {seq - 1} in .* is missing"):
            await rt.events.read("run-1")


async def test_rows_written_before_checksums_read_unverified(tmp_path: Path, store: str) -> None:
    """A store written before this change: its rows hold NULL, read and resume as before,
    and every row appended after the upgrade carries a checksum."""
    crashed_run(tmp_path, store)
    with raw(store) as conn:
        conn.execute("UPDATE events SET checksum = NULL")
    legacy = {row[1] for row in rows(store)}
    upgraded = cli(tmp_path / "data", "--store", store, "db", "upgrade", "--json")
    assert upgraded.returncode == 0, upgraded.stderr
    assert json.loads(upgraded.stdout)["after"]["unverifiedEvents"] == len(legacy)
    async with Runtime(tmp_path / "data", store=store) as rt:
        result = await rt.resume("run-1")
    assert result.output == f"hello {NAME}"
    after = rows(store)
    assert {row[1] for row in after if row[5] is None} == legacy
    for run_id, seq, type_name, ts, data, checksum in after:
        if seq not in legacy:
            assert checksum == event_checksum(run_id, seq, type_name, ts, data)


def _checksum_migration(kind: str) -> int:
    """The index of the migration that adds checksums (the lead may renumber it)."""
    migrations: Sequence[object] = (
        sqlite_db.MIGRATIONS if kind == "sqlite" else postgres_db.MIGRATIONS
    )
    [index] = [i for i, script in enumerate(migrations) if "checksum" in str(script)]
    return index


async def test_a_store_from_before_checksums_upgrades_and_resumes(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store as the version before wrote it (its schema without checksums, its rows):
    ``db upgrade`` migrates it and counts the rows it leaves unverified, the run they
    belong to resumes, and what it appends carries checksums."""
    spec = parse_store_url(store)
    source = f"sqlite:///{tmp_path}/source.db" if spec.kind == "sqlite" else store
    crashed_run(tmp_path, source)
    tables = ("kv", "runs", "events")
    columns = {"kv": "*", "runs": "*", "events": "run_id, seq, type, ts, data"}
    with raw(source) as conn:
        copied = {t: conn.execute(f"SELECT {columns[t]} FROM {t}").fetchall() for t in tables}
    old = f"sqlite:///{tmp_path}/old.db" if spec.kind == "sqlite" else store + "_old"
    kind = parse_store_url(old).kind
    with monkeypatch.context() as patch:
        # The schema as the version before made it: every migration before this one.
        mine = _checksum_migration(kind)
        if kind == "sqlite":
            patch.setattr(sqlite_db, "MIGRATIONS", sqlite_db.MIGRATIONS[:mine])
            database: Any = await sqlite_db.SqliteDatabase.open(parse_store_url(old))
        else:
            patch.setattr(postgres_db, "MIGRATIONS", postgres_db.MIGRATIONS[:mine])
            database = await postgres_db.PostgresDatabase.open(parse_store_url(old))
        await database.close()
    with raw(old) as conn:
        for table in tables:
            for row in copied[table]:
                marks = ", ".join("?" for _ in row)
                names = "" if columns[table] == "*" else f" ({columns[table]})"
                conn.execute(f"INSERT INTO {table}{names} VALUES ({marks})", tuple(row))
    try:
        upgraded = cli(tmp_path / "old-data", "--store", old, "db", "upgrade", "--json")
        assert upgraded.returncode == 0, upgraded.stderr
        report = json.loads(upgraded.stdout)
        assert report["before"]["version"] == mine
        assert report["after"]["unverifiedEvents"] == len(copied["events"])
        async with Runtime(tmp_path / "old-data", store=old) as rt:
            result = await rt.resume("run-1")
        assert result.output == f"hello {NAME}"
        after = rows(old)
        legacy = {row[1] for row in copied["events"]}
        assert {row[1] for row in after if row[5] is None} == legacy
        assert len(after) > len(legacy)
        for run_id, seq, type_name, ts, data, checksum in after:
            if seq not in legacy:
                assert checksum == event_checksum(run_id, seq, type_name, ts, data)
    finally:
        if kind == "postgres":
            old_spec = parse_store_url(old)
            assert old_spec.conninfo is not None
            with psycopg.connect(old_spec.conninfo, autocommit=True) as pg:
                pg.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                        sql.Identifier(old_spec.schema)
                    )
                )


async def test_the_fold_is_the_same_in_sql_and_python(postgres_url: str) -> None:
    spec = parse_store_url(postgres_url)
    assert spec.conninfo is not None
    cases = [(1, 0.0), (7, 1764633600.123456), (2**40 + 3, -1.5e-300), (12, 1e300)]
    query = "SELECT " + FOLD_SQL.format(ts="%s::double precision", seq="%s::bigint")
    with psycopg.connect(spec.conninfo) as conn:
        for seq, ts in cases:
            # FOLD_SQL names each of ts and seq twice.
            (found,) = conn.execute(query, (ts, ts, seq, seq)).fetchone()  # type: ignore[arg-type]
            assert found == fold(seq, ts)
