"""Waits across real processes: ``run`` exits while its run waits, ``send`` comes from
another process at a random moment, workers are SIGKILLed, on SQLite and on PostgreSQL.

Every step call is counted in a file outside the processes (``flows._count``); the checks
read the log: the wait and the event are in it, the event was taken once, no committed
step ran again, and recorded times (not durations) show a timer was kept.
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import random
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from little_workflow.events import EventReceived, StepCompleted, WaitCompleted, WaitStarted
from little_workflow.runtime import Runtime

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]

HERE = Path(__file__).parent
REPO = HERE.parents[1]
STEP_SECONDS = 1.0


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """``None``: the data directory's SQLite file, no server at all."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LW_TEST_CALLS": str(tmp_path / "calls.txt"),
        "LW_TEST_STEP_SECONDS": str(STEP_SECONDS),
        "PYTHONPATH": str(REPO),
    }


def _cli(data_dir: Path, store: str | None, *args: str) -> list[str]:
    prefix = [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir)]
    return prefix + ([] if store is None else ["--store", store]) + list(args)


def _calls(tmp_path: Path) -> collections.Counter[str]:
    path = tmp_path / "calls.txt"
    return collections.Counter(path.read_text().splitlines() if path.exists() else [])


def _worker(data_dir: Path, store: str | None, env: dict[str, str]) -> subprocess.Popen[str]:
    command = _cli(
        data_dir, store, "worker", "--poll-interval", "0.05", "--recover-every", "0.2",
        "--lease-seconds", "2",
    )  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _stop(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


def _kill(worker: subprocess.Popen[str]) -> None:
    worker.send_signal(signal.SIGKILL)
    worker.communicate()
    assert worker.returncode == -signal.SIGKILL


async def _until(condition: object, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        value = condition() if callable(condition) else condition
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def _finished(data_dir: Path, store: str | None, run_id: str) -> bool:
    async with Runtime(data_dir, store=store) as rt:
        return (await rt.get_state(run_id)).finished


def _cli_run(
    data_dir: Path, store: str | None, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    """Run one command to its end (in a thread: the test's loop goes on)."""
    return subprocess.run(
        _cli(data_dir, store, *args),
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def _run(
    data_dir: Path, store: str | None, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(_cli_run, data_dir, store, env, *args)


@pytest.mark.parametrize("moment", ["before_the_wait", "while_waiting", "after_a_worker_kill"])
async def test_an_approval_sent_at_a_random_moment_is_delivered_once(
    tmp_path: Path, store: str | None, moment: str
) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"{moment}: seeded with {seed}")
    rng.seed(seed)
    env = _env(tmp_path)
    data_dir = tmp_path / "data"
    # On PostgreSQL a worker is "another machine": a data directory of its own.
    worker_dir = data_dir if store is None else tmp_path / "worker"
    run_id = "approve_1"
    flow = str(HERE / "approve.yaml")
    args = ("approval", "--data", '{"ok": true}', "--key", "k1")
    workers: list[subprocess.Popen[str]] = []
    try:
        if moment == "before_the_wait":
            # A long first step: the send (a process of its own, which takes a while to
            # start) lands while the run is driven, before it reaches the wait.
            env = {**env, "LW_TEST_STEP_SECONDS": "5"}
            process = await asyncio.create_subprocess_exec(
                *_cli(data_dir, store, "run", flow, "--run-id", run_id, "--input", '{"n": 5}'),
                cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            await _until(lambda: _calls(tmp_path)[f"{run_id}/prepare"] == 1)
            await asyncio.sleep(rng.uniform(0, 2))  # prepare still runs
            sent = await _run(data_dir, store, env, "send", run_id, *args)
            assert sent.returncode == 0, sent.stderr
            assert "kept" in sent.stderr  # in the mailbox: the process drives the run
            out, err = await process.communicate()
            # The process took the event at the wait and ran on to the end.
            assert process.returncode == 0, err.decode()
            assert json.loads(out) == {"n": 10, "answer": {"ok": True}}
        elif moment == "while_waiting":
            ran = await _run(
                data_dir, store, env, "run", flow, "--run-id", run_id, "--input", '{"n": 5}'
            )
            assert ran.returncode == 7, ran.stderr  # it waits; the process is gone
            assert f"send {run_id} approval --data JSON" in ran.stderr
            assert ran.stdout == ""
            await asyncio.sleep(rng.uniform(0, 0.5))
            sent = await _run(data_dir, store, env, "send", run_id, *args)
            assert sent.returncode == 0, sent.stderr
            assert "delivered" in sent.stderr
            workers.append(_worker(worker_dir, store, env))
            await _until(lambda: _finished(data_dir, store, run_id))
        else:
            submitted = await _run(
                data_dir, store, env, "submit", flow, "--run-id", run_id, "--input", '{"n": 5}'
            )
            assert submitted.returncode == 0, submitted.stderr
            first = _worker(worker_dir, store, env)
            workers.append(first)
            await _until(lambda: _calls(tmp_path)[f"{run_id}/prepare"] == 1)
            # Killed in its step, or after the run parked and its slot was freed.
            await asyncio.sleep(rng.uniform(0, STEP_SECONDS * 1.5))
            _kill(first)
            sent = await _run(data_dir, store, env, "send", run_id, *args)
            assert sent.returncode == 0, sent.stderr
            workers.append(_worker(worker_dir, store, env))
            await _until(lambda: _finished(data_dir, store, run_id))
    finally:
        for worker in workers:
            _stop(worker)
    async with Runtime(data_dir, store=store) as rt:
        state = await rt.get_state(run_id)
        assert state.status.value == "completed", state.failure_message
        assert state.output == {"n": 10, "answer": {"ok": True}}
        events = [record.event for record in await rt.events.read(run_id)]
        received = [e for e in events if isinstance(e, EventReceived)]
        assert [(e.event, e.key, e.data) for e in received] == [("approval", "k1", {"ok": True})]
        started = [e for e in events if isinstance(e, WaitStarted)]
        assert [(e.step_path, e.event) for e in started] == [("approval", "approval")]
        ended = [e for e in events if isinstance(e, WaitCompleted)]
        assert [(e.step_path, e.outcome, e.key) for e in ended] == [("approval", "event", "k1")]
        committed = collections.Counter(e.step_path for e in events if isinstance(e, StepCompleted))
        assert set(committed.values()) == {1}
    calls = _calls(tmp_path)
    assert calls[f"{run_id}/finish"] == 1
    # prepare ran once, or twice if the first worker was killed inside it.
    assert calls[f"{run_id}/prepare"] in ((1, 2) if moment == "after_a_worker_kill" else (1,))
    again = await _run(data_dir, store, env, "send", run_id, *args)
    assert again.returncode == 0, again.stderr  # the same key: nothing more delivered
    assert "already sent" in again.stderr


async def test_a_timeout_routes_to_its_branch_and_a_late_send_is_refused(
    tmp_path: Path, store: str | None
) -> None:
    env = {**_env(tmp_path), "LW_TEST_STEP_SECONDS": "0"}
    data_dir = tmp_path / "data"
    worker_dir = data_dir if store is None else tmp_path / "worker"
    run_id = "deadline_1"
    ran = await _run(
        data_dir,
        store,
        env,
        "run",
        str(HERE / "deadline.yaml"),
        "--run-id",
        run_id,
        "--input",
        '{"n": 1}',
    )
    assert ran.returncode == 7, ran.stderr
    worker = _worker(worker_dir, store, env)
    try:
        await _until(lambda: _finished(data_dir, store, run_id))
    finally:
        _stop(worker)
    async with Runtime(data_dir, store=store) as rt:
        state = await rt.get_state(run_id)
        assert state.output == {"answer": {"n": 0, "answer": "timed out"}, "route": "timeout"}
        events = await rt.events.read(run_id)
        ended = [r for r in events if isinstance(r.event, WaitCompleted)]
        assert [getattr(r.event, "outcome", None) for r in ended] == ["timeout"]
        started = next(r.event for r in events if isinstance(r.event, WaitStarted))
        assert isinstance(started, WaitStarted)
        assert started.wake_at is not None
        assert ended[0].ts >= started.wake_at
        assert not any(isinstance(r.event, EventReceived) for r in events)
    late = await _run(data_dir, store, env, "send", run_id, "approval", "--data", '"too late"')
    assert late.returncode == 3
    assert "not_waiting" in late.stderr
    assert _calls(tmp_path)[f"{run_id}/late"] == 1


async def test_a_sleep_outlives_a_killed_worker_and_continues_once_after_its_time(
    tmp_path: Path, store: str | None
) -> None:
    env = {**_env(tmp_path), "LW_TEST_STEP_SECONDS": "0"}
    data_dir = tmp_path / "data"
    worker_dir = data_dir if store is None else tmp_path / "worker"
    run_id = "nap_1"
    submitted = await _run(
        data_dir,
        store,
        env,
        "submit",
        str(HERE / "nap.yaml"),
        "--run-id",
        run_id,
        "--input",
        '{"n": 4}',
    )
    assert submitted.returncode == 0, submitted.stderr

    async def sleeping() -> bool:
        async with Runtime(data_dir, store=store) as rt:
            return any(isinstance(r.event, WaitStarted) for r in await rt.events.read(run_id))

    first = _worker(worker_dir, store, env)
    try:
        await _until(sleeping)
    finally:
        _kill(first)  # during its 3 s sleep
    await asyncio.sleep(10)  # a reboot, say
    second = _worker(worker_dir, store, env)
    try:
        await _until(lambda: _finished(data_dir, store, run_id))
    finally:
        _stop(second)
    async with Runtime(data_dir, store=store) as rt:
        state = await rt.get_state(run_id)
        assert state.status.value == "completed", state.failure_message
        records = await rt.events.read(run_id)
        started = [r for r in records if isinstance(r.event, WaitStarted)]
        assert len(started) == 1
        begun = started[0].event
        assert isinstance(begun, WaitStarted)
        wake_at = begun.wake_at
        assert wake_at is not None
        assert abs(wake_at - (started[0].ts + 3)) < 0.5  # 3 s after the sleep began, once
        ended = [r for r in records if isinstance(r.event, WaitCompleted)]
        assert [getattr(r.event, "outcome", None) for r in ended] == ["due"]
        assert ended[0].ts >= wake_at  # continued after (not before) its time
        finish = [
            r
            for r in records
            if isinstance(r.event, StepCompleted) and r.event.step_path == "finish"
        ]
        assert len(finish) == 1
        assert finish[0].ts >= wake_at
        assert isinstance(state.output, dict)
        assert state.output["n"] == 0
        woke = datetime.fromisoformat(str(state.output["answer"]).replace("Z", "+00:00"))
        assert abs(woke.timestamp() - wake_at) < 1e-3  # the sleep's output: its recorded time
    calls = _calls(tmp_path)
    assert calls[f"{run_id}/prepare"] == 1
    assert calls[f"{run_id}/finish"] == 1


async def test_a_code_first_run_waits_is_answered_sleeps_and_ends_under_a_worker(
    tmp_path: Path, store: str | None
) -> None:
    env = _env(tmp_path)
    data_dir = tmp_path / "data"
    worker_dir = data_dir if store is None else tmp_path / "worker"
    run_id = "code_1"
    flow = "tests.waits.flows:approve"
    ran = await _run(data_dir, store, env, "run", flow, "--run-id", run_id, "--input", '{"n": 3}')
    assert ran.returncode == 7, ran.stderr
    assert f"send {run_id} approval --data JSON" in ran.stderr
    bad = await _run(data_dir, store, env, "send", run_id, "approval", "--data", '{"ok": true}')
    assert bad.returncode == 3  # the model's schema: "by" is required
    assert "invalid_event_payload" in bad.stderr
    data = '{"ok": true, "by": "ann"}'
    sent = await _run(data_dir, store, env, "send", run_id, "approval", "--data", data)
    assert sent.returncode == 0, sent.stderr
    worker = _worker(worker_dir, store, env)
    try:
        await _until(lambda: _finished(data_dir, store, run_id))
    finally:
        _stop(worker)
    async with Runtime(data_dir, store=store) as rt:
        state = await rt.get_state(run_id)
        assert state.output == {"n": 6, "by": "ann", "ok": True}
        records = await rt.events.read(run_id)
        started = [r.event for r in records if isinstance(r.event, WaitStarted)]
        assert [(e.step_path, e.kind, e.event) for e in started] == [
            ("approval", "wait", "approval"),
            ("sleep", "sleep", None),
        ]
        ended = [r for r in records if isinstance(r.event, WaitCompleted)]
        assert [getattr(r.event, "outcome", None) for r in ended] == ["event", "due"]
        assert started[1].wake_at is not None
        assert ended[1].ts >= started[1].wake_at
