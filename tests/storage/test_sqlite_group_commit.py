"""SQLite group commit (``_sqlite_db.py``, "Grouped"): appends of runs ready at once.

Concurrent appends of many runs share transactions (COMMITs counted on both of the
database's connections) and sequential ones do not; an error in one append of a group
fails that append alone; a caller cancelled while queued writes nothing; processes
grouping their appends share one file; and a process SIGKILLed while grouping keeps every
append it acknowledged, whole and in order.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from little_workflow.errors import ConflictError, LeaseLostError, StorageError
from little_workflow.events import StepCompleted
from little_workflow.storage import open_event_log, parse_store_url
from little_workflow.storage._fence import Fence, fenced
from little_workflow.storage._sqlite import SqliteEventLog
from little_workflow.storage._sqlite_db import SqliteDatabase

REPO = Path(__file__).resolve().parents[2]


def _step(index: int) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id=f"s{index}", kind="execute", output=index)


async def _open(tmp_path: Path) -> SqliteEventLog:
    spec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite")
    return SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)


@contextmanager
def _commits(db: SqliteDatabase) -> Iterator[list[str]]:
    """COMMITs run on either connection (the loop's, the worker thread's) meanwhile."""
    statements: list[str] = []
    connections = [db._conn, db._waiting()]
    for conn in connections:
        assert conn is not None
        conn.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        for conn in connections:
            assert conn is not None
            conn.set_trace_callback(None)
    statements[:] = [s for s in statements if s.strip().upper() == "COMMIT"]


def _on_disk(tmp_path: Path, run_id: str) -> list[tuple[int, str]]:
    """(seq, data) of ``run_id`` as a fresh connection reads them: what was committed."""
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    try:
        return conn.execute(
            "SELECT seq, data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()


async def test_concurrent_appends_of_many_runs_share_commits(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    runs, appends = 12, 5

    async def appender(run_id: str) -> list[int]:
        seqs: list[int] = []
        for index in range(appends):
            await asyncio.sleep(0)  # the step's work, which yields as any I/O does
            seqs.extend(await log.append(run_id, [_step(index)], expected_seq=index))
        return seqs

    with _commits(log.db) as commits:
        results = await asyncio.gather(*(appender(f"run_{n}") for n in range(runs)))
    assert results == [list(range(1, appends + 1))] * runs
    assert len(commits) < runs * appends / 2
    for n in range(runs):
        assert [seq for seq, _ in _on_disk(tmp_path, f"run_{n}")] == list(range(1, appends + 1))
    await log.close()


async def test_commits_without_fsync_are_not_grouped(tmp_path: Path) -> None:
    spec = parse_store_url(f"sqlite:///{tmp_path}/db.sqlite?synchronous=NORMAL")
    log = SqliteEventLog(await SqliteDatabase.open(spec), owns_database=True)
    await log.append("run_x", [_step(0)])
    with _commits(log.db) as commits:
        await asyncio.gather(*(log.append(f"run_{n}", [_step(0)]) for n in range(6)))
    assert len(commits) == 6
    await log.close()


async def test_sequential_appends_commit_one_by_one(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    with _commits(log.db) as commits:
        for n in range(4):
            for index in range(3):
                await log.append(f"run_{n}", [_step(index)])
    assert len(commits) == 12
    await log.close()


async def test_a_conflict_in_a_group_fails_that_append_alone(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    for run_id in ("run_a", "run_b", "run_c"):
        await log.append(run_id, [_step(0)])
    with _commits(log.db) as commits:
        # run_a after run_c: another group, so these four are queued and go together.
        results = await asyncio.gather(
            log.append("run_a", [_step(1)], expected_seq=1),
            log.append("run_b", [_step(1)], expected_seq=7),
            log.append("run_c", [_step(1)], expected_seq=1),
            log.append("run_a", [_step(2)], expected_seq=2),
            return_exceptions=True,
        )
    assert len(commits) == 1
    assert results[0] == [2]
    assert isinstance(results[1], ConflictError)
    assert results[2] == [2]
    # Order within a run holds inside the group: its second append saw its first.
    assert results[3] == [3]
    assert [seq for seq, _ in _on_disk(tmp_path, "run_a")] == [1, 2, 3]
    assert [seq for seq, _ in _on_disk(tmp_path, "run_b")] == [1]
    assert [seq for seq, _ in _on_disk(tmp_path, "run_c")] == [1, 2]
    await log.close()


async def test_a_lost_lease_in_a_group_fails_that_append_alone(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    await log.append("run_x", [_step(0)])
    with _commits(log.db) as commits:
        first = asyncio.create_task(log.append("run_a", [_step(0)]))
        # A lease this process believes it holds, which the queue does not know.
        with fenced(Fence("run_f", 5)):
            stale = asyncio.create_task(log.append("run_f", [_step(0)]))
        last = asyncio.create_task(log.append("run_c", [_step(0)]))
        results = await asyncio.gather(first, stale, last, return_exceptions=True)
    assert len(commits) == 1
    assert results[0] == [1]
    assert isinstance(results[1], LeaseLostError)
    assert results[2] == [1]
    assert _on_disk(tmp_path, "run_f") == []
    assert [seq for seq, _ in _on_disk(tmp_path, "run_a")] == [1]
    assert [seq for seq, _ in _on_disk(tmp_path, "run_c")] == [1]
    await log.close()


async def test_a_failing_write_in_a_group_is_rolled_back_alone(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    db = log.db
    await log.append("run_a", [_step(0)])

    def bad(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO kv (key, value) VALUES ('half', 'written')")
        conn.execute("INSERT INTO kv (key, value) VALUES ('k', NULL)")  # NOT NULL

    with _commits(db) as commits:
        results = await asyncio.gather(
            log.append("run_b", [_step(0)]),
            db.write(bad),
            log.append("run_a", [_step(1)]),
            return_exceptions=True,
        )
    assert len(commits) == 1
    assert results[0] == [1]
    assert isinstance(results[1], StorageError)
    assert "NOT NULL" in str(results[1])
    assert results[2] == [2]
    conn = sqlite3.connect(tmp_path / "db.sqlite")
    try:
        assert conn.execute("SELECT COUNT(*) FROM kv").fetchone() == (0,)
    finally:
        conn.close()
    await log.close()


async def test_a_caller_cancelled_while_queued_writes_nothing(tmp_path: Path) -> None:
    log = await _open(tmp_path)
    await log.append("run_a", [_step(0)])
    first = asyncio.create_task(log.append("run_b", [_step(0)]))
    second = asyncio.create_task(log.append("run_c", [_step(0)]))
    # Both run to their queued write; the leader that takes the batch runs after this.
    await asyncio.sleep(0)
    assert log.db._queue
    second.cancel()
    assert await first == [1]
    with pytest.raises(asyncio.CancelledError):
        await second
    assert _on_disk(tmp_path, "run_c") == []
    assert await log.last_seq("run_c") == 0
    assert await log.append("run_c", [_step(0)]) == [1]
    await log.close()


def _spawn(url: str, prefix: str, runs: int, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.storage.group_appender", url, prefix, str(runs), str(count)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_processes_grouping_their_appends_share_one_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db.sqlite"
    children = [_spawn(url, name, 6, 40) for name in ("p", "q")]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    for (out, _), name in zip(outputs, ("p", "q"), strict=True):
        assert any(line.startswith("batch ") and line != "batch 1" for line in out.splitlines())
        for n in range(6):
            assert [seq for seq, _ in _on_disk(tmp_path, f"{name}-{n}")] == list(range(1, 41))


async def test_sigkill_while_grouping_keeps_every_acknowledged_append(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/db.sqlite"
    child = _spawn(url, "k", 8, 5_000)
    assert child.stdout is not None
    assert child.stderr is not None
    acked: dict[str, int] = {}
    grouped = 0
    loop = asyncio.get_running_loop()
    while sum(acked.values()) < 400 or grouped < 5:
        line = await loop.run_in_executor(None, child.stdout.readline)
        assert line, f"the appender died before it was killed: {child.stderr.read()}"
        kind, *rest = line.split()
        if kind == "batch":
            grouped += int(rest[0]) > 1
        else:
            run_id, seq, index = rest
            assert int(seq) == int(index) + 1
            acked[run_id] = int(seq)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    assert child.returncode == -signal.SIGKILL
    child.stdout.close()
    child.stderr.close()

    reopened = await open_event_log(url)
    try:
        for n in range(8):
            run_id = f"k-{n}"
            # Read through the log: every checksum verified, every row whole.
            records = await reopened.read(run_id)
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            assert len(records) >= acked.get(run_id, 0)
            for record in records:
                assert isinstance(record.event, StepCompleted)
                assert record.event.output == {
                    "run": run_id,
                    "i": record.seq - 1,
                    "pad": "p" * 300,
                }
            # The run goes on from where the log says it is.
            assert await reopened.append(run_id, [_step(0)], expected_seq=len(records)) == [
                len(records) + 1
            ]
    finally:
        await reopened.close()
