"""Run locks between real processes: a live run is never driven twice; a dead one is freed.

The holder is a ``little-workflow run`` process whose step blocks until the test
creates a release file, so the test knows the run (and its lock) is live.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_workflow.errors import LockTimeoutError
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.platform._proc import process_start_time
from little_workflow.runtime import Runtime
from tests.runtime.support import FLOWS, cli, cli_popen, wait_for_file

BLOCKING = FLOWS / "blocking.yaml"


class Holder:
    """A background ``run`` of ``blocking.yaml`` and the files that steer it."""

    def __init__(self, tmp_path: Path, run_id: str) -> None:
        self.data = tmp_path / "data"
        self.entered = tmp_path / f"{run_id}.entered"
        self.release = tmp_path / f"{run_id}.release"
        self.env = {"LW_TEST_ENTERED": str(self.entered), "LW_TEST_RELEASE": str(self.release)}
        self.lock_file = self.data / "locks" / f"run-{run_id}.lock"
        self.process = cli_popen(self.data, "run", str(BLOCKING), "--run-id", run_id, env=self.env)

    def wait_until_running(self) -> None:
        wait_for_file(self.entered, self.process)

    def finish(self) -> tuple[int, str, str]:
        self.release.touch()
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, err

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=30)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[Holder]:
    running = Holder(tmp_path, "run_live")
    try:
        running.wait_until_running()
        yield running
    finally:
        running.close()


async def test_a_second_process_on_a_live_run_waits_then_gets_a_typed_error(
    holder: Holder,
) -> None:
    # The lock file says who holds the run: the CLI process, with its start time.
    record = json.loads(holder.lock_file.read_text())
    assert record["owner"] == {
        "pid": holder.process.pid,
        "startTime": process_start_time(holder.process.pid),
    }

    async with Runtime(holder.data, lock_timeout=0.2) as rt:
        with pytest.raises(LockTimeoutError) as resumed:
            await rt.resume("run_live")
        assert resumed.value.code == "lock_timeout"
        assert f"pid {holder.process.pid} (alive" in str(resumed.value)
        assert "run 'run_live'" in str(resumed.value)
        with pytest.raises(LockTimeoutError):
            await rt.run(BLOCKING, None, run_id="run_live")

    busy = cli(holder.data, "--lock-timeout", "0.2", "resume", "run_live", env=holder.env)
    assert busy.returncode == 5, busy.stderr
    assert "lock_timeout" in busy.stderr
    assert busy.stdout == ""

    code, out, err = holder.finish()
    assert code == 0, err
    assert json.loads(out) == "released at attempt 1"
    # Nothing was written by the refused callers: one run, started and completed once.
    async with Runtime(holder.data) as rt:
        events = await rt.events.read("run_live")
        assert [record.type for record in events].count("RunStarted") == 1
        assert [record.type for record in events].count("RunResumed") == 0
        assert events[-1].type == "RunCompleted"
    assert list((holder.data / "locks").iterdir()) == []


async def test_the_lock_of_a_killed_runner_is_recovered_at_once(
    holder: Holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert holder.lock_file.exists()
    os.kill(holder.process.pid, signal.SIGKILL)
    holder.process.wait(timeout=30)
    assert holder.lock_file.exists()  # a killed process cleans nothing up
    holder.release.touch()

    for name, value in holder.env.items():
        monkeypatch.setenv(name, value)
    # lock_timeout=0: one try, no waiting. Running the same command again picks the run up.
    async with Runtime(holder.data, lock_timeout=0) as rt:
        result = await rt.run(BLOCKING, None, run_id="run_live")
        assert result.state.resumes == 1
    assert isinstance(result.output, str)
    assert result.output.startswith("released at attempt")
    assert list((holder.data / "locks").iterdir()) == []


async def test_a_stale_lock_file_of_a_reused_pid_does_not_block_a_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "locks").mkdir(parents=True)
    start = process_start_time(os.getpid())
    assert start is not None
    # This pid is alive (it is this process), but the recorded start time is not its
    # own: the recorded holder is dead and its pid was reused. Nobody flocks the file.
    (data / "locks" / "run-run_stale.lock").write_text(
        json.dumps(
            {
                "owner": {"pid": os.getpid(), "startTime": start - 1},
                "purpose": "run 'run_stale'",
                "acquiredAt": time.time(),
            }
        )
    )
    workflow = Workflow(
        name="stale",
        steps=[
            ExecuteStep(id="one", fn="t.f:one"),
            OutputStep(id="o", value="${steps.one.output}"),
        ],
    )
    async with Runtime(data, functions={"t.f:one": lambda: 1}, lock_timeout=0) as rt:
        result = await rt.run(workflow, None, run_id="run_stale")
    assert result.output == 1
    assert list((data / "locks").iterdir()) == []


def test_a_lock_timeout_from_the_cli_exits_5(tmp_path: Path) -> None:
    running = Holder(tmp_path, "run_cli")
    try:
        running.wait_until_running()
        busy = cli(running.data, "--lock-timeout", "0", "run", str(BLOCKING), "--run-id", "run_cli")
        assert busy.returncode == 5, busy.stderr
        assert "lock_timeout" in busy.stderr
        assert str(running.process.pid) in busy.stderr
        code, _, err = running.finish()
        assert code == 0, err
    finally:
        running.close()


async def test_a_waiting_process_goes_on_once_the_live_run_is_done(holder: Holder) -> None:
    async with Runtime(holder.data, lock_timeout=60) as rt:
        waiting = asyncio.create_task(rt.resume("run_live"))
        for _ in range(5):
            await asyncio.sleep(0.01)
        assert not waiting.done()  # the lock is held: it cannot have got anywhere
        code, out, err = holder.finish()
        assert code == 0, err
        result = await waiting
    # It found the run finished by the other process: same output, nothing executed.
    assert result.output == json.loads(out)
    assert result.executed_steps == 0
    assert list((holder.data / "locks").iterdir()) == []


async def test_a_run_killed_in_its_first_step_can_be_resumed_by_its_id(
    holder: Holder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is in the log as soon as its first step runs, even a step that blocks."""
    os.kill(holder.process.pid, signal.SIGKILL)
    holder.process.wait(timeout=30)
    holder.release.touch()
    for name, value in holder.env.items():
        monkeypatch.setenv(name, value)
    async with Runtime(holder.data, lock_timeout=0) as rt:
        state = await rt.get_state("run_live")
        assert state.status.value == "running"
        assert state.workflow_name == "blocking"
        result = await rt.resume("run_live")
    assert result.output in ("released at attempt 1", "released at attempt 2")
    assert result.executed_steps == 1
