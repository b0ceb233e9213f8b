"""A sync step longer than the lease does not cost the run its lease (issue 17, point 2).

Two ``little-workflow worker`` processes on the real PostgreSQL server, leases of 1.5 s,
and a run of four sync steps that each block for 2.5 s. The step runs in a worker
thread, so the event loop goes on renewing the lease while it blocks: no other worker
claims the run, and each step is called exactly once (counted in a file outside the
processes). Inline on the loop, the lease lapsed in every step and the steps were called
again and again without ever committing.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime
from tests.workers.support import REPO, calls, wait_for, worker_command

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

FLOW = Path(__file__).with_name("blocking.yaml")
LEASE = 1.5


def _start_worker(
    store: str, data_dir: Path, worker_id: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        # Two threads for sync code: one is enough for the run's one step at a time.
        [*worker_command(store, data_dir, worker_id, concurrency=2, lease=LEASE), "--threads", "2"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_the_worker_refuses_a_thread_count_below_one(tmp_path: Path) -> None:
    command = worker_command("memory:", tmp_path / "w", "w_none", concurrency=1, lease=LEASE)
    done = subprocess.run(
        [*command, "--threads", "0"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 2, done.stderr
    assert "Invalid value for '--threads'" in done.stderr


async def test_sync_steps_longer_than_the_lease_run_once_each(
    postgres_url: str, tmp_path: Path
) -> None:
    counted = tmp_path / "calls.txt"
    env = {**os.environ, "LW_TEST_CALLS": str(counted), "PYTHONPATH": str(REPO)}
    async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
        workers = {
            name: _start_worker(postgres_url, tmp_path / name, name, env)
            for name in ("w_one", "w_two")
        }
        try:

            async def registered() -> bool:
                found = {info.worker_id for info in await runtime.queue.workers()}
                return found >= set(workers)

            await wait_for(registered, 60)
            await runtime.submit(FLOW, None, run_id="run_blocking")

            async def done() -> bool:
                entry = await runtime.queue.get("run_blocking")
                return entry is not None and entry.state == "done"

            # 10 s of steps; inline on the loop this never ended.
            await wait_for(done, 120)
        finally:
            for process in workers.values():
                process.send_signal(signal.SIGTERM)
        reports = {
            name: process.communicate(timeout=30)[1].decode() for name, process in workers.items()
        }
        for name, process in workers.items():
            assert process.returncode == 0, reports[name]
        state = await runtime.get_state("run_blocking")
        completed = [
            record.event.step_path
            for record in await runtime.events.read("run_blocking")
            if isinstance(record.event, StepCompleted)
        ]
    assert state.output == ["a", "b", "c", "d"]
    assert completed == ["a", "b", "c", "d"]
    assert calls(counted) == {f"run_blocking/{step}": 1 for step in "abcd"}
    # Neither worker lost a lease: the one that claimed the run kept it throughout.
    for report in reports.values():
        found = re.search(r"(\d+) lease\(s\) lost", report)
        assert found is not None, report
        assert found.group(1) == "0", report
