"""Workers recover runs whose process died: real ``little-workflow`` processes, real SIGKILL.

Twenty runs are started by ``little-workflow run`` processes, each SIGKILLed at a random
moment while its steps are in flight (a map of twelve slow squares, four at a time, then
a sum; every call counted in a file outside the processes). Then ``worker`` processes
started afterwards must complete every run: each step committed once (one
``StepCompleted`` per step path), only the steps in flight at a kill called twice, the
outputs right, and each run resumed by exactly one worker (one ``RunResumed`` with reason
``recover``, naming a worker's pid). On the SQLite default with no server, and on
PostgreSQL, where the worker has a data directory of its own (another machine: only the
store's advisory lock tells that the ``run`` process is gone).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.events import RunResumed, StepCompleted
from little_workflow.runtime import Runtime
from little_workflow.runtime._recovery import recovery_failures
from tests.workers.support import FLOW, REPO, calls

pytestmark = pytest.mark.timeout(300)

RUNS = 20
ITEMS = 12  # three waves of the map's four branches: a kill finds steps in flight
STEP_SECONDS = 0.3
#: ``run`` processes started at once (the machine has 2 cores).
AT_ONCE = 5


def _items(index: int) -> list[int]:
    return list(range(index, index + ITEMS))


def _cli(data_dir: Path, store: str | None, *args: str) -> list[str]:
    prefix = [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir)]
    return prefix + ([] if store is None else ["--store", store]) + list(args)


def _cli_run(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run one command on the data directory's SQLite store to its end."""
    return subprocess.run(
        _cli(data_dir, None, *args),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LW_TEST_CALLS": str(tmp_path / "calls.txt"),
        "LW_TEST_STEP_SECONDS": str(STEP_SECONDS),
        "PYTHONPATH": str(REPO),
    }


async def _start_and_kill(
    tmp_path: Path, data_dir: Path, store: str | None, rng: random.Random
) -> dict[str, list[int]]:
    """Start the runs with ``run`` and SIGKILL each once its steps are in flight."""
    env = _env(tmp_path)
    counted = tmp_path / "calls.txt"
    inputs = {f"run_{index:02d}": _items(index) for index in range(RUNS)}

    async def one(run_id: str, items: list[int]) -> None:
        process = await asyncio.create_subprocess_exec(
            *_cli(data_dir, store, "run", str(FLOW), "--run-id", run_id),
            "--input",
            json.dumps({"items": items}),
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        # In flight: its first square has been called; the next waves are still to come.
        while f"{run_id}/" not in (counted.read_text() if counted.exists() else ""):
            assert process.returncode is None, f"{run_id} ended before it was killed"
            await asyncio.sleep(0.02)
        await asyncio.sleep(rng.uniform(0, STEP_SECONDS))
        process.send_signal(signal.SIGKILL)
        assert await process.wait() == -signal.SIGKILL

    names = list(inputs)
    for start in range(0, RUNS, AT_ONCE):
        await asyncio.gather(*(one(run_id, inputs[run_id]) for run_id in names[start:][:AT_ONCE]))
    return inputs


async def _committed_steps(runtime: Runtime, run_id: str) -> collections.Counter[str]:
    return collections.Counter(
        record.event.step_path
        for record in await runtime.events.read(run_id)
        if isinstance(record.event, StepCompleted)
    )


def _worker(
    data_dir: Path, store: str | None, env: dict[str, str], *args: str
) -> subprocess.Popen[str]:
    command = _cli(data_dir, store, "worker", "--poll-interval", "0.05", "--recover-every", "0.2")
    return subprocess.Popen(
        command + list(args),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(worker: subprocess.Popen[str], timeout: float) -> str:
    """Wait for ``worker`` to exit; its stderr. Killed if it does not (nothing left over)."""
    try:
        return worker.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise


async def _check_recovered(
    runtime: Runtime,
    inputs: dict[str, list[int]],
    before: dict[str, collections.Counter[str]],
    counted: collections.Counter[str],
    worker_pids: set[int],
) -> None:
    """Every run completed once, by one worker, each step committed once."""
    for run_id, items in inputs.items():
        state = await runtime.get_state(run_id)
        assert state.status.value == "completed", (run_id, state.failure_message)
        assert state.output == sum(item * item for item in items)
        committed = await _committed_steps(runtime, run_id)
        assert set(committed.values()) == {1}, (run_id, committed)
        resumed = [
            record.event
            for record in await runtime.events.read(run_id)
            if isinstance(record.event, RunResumed)
        ]
        assert len(resumed) == 1, (run_id, resumed)
        assert resumed[0].reason == "recover"
        assert resumed[0].pid in worker_pids
        called = {
            path.removeprefix(f"{run_id}/"): count
            for path, count in counted.items()
            if path.startswith(f"{run_id}/")
        }
        # Every step function ran; one already committed at the kill ran once; only a
        # step in flight at the kill (at most the map's four branches) ran twice.
        assert set(called) <= set(committed)
        assert len(called) == ITEMS + 1
        for path, count in called.items():
            if path in before[run_id]:
                assert count == 1, (run_id, path)
            else:
                assert count in (1, 2), (run_id, path, count)
        assert sum(count - 1 for count in called.values()) <= 4


async def _interrupted_fleet(
    tmp_path: Path, data_dir: Path, store: str | None
) -> tuple[dict[str, list[int]], dict[str, collections.Counter[str]]]:
    seed = random.randrange(1 << 30)
    print(f"kill moments seeded with {seed}")
    inputs = await _start_and_kill(tmp_path, data_dir, store, random.Random(seed))
    async with Runtime(data_dir, store=store) as runtime:
        unfinished = await runtime.events.list_runs(status=None)
        interrupted = await runtime.interrupted_runs(unfinished)
        assert sorted(interrupted) == sorted(inputs)  # every one killed before its end
        before = {run_id: await _committed_steps(runtime, run_id) for run_id in inputs}
    return inputs, before


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """``None``: the data directory's SQLite file, no server at all."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


async def test_one_worker_started_afterwards_completes_twenty_killed_runs(
    tmp_path: Path, store: str | None
) -> None:
    data_dir = tmp_path / "data"
    inputs, before = await _interrupted_fleet(tmp_path, data_dir, store)
    # On PostgreSQL the worker is "another machine": a data directory of its own.
    worker_dir = data_dir if store is None else tmp_path / "worker"
    worker = _worker(worker_dir, store, _env(tmp_path), "--max-runs", str(RUNS))
    err = _finish(worker, 240)
    assert worker.returncode == 0, err
    assert f"{RUNS} completed; {RUNS} recovered, 0 failed to recover" in err
    async with Runtime(data_dir, store=store) as runtime:
        await _check_recovered(runtime, inputs, before, calls(tmp_path / "calls.txt"), {worker.pid})
        assert await runtime.stuck_runs() == []


async def test_two_workers_started_together_recover_each_run_once(
    tmp_path: Path, store: str | None
) -> None:
    data_dir = tmp_path / "data"
    inputs, before = await _interrupted_fleet(tmp_path, data_dir, store)
    env = _env(tmp_path)
    # On PostgreSQL each worker is a machine of its own: only the store is shared.
    workers = [
        _worker(data_dir if store is None else tmp_path / f"w{index}", store, env)
        for index in range(2)
    ]
    try:
        async with Runtime(data_dir, store=store) as runtime:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 240
            while True:
                states = [await runtime.get_state(run_id) for run_id in inputs]
                if all(state.finished for state in states):
                    break
                assert loop.time() < deadline, "timed out"
                assert all(worker.poll() is None for worker in workers)
                await asyncio.sleep(0.1)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        errors = [_finish(worker, 60) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], errors
    recovered = []
    for err in errors:
        assert "gave up after waiting" not in err  # no lock timeout
        report = re.search(r"(\d+) recovered, 0 failed to recover; .* 0 error\(s\)", err)
        assert report is not None, err
        recovered.append(int(report.group(1)))
    assert sum(recovered) == RUNS
    async with Runtime(data_dir, store=store) as runtime:
        await _check_recovered(
            runtime,
            inputs,
            before,
            calls(tmp_path / "calls.txt"),
            {worker.pid for worker in workers},
        )


async def test_a_run_submitted_on_sqlite_is_driven_by_a_worker(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = _env(tmp_path)
    submitted = _cli_run(
        data_dir, env, "submit", str(FLOW), "--input", json.dumps({"items": [1, 2, 3]})
    )
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    worker = _worker(data_dir, None, env, "--max-runs", "1")
    err = _finish(worker, 120)
    assert worker.returncode == 0, err
    assert "1 completed; 0 recovered" in err
    waited = _cli_run(data_dir, env, "wait", run_id, "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout) == 14
    assert calls(tmp_path / "calls.txt") == collections.Counter(
        [f"{run_id}/{path}" for path in ("fan[0].sq", "fan[1].sq", "fan[2].sq", "sum")]
    )


GONE_FLOW = """\
lwir: 1
name: gone
steps:
  # A first step committed: the run is not taken for a submit still being written.
  - {id: first, kind: execute, fn: "tests.workers.flows:total", with: {values: [1]}}
  - {id: wait, kind: execute, fn: "gone_steps:wait"}
  - {id: out, kind: output, value: "${steps.wait.output}"}
"""


async def test_a_run_that_cannot_be_resumed_is_retried_after_a_growing_backoff(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    code = tmp_path / "code"
    code.mkdir()
    module = code / "gone_steps.py"
    module.write_text(
        "import os, time\n"
        "def wait(ctx):\n"
        "    open(os.environ['LW_TEST_STARTED'], 'w').close()\n"
        "    time.sleep(600)\n"
    )
    flow = tmp_path / "gone.yaml"
    flow.write_text(GONE_FLOW)
    started = tmp_path / "started"
    env = {**_env(tmp_path), "LW_TEST_STARTED": str(started)}
    runner = _spawn(
        _cli(data_dir, None, "run", str(flow), "--run-id", "run_gone"),
        {**env, "PYTHONPATH": f"{REPO}{os.pathsep}{code}"},
    )
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not started.exists():
            assert loop.time() < deadline
            assert runner.poll() is None
            await asyncio.sleep(0.02)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    module.unlink()  # the code changed: the step's function is gone
    worker = _worker(data_dir, None, env)  # without ``code`` on its path
    try:
        async with Runtime(data_dir) as runtime:
            deadline = loop.time() + 120
            while True:
                failure = (await recovery_failures(runtime)).get("run_gone")
                if failure is not None and failure.attempts >= 2:
                    break
                assert loop.time() < deadline, "timed out"
                await asyncio.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        err = _finish(worker, 60)
    assert worker.returncode == 0, err
    # One line per attempt, and looks every 0.2 s did not retry it: the first wait was
    # 2 s (twice max(0.2, 1) s), the second twice that.
    attempts = [line for line in err.splitlines() if "cannot recover run run_gone" in line]
    async with Runtime(data_dir) as runtime:
        failure = (await recovery_failures(runtime))["run_gone"]
        assert len(attempts) == failure.attempts in (2, 3)
        assert failure.retry_at - failure.failed_at == pytest.approx(2.0**failure.attempts)
        assert "next try in 2 s" in attempts[0]
        assert "next try in 4 s" in attempts[1]
        # Nothing was written to the run: it is as the kill left it.
        records = await runtime.events.read("run_gone")
        assert not any(isinstance(record.event, RunResumed) for record in records)
        (stuck,) = await runtime.stuck_runs()
        assert (stuck.run_id, stuck.reason) == ("run_gone", "recovery_failed")
        assert failure.code in stuck.detail
    listed = _cli_run(data_dir, env, "runs", "--stuck", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [(item["runId"], item["reason"]) for item in json.loads(listed.stdout)] == [
        ("run_gone", "recovery_failed")
    ]


SLEEPY_FLOW = """\
lwir: 1
name: sleepy
steps:
  # A first step committed: the run is not taken for a submit still being written.
  - {id: first, kind: execute, fn: "tests.workers.flows:total", with: {values: [1]}}
  - {id: wait, kind: execute, fn: "sleepy_steps:wait"}
  - {id: out, kind: output, value: "${steps.wait.output}"}
"""


async def test_with_recovery_off_a_worker_leaves_an_interrupted_run_alone(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    code = tmp_path / "code"
    code.mkdir()
    (code / "sleepy_steps.py").write_text(
        "import os, time\n"
        "def wait(ctx):\n"
        "    open(os.environ['LW_TEST_STARTED'], 'w').close()\n"
        "    time.sleep(600)\n"
    )
    flow = tmp_path / "sleepy.yaml"
    flow.write_text(SLEEPY_FLOW)
    started = tmp_path / "started"
    env = {
        **_env(tmp_path),
        "LW_TEST_STARTED": str(started),
        "PYTHONPATH": f"{REPO}{os.pathsep}{code}",
    }
    runner = _spawn(_cli(data_dir, None, "run", str(flow), "--run-id", "run_left"), env)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while not started.exists():
            assert loop.time() < deadline
            assert runner.poll() is None
            await asyncio.sleep(0.02)
    finally:
        runner.send_signal(signal.SIGKILL)
        runner.wait()
    submitted = _cli_run(data_dir, env, "submit", str(FLOW), "--input", '{"items": [2]}')
    assert submitted.returncode == 0, submitted.stderr
    # One slot: with recovery on, its first look (at start) would take the killed run.
    # (The later --recover-every wins over the helper's.)
    off = _worker(
        data_dir, None, env, "--recover-every", "0", "--concurrency", "1", "--max-runs", "1"
    )
    err = _finish(off, 120)
    assert off.returncode == 0, err
    assert "no recovery" in err
    assert "1 completed; 0 recovered" in err
    async with Runtime(data_dir) as runtime:
        assert (await runtime.get_state(submitted.stdout.strip())).output == 4
        records = await runtime.events.read("run_left")
        assert not any(isinstance(record.event, RunResumed) for record in records)
        (stuck,) = await runtime.stuck_runs()
        assert (stuck.run_id, stuck.reason) == ("run_left", "interrupted")


async def test_the_failure_record_of_a_run_that_ended_is_deleted_at_the_next_look(
    tmp_path: Path,
) -> None:
    from little_workflow.runtime._recovery import RECOVERY_PREFIX, Recovery, RecoveryFailure

    async with Runtime(tmp_path / "data") as runtime:
        flow = tmp_path / "one.yaml"
        flow.write_text("lwir: 1\nname: one\nsteps:\n  - {id: out, kind: output, value: 1}\n")
        result = await runtime.run(flow, None, run_id="run_ended")
        assert result.output == 1
        failure = RecoveryFailure(
            run_id="run_ended",
            attempts=3,
            code="config_error",
            message="a function was gone then",
            failed_at=1.0,
            retry_at=2.0,
            worker_id="w_old",
        )
        await runtime.kv.set(RECOVERY_PREFIX + "run_ended", failure.to_json())
        assert await recovery_failures(runtime) == {"run_ended": failure}
        recovery = Recovery(runtime, worker_id="w", interval=5)
        assert await recovery.candidates() == []
        assert await recovery_failures(runtime) == {}
        assert await runtime.kv.list(RECOVERY_PREFIX) == []
