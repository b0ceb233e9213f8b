"""The SQLite runs list at any size: each filter's plan, keyset pages, a store of schema 7."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from little_workflow.events import RunCompleted, RunStarted, RunStatus
from little_workflow.storage import parse_store_url
from little_workflow.storage._sqlite import SqliteEventLog
from little_workflow.storage._sqlite_db import MIGRATIONS, SqliteDatabase


def _started(workflow: str, parent: str | None = None) -> RunStarted:
    return RunStarted(
        workflow_name=workflow,
        definition_hash="sha256:" + "0" * 64,
        workflow_version_id="wv_1",
        input=None,
        parent_run_id=parent,
    )


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteEventLog]:
    spec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite?synchronous=NORMAL")
    events = SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
    yield events
    await events.close()


def _statements(log: SqliteEventLog) -> list[str]:
    """The SQL the loop's connection runs from now on, parameters expanded."""
    seen: list[str] = []
    conn = log.db._conn
    assert conn is not None
    conn.set_trace_callback(seen.append)
    return seen


_LATER = (time.time() + 3600, "run_x")


@pytest.mark.parametrize(
    ("filters", "index"),
    [
        ({"top_level": True}, "runs_top_by_created"),
        ({"top_level": True, "before": _LATER}, "runs_top_by_created"),
        ({"status": RunStatus.FAILED}, "runs_by_status"),
        ({"status": RunStatus.FAILED, "top_level": True, "before": _LATER}, "runs_by_status"),
        ({"workflow": "wide"}, "runs_by_workflow"),
        ({"parent_run_id": "run_p"}, "runs_by_parent_created"),
        ({"parent_run_id": "run_p", "before": _LATER}, "runs_by_parent_created"),
        ({}, "runs_by_created"),
    ],
    ids=lambda value: value if isinstance(value, str) else "-".join(value) or "all",
)
async def test_each_filter_reads_its_index_in_order(
    log: SqliteEventLog, filters: dict[str, object], index: str
) -> None:
    await log.append("run_p", [_started("wide")])
    await log.append("run_c", [_started("wide", parent="run_p")])
    seen = _statements(log)
    await log.list_runs(limit=50, **filters)  # type: ignore[arg-type]
    (query,) = [text for text in seen if text.lstrip().startswith("SELECT r.run_id")]
    conn = sqlite3.connect(log.db.path)
    try:
        plan = [row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {query}")]
    finally:
        conn.close()
    # The outer loop walks an index of runs: no scan of the table, no sort of the rows
    # that match (either would read every matching run to return fifty).
    outer = plan[0]
    assert outer.startswith((f"SEARCH r USING INDEX {index} ", f"SCAN r USING INDEX {index}")), plan
    if index not in ("runs_by_created", "runs_top_by_created"):
        assert outer.startswith("SEARCH"), plan  # the filter is the index's range
    assert not any("TEMP B-TREE" in step for step in plan), plan


async def test_pages_list_every_run_once(log: SqliteEventLog) -> None:
    # 2,000 runs, a fifth of them sub-runs, a third finished.
    for index in range(2000):
        parent = f"run_{index - 1:04d}" if index % 5 == 4 else None
        ended = [RunCompleted(output=None)] if index % 3 == 0 else []
        await log.append(f"run_{index:04d}", [_started("wide", parent), *ended])
    # Runs made within one clock tick share created_at (a coarse clock, a Postgres
    # statement time): groups of 10 here, so page boundaries of 64 fall inside groups.
    conn = sqlite3.connect(log.db.path)
    try:
        conn.execute("UPDATE runs SET created_at = 1000 + CAST(substr(run_id, 5) AS INTEGER) / 10")
        conn.commit()
    finally:
        conn.close()
    for filters, expected in (
        ({"top_level": True}, 1600),
        ({"status": RunStatus.COMPLETED}, 667),
        ({}, 2000),
    ):
        seen: list[str] = []
        before: tuple[float, str] | None = None
        while True:
            page = await log.list_runs(limit=64, before=before, **filters)
            seen += [row.run_id for row in page]
            if len(page) < 64:
                break
            before = (page[-1].created_at, page[-1].run_id)
        assert len(seen) == len(set(seen)) == expected, filters
        assert seen == [row.run_id for row in await log.list_runs(**filters)]


async def test_a_store_of_schema_7_gains_the_indexes_and_lists_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "CREATE TABLE lw_schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
    )
    # Exactly what version 7 wrote: the migrations as they stood then.
    for version, statements in enumerate(MIGRATIONS[:7], start=1):
        for statement in statements:
            conn.execute(statement)
        conn.execute("INSERT INTO lw_schema_migrations VALUES (?, 0)", (version,))
    conn.execute(
        "INSERT INTO runs VALUES ('run_old', 'completed', 'wide', NULL, 1.0), "
        "('run_kid', 'completed', 'wide', 'run_old', 2.0)"
    )
    conn.close()
    spec = parse_store_url(f"sqlite:///{path}")
    log = SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
    try:
        assert [row.run_id for row in await log.list_runs(top_level=True)] == ["run_old"]
        assert [row.run_id for row in await log.list_runs(parent_run_id="run_old")] == ["run_kid"]
    finally:
        await log.close()
    conn = sqlite3.connect(path)
    try:
        (version,) = conn.execute("SELECT MAX(version) FROM lw_schema_migrations").fetchone()
        indexes = {
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")
        }
    finally:
        conn.close()
    assert version == len(MIGRATIONS) >= 8
    assert {"runs_top_by_created", "runs_by_status", "runs_by_workflow"} <= indexes
    assert "runs_by_parent" not in indexes
