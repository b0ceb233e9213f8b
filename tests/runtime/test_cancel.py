"""Cancelling runs: in this process, in another process, not running at all, with children.

A step that waits for a release file stands for a long model call; the tests count the
steps that ran (in a file outside the process) and read the log to see what the
cancellation recorded.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from little_workflow.durable import FileLock
from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import RunStatus
from little_workflow.runtime import Runtime
from little_workflow.runtime._cancel import cancel_key
from tests.runtime.support import FLOWS, cli, cli_popen, read_calls, types, wait_for_file

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    paths = {
        "calls": tmp_path / "calls.txt",
        "entered": tmp_path / "entered.txt",
        "release": tmp_path / "release",
    }
    monkeypatch.setenv("LW_TEST_CALLS", str(paths["calls"]))
    monkeypatch.setenv("LW_TEST_ENTERED", str(paths["entered"]))
    monkeypatch.setenv("LW_TEST_RELEASE", str(paths["release"]))
    return paths


def env(files: dict[str, Path]) -> dict[str, str]:
    return {
        "LW_TEST_CALLS": str(files["calls"]),
        "LW_TEST_ENTERED": str(files["entered"]),
        "LW_TEST_RELEASE": str(files["release"]),
    }


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def wait_lines(path: Path, count: int, limit: float = 30) -> list[str]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while True:
        lines = lines_of(path)
        if len(lines) >= count:
            return lines
        assert loop.time() < deadline, f"{path} has {len(lines)} of {count} lines"
        await asyncio.sleep(0.01)


async def test_cancel_stops_a_run_in_flight_and_it_cannot_be_resumed(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    async with Runtime(data) as owner, Runtime(data) as other:
        running = asyncio.create_task(owner.run(FLOWS / "cancel_slow.yaml", run_id="run_cancel1"))
        await wait_lines(files["entered"], 1)
        outcome = await other.cancel("run_cancel1", reason="changed my mind")
        assert outcome.status is RunStatus.CANCELLED
        assert outcome.recorded_by_owner
        with pytest.raises(RunFailedError, match="changed my mind") as raised:
            await running
        assert raised.value.cause_code == "cancelled"

        records = await other.events.read("run_cancel1")
        assert types(records)[-1] == "RunCancelled"
        assert records[-1].event.reason == "changed my mind"  # type: ignore[attr-defined]
        assert "StepCompleted" in types(records)  # the first step
        # The slow step was abandoned and the one after it never started.
        assert [path for _, path, _ in read_calls(files["calls"])] == ["first"]
        assert await other.kv.get(cancel_key("run_cancel1")) is None

        with pytest.raises(RunFailedError, match="cancelled") as again:
            await other.resume("run_cancel1")
        assert again.value.cause_code == "cancelled"
        with pytest.raises(ConfigError, match="already cancelled"):
            await other.cancel("run_cancel1")
        assert len(await other.events.read("run_cancel1")) == len(records)


async def test_cancel_reaches_every_branch_of_a_map(tmp_path: Path, files: dict[str, Path]) -> None:
    data = tmp_path / "data"
    async with Runtime(data) as owner, Runtime(data) as other:
        running = asyncio.create_task(
            owner.run(FLOWS / "cancel_map.yaml", {"items": ["a", "b", "c"]}, run_id="run_cmap")
        )
        await wait_lines(files["entered"], 3)
        outcome = await other.cancel("run_cmap")
        assert outcome.status is RunStatus.CANCELLED
        with pytest.raises(RunFailedError):
            await running
        files["release"].touch()
        await asyncio.sleep(0.1)  # a branch that was not really stopped would count now
        assert read_calls(files["calls"]) == []
        assert types(await other.events.read("run_cmap"))[-1] == "RunCancelled"


async def test_cancelling_a_parent_cancels_its_running_sub_run(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    async with Runtime(data) as owner, Runtime(data) as other:
        running = asyncio.create_task(owner.run(FLOWS / "cancel_parent.yaml", run_id="run_cpar"))
        entered = await wait_lines(files["entered"], 1)
        child_run_id = entered[0].split()[0]
        assert child_run_id != "run_cpar"
        outcome = await other.cancel("run_cpar")
        assert outcome.sub_run_ids == (child_run_id,)
        assert outcome.status is RunStatus.CANCELLED
        with pytest.raises(RunFailedError) as raised:
            await running
        assert raised.value.cause_code == "cancelled"
        for run_id in ("run_cpar", child_run_id):
            state = await other.get_state(run_id)
            assert state.status is RunStatus.CANCELLED, run_id
        # The parent did not record its workflow step as failed: it was cancelled.
        assert "StepFailed" not in types(await other.events.read("run_cpar"))
        assert [path for _, path, _ in read_calls(files["calls"])] == ["first"]


async def test_a_run_nobody_executes_is_cancelled_at_once(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    # Another process dies inside the slow step: the run is left running, its lock free.
    process = cli_popen(data, "run", str(FLOWS / "cancel_slow.yaml"), "--run-id", "run_dead")
    wait_for_file(files["entered"], process)
    process.kill()
    process.communicate()
    async with Runtime(data) as rt:
        assert (await rt.get_state("run_dead")).status is RunStatus.RUNNING
        outcome = await rt.cancel("run_dead", reason="abandoned")
        assert outcome.status is RunStatus.CANCELLED
        assert not outcome.recorded_by_owner
    files["release"].touch()
    resumed = cli(data, "resume", "run_dead")
    assert resumed.returncode == 6, resumed.stderr
    assert "cancelled" in resumed.stderr
    assert [path for _, path, _ in read_calls(files["calls"])] == ["first"]


async def test_a_request_the_owner_never_saw_is_recorded_by_the_next_resume(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    process = cli_popen(data, "run", str(FLOWS / "cancel_slow.yaml"), "--run-id", "run_stuck")
    wait_for_file(files["entered"], process)
    process.kill()
    process.communicate()
    async with Runtime(data) as rt:
        # A stuck owner: the lock is held, and nobody acts on the request.
        lock = FileLock(rt.data_dir.lock_path("run", "run_stuck"), purpose="a stuck owner")
        assert lock.try_acquire()
        try:
            outcome = await rt.cancel("run_stuck", wait=0.3)
        finally:
            lock.release()
        assert outcome.status is RunStatus.RUNNING
        assert await rt.kv.get(cancel_key("run_stuck")) is not None
        files["release"].touch()
        with pytest.raises(RunFailedError) as raised:
            await rt.resume("run_stuck")
        assert raised.value.cause_code == "cancelled"
        assert (await rt.get_state("run_stuck")).status is RunStatus.CANCELLED
    assert [path for _, path, _ in read_calls(files["calls"])] == ["first"]


def test_cli_cancel_stops_a_run_in_another_process(tmp_path: Path, files: dict[str, Path]) -> None:
    data = tmp_path / "data"
    process = cli_popen(
        data, "run", str(FLOWS / "cancel_slow.yaml"), "--run-id", "run_cli", env=env(files)
    )
    wait_for_file(files["entered"], process)
    done = cli(data, "cancel", "run_cli", "--reason", "deploy", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {
        "runId": "run_cli",
        "status": "cancelled",
        "recordedByOwner": True,
        "subRunIds": [],
    }
    _, err = process.communicate(timeout=30)
    assert process.returncode == 6, err
    assert err.strip().splitlines()[-1] == "error: run 'run_cli' was cancelled: deploy"
    assert [path for _, path, _ in read_calls(files["calls"])] == ["first"]

    again = cli(data, "cancel", "run_cli")
    assert again.returncode == 3
    assert "already cancelled" in again.stderr
    missing = cli(data, "cancel", "run_nope")
    assert missing.returncode == 3
    assert "no run 'run_nope'" in missing.stderr
    hostile = cli(data, "cancel", "../../etc/passwd")
    assert hostile.returncode == 3
    assert "Traceback" not in hostile.stderr


def test_cli_cancel_reaches_a_run_blocked_in_a_sync_step(tmp_path: Path) -> None:
    data = tmp_path / "data"
    release = tmp_path / "release"
    env_vars = {"LW_TEST_ENTERED": str(tmp_path / "entered"), "LW_TEST_RELEASE": str(release)}
    process = cli_popen(
        data, "run", str(FLOWS / "cancel_sync.yaml"), "--run-id", "run_sync", env=env_vars
    )
    try:
        wait_for_file(tmp_path / "entered", process)
        # The sync step blocks a worker thread, not the event loop: the owner sees the
        # request at once, though the step never returns.
        waited = cli(data, "cancel", "run_sync", "--wait", "30")
        assert waited.returncode == 0, waited.stderr
        assert "run run_sync cancelled by the process running it" in waited.stdout
        _, err = process.communicate(timeout=30)
        # The process ended with the step's thread still blocked (it was never released).
        assert process.returncode == 6, err
        assert not release.exists()
    finally:
        release.touch()
        if process.poll() is None:
            process.kill()
            process.communicate()
    shown = cli(data, "show", "run_sync", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "cancelled"
    events = cli(data, "events", "run_sync", "--json")
    assert events.returncode == 0, events.stderr
    assert "StepCompleted" not in events.stdout


def test_cli_cancel_says_when_the_owner_has_not_stopped(tmp_path: Path) -> None:
    data = tmp_path / "data"
    release = tmp_path / "release"
    env_vars = {"LW_TEST_ENTERED": str(tmp_path / "entered"), "LW_TEST_RELEASE": str(release)}
    process = cli_popen(
        data, "run", str(FLOWS / "cancel_sync.yaml"), "--run-id", "run_stopped", env=env_vars
    )
    try:
        wait_for_file(tmp_path / "entered", process)
        # A stopped process cannot act on the request: it stands, and the command says so.
        process.send_signal(signal.SIGSTOP)
        waited = cli(data, "cancel", "run_stopped", "--wait", "0.5")
        assert waited.returncode == 5, waited.stderr
        assert "has not stopped within 0.5s" in waited.stderr
        process.send_signal(signal.SIGCONT)
        # Once it runs again, the owner sees the request at once.
        _, err = process.communicate(timeout=30)
        assert process.returncode == 6, err
    finally:
        release.touch()
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.communicate()


def test_clear_needs_confirmation_without_a_terminal(tmp_path: Path) -> None:
    refused = cli(tmp_path / "data", "clear", "exec_1")
    assert refused.returncode == 2
    assert "--yes" in refused.stderr
    missing = cli(tmp_path / "data", "clear", "exec_1", "--yes")
    assert missing.returncode == 3
    assert "no recovery data of execution 'exec_1'" in missing.stderr
    hostile = cli(tmp_path / "data", "clear", "a/../b", "--yes")
    assert hostile.returncode == 3
    assert "error: invalid_id: invalid execution id" in hostile.stderr
    assert "Traceback" not in hostile.stderr
    # A bad id is refused before the confirmation is asked for.
    unconfirmed = cli(tmp_path / "data", "clear", "a/../b")
    assert unconfirmed.returncode == 3
    assert "--yes" not in unconfirmed.stderr


@pytest.fixture(autouse=True)
def _no_leftover_env() -> None:
    os.environ.pop("LITTLE_WORKFLOW_CRASH_AFTER_EVENTS", None)
