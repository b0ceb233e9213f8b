"""Code-first runs on two ``little-workflow worker`` processes over the real PostgreSQL
server, one SIGKILLed while it drives runs: the other takes them over when their leases
lapse, imports the workflow by its qualified name, and every run completes once, every
step is committed once, and every payment reaches the far end exactly once."""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
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


_ELSEWHERE = """
from little_workflow import WorkflowContext, step, workflow


@step
def double(value: int) -> int:
    return value * 2


@workflow
async def only_here(ctx: WorkflowContext, value: int) -> int:
    return await ctx.step(double, value) + 1
"""


def _spawn(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A worker process whose log (stderr) goes to ``log``."""
    with log.open("wb") as stderr:
        return subprocess.Popen(command, cwd=REPO, env=env, stderr=stderr)


async def test_a_worker_that_cannot_import_the_workflow_gives_the_run_back(
    postgres_url: str, tmp_path: Path
) -> None:
    # The module is on one worker's PYTHONPATH only (and the submitter's sys.path).
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "only_here_flows.py").write_text(_ELSEWHERE, encoding="utf-8")
    sys.path.insert(0, str(elsewhere))
    try:
        from only_here_flows import only_here  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(elsewhere))
    # A lease far longer than the test may take: the run reaches the able worker only if
    # the unable one gives it back, not by letting its lease lapse.
    lease = "600"
    base = {**os.environ, "PYTHONPATH": str(REPO)}
    commands = {
        name: [*worker_command(postgres_url, tmp_path / name, name, concurrency=2, lease=1)]
        for name in ("w_without", "w_with")
    }
    for command in commands.values():
        command[command.index("--lease-seconds") + 1] = lease
    logs = {name: tmp_path / f"{name}.log" for name in commands}
    processes: dict[str, subprocess.Popen[bytes]] = {}
    async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
        await runtime.submit(only_here, {"value": 20}, run_id="run_elsewhere")
        submitted = len(await runtime.events.read("run_elsewhere"))
        try:
            processes["w_without"] = _spawn(commands["w_without"], base, logs["w_without"])

            async def given_back() -> bool:
                return "run_elsewhere released" in logs["w_without"].read_text()

            await wait_for(given_back, 60)
            # Nothing written to the run; it is still waiting for a worker.
            assert len(await runtime.events.read("run_elsewhere")) == submitted
            entry = await runtime.queue.get("run_elsewhere")
            assert entry is not None
            assert entry.state != "done"
            env = {**base, "PYTHONPATH": os.pathsep.join([str(REPO), str(elsewhere)])}
            processes["w_with"] = _spawn(commands["w_with"], env, logs["w_with"])

            async def done() -> bool:
                entry = await runtime.queue.get("run_elsewhere")
                return entry is not None and entry.state == "done"

            await wait_for(done, 120)
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes.values():
                process.wait(timeout=30)
        state = await runtime.get_state("run_elsewhere")
        assert state.output == 41
    assert [process.returncode for process in processes.values()] == [0, 0]
    lines = [line for line in logs["w_without"].read_text().splitlines() if "run_elsewhere" in line]
    # One line, naming the typed error: no traceback, not repeated at each re-claim.
    assert len(lines) == 1, lines
    assert "workflow_not_importable" in lines[0]
    assert "cannot import workflow 'only_here_flows:only_here'" in lines[0]
