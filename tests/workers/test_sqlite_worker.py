"""Workers on the embedded SQLite store, with no server: sub-runs, and a killed worker's runs."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime, Worker
from tests.workers.support import FLOW, REPO, until
from tests.workers.support import calls as calls_of

pytestmark = pytest.mark.timeout(180)


async def test_a_lone_worker_drives_the_sub_runs_it_queued_on_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    spread = Path(__file__).with_name("spread.yaml")
    async with Runtime(tmp_path / "data") as host:
        await host.submit(spread, {"items": [1, 2, 3, 4]}, run_id="run_spread")
        worker = Worker(host, concurrency=1, lease_seconds=10, poll_interval=0.02)
        report = await asyncio.wait_for(worker.run(max_runs=1), 60)
        assert report.finished == {"completed": 1}
        state = await host.get_state("run_spread")
        assert state.output == [1, 4, 9, 16]
        children = [record.sub_run_id for record in state.steps.values() if record.sub_run_id]
        assert len(children) == 4
        for child in children:
            assert child is not None
            entry = await host.queue.get(child)
            assert entry is not None
            assert (entry.state, entry.outcome) == ("done", "completed")
    assert sum(calls_of(calls).values()) == 4


def _start_worker(
    data_dir: Path, name: str, env: dict[str, str], *args: str
) -> subprocess.Popen[bytes]:
    # The default store: the data directory's SQLite file. Leases of 600 s: within this
    # test only the death of its holder can hand a run over.
    command = [
        sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), "worker",
        "--worker-id", name, "--concurrency", "1", "--lease-seconds", "600",
        "--poll-interval", "0.05", *args,
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


async def test_a_killed_workers_run_is_taken_over_at_once_not_when_its_lease_ends(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_STEP_SECONDS": "0.2",
        "PYTHONPATH": str(REPO),
    }
    data_dir = tmp_path / "data"
    items = list(range(16))
    async with Runtime(data_dir) as runtime:
        await runtime.submit(FLOW, {"items": items}, run_id="run_big")
        first = _start_worker(data_dir, "w_killed", env)
        try:
            await until(calls.exists, timeout=60)
        finally:
            first.send_signal(signal.SIGKILL)
            first.communicate()
        entry = await runtime.queue.get("run_big")
        assert entry is not None
        assert (entry.state, entry.worker_id) == ("leased", "w_killed")
        before = collections.Counter(
            record.event.step_path
            for record in await runtime.events.read("run_big")
            if isinstance(record.event, StepCompleted)
        )
        second = _start_worker(data_dir, "w_next", env, "--max-runs", "1")
        try:
            _, err = second.communicate(timeout=120)
        finally:
            second.kill()  # if it is still there: it never took the run over
            second.communicate()
        assert second.returncode == 0, err
        assert b"1 completed" in err
        state = await runtime.get_state("run_big")
        assert state.output == sum(item * item for item in items)
        entry = await runtime.queue.get("run_big")
        assert entry is not None
        assert (entry.state, entry.outcome, entry.worker_id) == ("done", "completed", "w_next")
        assert entry.attempts == 2
        committed = collections.Counter(
            record.event.step_path
            for record in await runtime.events.read("run_big")
            if isinstance(record.event, StepCompleted)
        )
        assert set(committed.values()) == {1}
    counted = calls_of(calls)
    for path in before:  # committed before the kill: never called again
        if f"run_big/{path}" in counted:
            assert counted[f"run_big/{path}"] == 1
    assert sum(counted.values()) - (len(items) + 1) <= 4  # only the in-flight branches again
