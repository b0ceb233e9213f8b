"""SQLite specifics the conformance suite cannot see: statements per call, WAL, waiting."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest

from little_workflow.errors import StorageBusyError
from little_workflow.events import StepCompleted
from little_workflow.storage import StoreSpec, open_store, parse_store_url
from little_workflow.storage._sqlite import SqliteEventLog, SqliteStorage
from little_workflow.storage._sqlite_db import MIGRATIONS, SqliteDatabase


def _step(index: int) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id=f"s{index}", kind="execute", output=index)


async def test_get_many_is_one_statement(tmp_path: Path) -> None:
    db = await SqliteDatabase.open(parse_store_url(f"sqlite:///{tmp_path}/db.sqlite"))
    storage = SqliteStorage(db, owns_database=True)
    keys = [f"execution:e:ledger:{i:06d}" for i in range(1000)]
    for key in keys[:600]:
        await storage.set(key, {"k": key})
    statements: list[str] = []
    assert db._conn is not None
    db._conn.set_trace_callback(statements.append)
    values = await storage.get_many(keys)
    db._conn.set_trace_callback(None)
    assert len(values) == 600
    assert len([s for s in statements if s.lstrip().upper().startswith("SELECT")]) == 1
    await storage.close()


async def test_the_database_is_in_wal_mode_and_owner_only(tmp_path: Path) -> None:
    store = await open_store(f"sqlite:///{tmp_path}/data/db.sqlite")
    await store.events.append("run_1", [_step(1)])
    await store.close()
    conn = sqlite3.connect(tmp_path / "data" / "db.sqlite")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    assert stat.S_IMODE(os.stat(tmp_path / "data" / "db.sqlite").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "data").st_mode) == 0o700


async def test_an_append_waits_for_a_writer_in_another_connection(tmp_path: Path) -> None:
    spec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite?busy_timeout=5")
    log = SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
    await log.append("run_w", [_step(0)])
    blocker = sqlite3.connect(spec.path, isolation_level=None)  # type: ignore[arg-type]
    blocker.execute("BEGIN IMMEDIATE")
    append = asyncio.create_task(log.append("run_w", [_step(1)]))
    # The loop stays free while the append waits in the worker thread: other tasks run.
    ticks = 0
    for _ in range(10):
        await asyncio.sleep(0.02)
        ticks += 1
    assert ticks == 10
    assert not append.done()
    # A read waits behind this process's pending write, so it sees the write's outcome.
    read = asyncio.create_task(log.read("run_w"))
    await asyncio.sleep(0.05)
    assert not read.done()
    blocker.execute("COMMIT")
    blocker.close()
    assert await asyncio.wait_for(append, 5) == [2]
    assert [r.seq for r in await asyncio.wait_for(read, 5)] == [1, 2]
    await log.close()


async def test_a_writer_held_past_the_busy_timeout_is_a_typed_error(tmp_path: Path) -> None:
    spec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite?busy_timeout=0.3")
    log = SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
    blocker = sqlite3.connect(spec.path, isolation_level=None)  # type: ignore[arg-type]
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageBusyError, match="nothing was written"):
            await log.append("run_b", [_step(0)])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await log.read("run_b") == []
    await log.close()


async def test_a_newer_schema_is_refused(tmp_path: Path) -> None:
    spec: StoreSpec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite")
    db = await SqliteDatabase.open(spec)
    await db.close()
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    conn.execute("INSERT INTO lw_schema_migrations (version, applied_at) VALUES (99, 0)")
    conn.commit()
    conn.close()
    from little_workflow.errors import SchemaVersionError

    with pytest.raises(SchemaVersionError, match="99"):
        await SqliteDatabase.open(spec)


def test_processes_opening_a_new_database_at_once_all_succeed(tmp_path: Path) -> None:
    # Until the file is in WAL mode, even a read waits for a writer: every opener must
    # wait for the lock rather than fail with "database is locked".
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path}/fresh/little-workflow.db"
    go = tmp_path / "go"
    code = (
        "import asyncio, os, sys\n"
        "from little_workflow.events import StepCompleted\n"
        "from little_workflow.storage import open_event_log\n"
        "async def main():\n"
        "    while not os.path.exists(sys.argv[3]):\n"
        "        pass\n"
        "    log = await open_event_log(sys.argv[1])\n"
        "    step = StepCompleted(step_path='s', step_id='s', kind='execute')\n"
        "    await log.append('run_' + sys.argv[2], [step])\n"
        "    await log.close()\n"
        "asyncio.run(main())\n"
    )
    count = 12
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, url, str(i), str(go)], stderr=subprocess.PIPE, text=True
        )
        for i in range(count)
    ]
    time.sleep(1.0)  # every child has imported and spins: they open the file at once
    go.touch()
    errors = [process.communicate(timeout=60)[1] for process in processes]
    assert [process.returncode for process in processes] == [0] * count, errors
    conn = sqlite3.connect(tmp_path / "fresh" / "little-workflow.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM events").fetchone()[0] == count
        migrations = conn.execute("SELECT COUNT(*) FROM lw_schema_migrations").fetchone()[0]
        assert migrations == len(MIGRATIONS)
    finally:
        conn.close()
