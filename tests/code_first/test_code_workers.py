"""Code-first runs on two ``little-workflow worker`` processes over the real PostgreSQL
server, one SIGKILLed while it drives runs: the other takes them over when their leases
lapse, imports the workflow by its qualified name, and every run completes once, every
step is committed once, and every payment reaches the far end exactly once."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
from pathlib import Path

import pytest

from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime
from tests.code_first.flows import fan_pay
from tests.workers.support import REPO, held_by, wait_for, worker_command

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

LEASE = 1.5


def _start_worker(
    store: str, data_dir: Path, worker_id: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        worker_command(store, data_dir, worker_id, concurrency=3, lease=LEASE),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_code_first_runs_survive_a_killed_worker(postgres_url: str, tmp_path: Path) -> None:
    calls, ledger = tmp_path / "calls", tmp_path / "ledger"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_LEDGER": str(ledger),
        "LW_TEST_STEP_SECONDS": "0.1",
        "PYTHONPATH": str(REPO),
    }
    inputs = {f"run_{index:02d}": [index, index + 1, index + 2] for index in range(30)}
    async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
        for run_id, items in inputs.items():
            await runtime.submit(fan_pay, {"items": items}, run_id=run_id)
        workers = {
            name: _start_worker(postgres_url, tmp_path / name, name, env)
            for name in ("w_killed", "w_steady")
        }
        try:

            async def holding() -> bool:
                return len(await held_by(runtime, "w_killed")) > 0 and calls.exists()

            await wait_for(holding, 60)
            killed_runs = await held_by(runtime, "w_killed")
            workers["w_killed"].send_signal(signal.SIGKILL)

            async def all_done() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in inputs]
                return all(entry is not None and entry.state == "done" for entry in entries)

            await wait_for(all_done, 150)
        finally:
            for process in workers.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
        outputs = {name: process.communicate(timeout=30) for name, process in workers.items()}
        assert workers["w_killed"].returncode == -signal.SIGKILL
        assert workers["w_steady"].returncode == 0, outputs["w_steady"][1].decode()
        assert killed_runs
        for run_id, items in inputs.items():
            state = await runtime.get_state(run_id)
            assert state.output == sum(item * item for item in items), run_id
            completed = [
                record.event.step_path
                for record in await runtime.events.read(run_id)
                if isinstance(record.event, StepCompleted)
            ]
            # Three branches, the map, the sum and the payment: once each.
            assert len(completed) == len(set(completed)) == 6, run_id
    paid = collections.Counter(
        " ".join(line.split()[:2]) for line in ledger.read_text().splitlines()
    )
    assert set(paid) == {f"pay {run_id}/pay" for run_id in inputs}
    assert set(paid.values()) == {1}
    counted = collections.Counter(calls.read_text().splitlines())
    # Only steps in flight on the killed worker ran twice.
    twice = [call for call, times in counted.items() if times > 1]
    assert all(counted[call] == 2 for call in twice)
    assert all(call.split()[0] in killed_runs for call in twice), twice
    print(f"the killed worker held {len(killed_runs)} run(s); {len(twice)} call(s) ran twice")
