"""Group commit (``RunWriter``): concurrent durable appends share transactions and fsyncs.

Each caller must return only once its own events are durable; a caller cancelled while
queued writes nothing; an error reaches only the caller whose events caused it; and a
process killed while branches are queued for a commit loses only what no commit held:
after a resume, no branch whose ``StepCompleted`` was committed runs again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from little_workflow.errors import PayloadTooLargeError
from little_workflow.events import Event, RunStarted, StepAttemptStarted, StepCompleted
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime
from little_workflow.runtime._state import RunState, fold
from little_workflow.runtime._writer import RunWriter
from little_workflow.storage import EventLog, open_event_log
from little_workflow.storage._sqlite import SqliteEventLog
from tests.storage.raw_sqlite import event_json

from .support import FLOWS, REPO, read_calls

RUN = "run_group"


class Recording:
    """An event log that counts commits, and can hold one back or refuse a poisoned batch."""

    def __init__(self, inner: EventLog) -> None:
        self.inner = inner
        self.commits: list[int] = []
        self.gate: asyncio.Event | None = None
        self.poison: str | None = None

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        if self.gate is not None:
            gate, self.gate = self.gate, None
            await gate.wait()
        if self.poison is not None and any(
            getattr(event, "step_path", None) == self.poison for event in events
        ):
            raise PayloadTooLargeError("poisoned", where=self.poison, size=2, limit=1)
        seqs = await self.inner.append(run_id, events, sync=sync, expected_seq=expected_seq)
        self.commits.append(len(events))
        return seqs

    async def last_seq(self, run_id: str) -> int:
        return await self.inner.last_seq(run_id)


def completed(path: str) -> StepCompleted:
    return StepCompleted(step_path=path, step_id=path, kind="execute", output=path)


def committed_paths(db: Path) -> set[str]:
    """Step paths whose ``StepCompleted`` another connection sees committed."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT data FROM events WHERE type = 'StepCompleted'").fetchall()
    finally:
        conn.close()
    return {event_json(data)["stepPath"] for (data,) in rows}


async def open_writer(tmp_path: Path) -> tuple[RunWriter, Recording, Path]:
    db = tmp_path / "events.db"
    log = Recording(await open_event_log(f"sqlite:///{db}"))
    writer = RunWriter(cast(EventLog, log), RunState(run_id=RUN))
    started = RunStarted(workflow_name="w", definition_hash="sha256:0", workflow_version_id="wv_0")
    await writer.append([started], sync=True)
    log.commits.clear()
    return writer, log, db


async def test_concurrent_durable_appends_share_commits_and_are_durable_on_return(
    tmp_path: Path,
) -> None:
    writer, log, db = await open_writer(tmp_path)
    writer.branches = 20
    seen: dict[str, set[str]] = {}

    async def branch(index: int) -> None:
        path = f"s{index}"
        await writer.append(
            [StepAttemptStarted(step_path=path, step_id=path, kind="execute")], sync=False
        )
        await writer.append([completed(path)], sync=True)
        # Durable on return: another connection sees the commit that holds it.
        seen[path] = committed_paths(db)

    await asyncio.gather(*(branch(index) for index in range(20)))
    assert len(log.commits) < 20
    assert sum(log.commits) == 40
    assert all(path in paths for path, paths in seen.items())
    # The folded state is the fold of the log.
    records = await log.inner.read(RUN)
    assert writer.state.last_seq == records[-1].seq == 41
    assert {p: r.status for p, r in writer.state.steps.items()} == {
        p: r.status for p, r in fold(RUN, records).steps.items()
    }
    await log.inner.close()


async def test_an_append_that_finds_a_commit_in_flight_goes_in_the_next_batch(
    tmp_path: Path,
) -> None:
    writer, log, db = await open_writer(tmp_path)
    writer.branches = 3
    gate = log.gate = asyncio.Event()
    first = asyncio.create_task(writer.append([completed("a")], sync=True))
    await asyncio.sleep(0)  # the caller queues and starts the leader
    await asyncio.sleep(0)  # the leader's commit is in flight, held at the gate
    assert log.gate is None
    second = asyncio.create_task(writer.append([completed("b")], sync=True))
    third = asyncio.create_task(writer.append([completed("c")], sync=True))
    await asyncio.sleep(0)
    third.cancel()  # cancelled while queued: nothing of it is written
    gate.set()
    await first
    await second
    with pytest.raises(asyncio.CancelledError):
        await third
    assert log.commits == [1, 1]
    assert committed_paths(db) == {"a", "b"}
    assert writer.state.completed("c") is None
    await log.inner.close()


async def test_a_failed_group_commit_fails_only_the_caller_that_caused_it(tmp_path: Path) -> None:
    writer, log, db = await open_writer(tmp_path)
    writer.branches = 5
    log.poison = "s2"

    async def branch(index: int) -> str:
        try:
            await writer.append([completed(f"s{index}")], sync=True)
        except PayloadTooLargeError:
            return "refused"
        return "durable"

    outcomes = await asyncio.gather(*(branch(index) for index in range(5)))
    assert outcomes == ["durable", "durable", "refused", "durable", "durable"]
    assert committed_paths(db) == {"s0", "s1", "s3", "s4"}
    assert set(writer.state.steps) == {"s0", "s1", "s3", "s4"}
    await log.inner.close()


def run_cli(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_sigkill_while_branches_wait_for_a_group_commit_loses_only_uncommitted_work(
    tmp_path: Path,
) -> None:
    data_dir, calls = tmp_path / "data", tmp_path / "calls"
    items = list(range(40))
    args = ("run", str(FLOWS / "group_map.yaml"), "--input", json.dumps({"items": items}))
    env: dict[str, Any] = {"LW_TEST_CALLS": str(calls), "LW_TEST_KILL_AT": "25"}
    killed = run_cli(data_dir, env, *args, "--run-id", "run_killed")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    durable = committed_paths(data_dir / "little-workflow.db")
    before = [path for _, path, _ in read_calls(calls)]
    # Batches landed before the kill (the branches nap 0-39 ms), and not all of them.
    assert 0 < len(durable) < len(items)
    assert len(before) == len(items)

    resumed = run_cli(data_dir, {"LW_TEST_CALLS": str(calls)}, "resume", "run_killed")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == [index * index for index in items]
    after = [path for _, path, _ in read_calls(calls)][len(before) :]
    assert not set(after) & durable
    assert set(after) == {f"fan[{index}].square" for index in items} - durable
    assert max(Counter(before + after).values()) <= 2


async def test_write_behind_events_reach_the_log_without_a_durable_append(
    tmp_path: Path,
) -> None:
    # One flush timer per run, not per step: a commit does not cancel it, so it may
    # fire with nothing held (and write nothing); an event held after that is still
    # flushed by the next timer.
    writer, log, _ = await open_writer(tmp_path)
    writer.flush_delay = 0.001
    fired = asyncio.Event()
    flush_soon = writer._flush_soon

    def spy() -> None:
        flush_soon()
        fired.set()

    writer._flush_soon = spy  # type: ignore[method-assign]
    first = StepAttemptStarted(step_path="a", step_id="a", kind="execute")
    await writer.append([first], sync=False)
    await writer.append([completed("a")], sync=True)
    assert log.commits == [2]
    await fired.wait()
    assert writer._flushing is None
    assert log.commits == [2]

    fired.clear()
    second = StepAttemptStarted(step_path="b", step_id="b", kind="execute")
    await writer.append([second], sync=False)
    await fired.wait()
    assert writer._flushing is not None
    await writer.drain()
    assert log.commits == [2, 1]
    records = await log.inner.read(RUN)
    assert [record.event for record in records[-3:]] == [first, completed("a"), second]
    assert writer.state.last_seq == records[-1].seq
    writer.discard()
    await log.inner.close()


async def _chain_step(index: int) -> int:
    return index


async def test_runs_driven_at_once_share_commits_across_runs(tmp_path: Path) -> None:
    # Across runs the grouping is the SQLite database's (``storage/_sqlite_db.py``): each
    # run's writer appends alone, and the appends of runs ready together share a commit.
    steps = [ExecuteStep(id=f"s{i}", fn="t:chain", with_={"index": i}) for i in range(10)]
    flow = Workflow(name="chain", steps=[*steps, OutputStep(id="out", value="${steps.s9.output}")])
    async with Runtime(tmp_path / "data", functions={"t:chain": _chain_step}) as runtime:
        log: object = runtime.events
        while not isinstance(log, SqliteEventLog):
            log = getattr(log, "inner")  # noqa: B009 - the wrappers have no common type
        statements: list[str] = []
        connections = [log.db._conn, log.db._waiting()]
        for conn in connections:
            assert conn is not None
            conn.set_trace_callback(statements.append)
        results = await asyncio.gather(
            *(runtime.run(flow, None, run_id=f"run_{n}") for n in range(6))
        )
        for conn in connections:
            assert conn is not None
            conn.set_trace_callback(None)
        assert [result.output for result in results] == [9] * 6
        appends = 0
        for n in range(6):
            records = await runtime.events.read(f"run_{n}")
            assert [r.seq for r in records] == list(range(1, len(records) + 1))
            assert len([r for r in records if r.type == "StepCompleted"]) == 10
            appends += 10
    commits = [s for s in statements if s.strip().upper() == "COMMIT"]
    # At least one durable append per step of every run; far fewer commits.
    assert len(commits) < appends / 2
