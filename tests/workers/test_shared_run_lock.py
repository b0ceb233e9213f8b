"""Run locks that every machine sharing a PostgreSQL store sees (no worker involved).

Each "host" is a Runtime (or a CLI process) with a data directory of its own, so no file
lock is shared: only the store's advisory lock keeps two of them off one run.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.errors import LockTimeoutError
from little_workflow.events import RunCancelled, RunStatus
from little_workflow.runtime import Runtime
from tests.workers.support import FLOW, REPO, until
from tests.workers.support import calls as calls_of

pytestmark = pytest.mark.postgres


def _called(calls: Path) -> bool:
    return bool(calls_of(calls))


async def test_a_run_driven_on_one_host_keeps_another_host_waiting(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.1")
    async with (
        Runtime(tmp_path / "a", store=postgres_url) as host_a,
        Runtime(tmp_path / "b", store=postgres_url, lock_timeout=0.3) as host_b,
    ):
        # 40 branches of 0.1 s, four at a time: about a second, well past B's 0.3 s wait.
        task = asyncio.create_task(host_a.run(FLOW, {"items": list(range(40))}, run_id="run_x"))
        await until(lambda: _called(calls))
        with pytest.raises(LockTimeoutError, match="server pid"):
            await host_b.resume("run_x")
        result = await task
        # Once host A let go, host B may look: the run is complete, nothing runs again.
        again = await host_b.resume("run_x")
        assert again.output == result.output == sum(i * i for i in range(40))
        assert again.executed_steps == 0
    assert len(calls.read_text().splitlines()) == 41


async def test_a_killed_holder_frees_the_run_at_once(postgres_url: str, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_STEP_SECONDS": "0.2",
        "PYTHONPATH": str(REPO),
    }
    command = [
        sys.executable, "-m", "little_workflow", "--data-dir", str(tmp_path / "a"),
        "--store", postgres_url, "run", str(FLOW), "--input", '{"items": [1, 2, 3, 4, 5, 6]}',
        "--run-id", "run_k",
    ]  # fmt: skip
    process = subprocess.Popen(  # noqa: ASYNC220 - a child to kill, not one to wait for
        command, cwd=REPO, env=env, stderr=subprocess.DEVNULL
    )
    try:
        await until(lambda: _called(calls))
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    # The server ended the dead session's lock with it: a lock still held would make this
    # resume a LockTimeoutError.
    async with Runtime(tmp_path / "b", store=postgres_url, lock_timeout=5) as host_b:
        result = await host_b.resume("run_k")
        assert result.output == sum(i * i for i in range(1, 7))


async def test_cancel_from_another_host_is_left_to_the_host_driving_the_run(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.2")
    async with (
        Runtime(tmp_path / "a", store=postgres_url) as host_a,
        Runtime(tmp_path / "b", store=postgres_url) as host_b,
    ):
        task = asyncio.create_task(host_a.run(FLOW, {"items": list(range(40))}, run_id="run_c"))
        await until(lambda: _called(calls))
        outcome = await host_b.cancel("run_c", wait=10)
        assert outcome.status is RunStatus.CANCELLED
        assert outcome.recorded_by_owner
        with pytest.raises(Exception, match="cancelled"):
            await task
        events = [record.event for record in await host_b.events.read("run_c")]
        assert sum(isinstance(event, RunCancelled) for event in events) == 1
    assert json.dumps(outcome.run_id) == '"run_c"'


async def test_many_runs_at_once_share_one_connection_for_their_locks(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.05")
    async with Runtime(tmp_path / "a", store=postgres_url, lock_timeout=20) as host:
        # Twice as many runs at once as the pool has connections (8): with a connection
        # per lock, the locks alone would take the pool and the appends would wait on it.
        results = await asyncio.wait_for(
            asyncio.gather(
                *(host.run(FLOW, {"items": [i, i + 1]}, run_id=f"run_{i:02d}") for i in range(16))
            ),
            60,
        )
    assert [result.output for result in results] == [i * i + (i + 1) ** 2 for i in range(16)]
