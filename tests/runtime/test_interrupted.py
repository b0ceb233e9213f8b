"""A run whose process was SIGKILLed is reported *interrupted*, not running, until resumed.

Each test starts a real ``little-workflow run`` in a child process, waits until it is
blocked inside a step (a file says so), looks at it while it lives, kills it with SIGKILL
and looks again, through the CLI as a user and a script would.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.durable import FileLock
from little_workflow.events import RunStatus
from little_workflow.runtime import Runtime
from little_workflow.views import RunReader
from tests.runtime.support import (
    FLOWS,
    REPO,
    cli,
    cli_popen,
    read_calls,
    wait_for_file,
    wait_for_line,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "calls": tmp_path / "calls.txt",
        "entered": tmp_path / "entered.txt",
        "release": tmp_path / "release",
    }


def env(files: dict[str, Path]) -> dict[str, str]:
    return {
        "LW_TEST_CALLS": str(files["calls"]),
        "LW_TEST_ENTERED": str(files["entered"]),
        "LW_TEST_RELEASE": str(files["release"]),
    }


def _json(data: Path, *args: str) -> object:
    done = cli(data, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL


def _statuses(data: Path, *args: str) -> dict[str, object]:
    listed = _json(data, "runs", *args)
    assert isinstance(listed, list)
    return {row["runId"]: row["status"] for row in listed}


def test_a_killed_run_is_interrupted_in_runs_show_and_stuck_until_its_resume(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    process = cli_popen(
        data, "run", str(FLOWS / "cancel_slow.yaml"), "--run-id", "run_k", env=env(files)
    )
    try:
        wait_for_file(files["entered"], process)
        # Alive and blocked in a step: running, nothing stuck.
        assert _statuses(data) == {"run_k": "running"}
        shown = _json(data, "show", "run_k")
        assert isinstance(shown, dict)
        assert (shown["status"], shown["interruption"]) == ("running", None)
        assert _json(data, "runs", "--stuck") == []
    finally:
        _kill(process)

    (row,) = _json(data, "runs")  # type: ignore[misc]
    assert row["status"] == "interrupted"
    assert f"pid {process.pid}" in row["interruption"]
    assert _statuses(data, "--status", "interrupted") == {"run_k": "interrupted"}
    assert _statuses(data, "--status", "running") == {}
    table = cli(data, "runs")
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[1].split()[:3] == ["run_k", "cancel-slow", "interrupted"]

    shown = _json(data, "show", "run_k")
    assert isinstance(shown, dict)
    command = f"little-workflow --data-dir {data} resume run_k"
    assert (shown["status"], shown["resumeCommand"]) == ("interrupted", command)
    assert [step["status"] for step in shown["steps"]] == ["completed", "running"]  # the log's
    tree = cli(data, "show", "run_k")
    assert tree.returncode == 0, tree.stderr
    assert tree.stdout.splitlines()[0].split() == ["run_k", "cancel-slow", "interrupted"]
    assert f"Resume it with: {command}" in " ".join(tree.stdout.split())

    (stuck,) = _json(data, "runs", "--stuck")  # type: ignore[misc]
    assert (stuck["runId"], stuck["reason"], stuck["command"]) == ("run_k", "interrupted", command)
    assert f"pid {process.pid}" in stuck["detail"]
    listing = cli(data, "runs", "--stuck")
    assert listing.returncode == 0, listing.stderr
    assert command in listing.stdout

    # Following its events stops (nobody will append any), saying why and what to do.
    followed = cli(data, "events", "run_k", "--follow", "--json")
    assert followed.returncode == 0, followed.stderr
    assert [json.loads(line)["type"] for line in followed.stdout.splitlines()][-1] == (
        "StepAttemptStarted"
    )
    assert followed.stderr.startswith("run run_k is interrupted: its process (pid ")
    assert followed.stderr.rstrip().endswith(f"resume it with: {command}")

    # The command it gives is the one that carries the run on.
    files["release"].touch()
    words = shlex.split(stuck["command"])
    assert words[0] == "little-workflow"
    resumed = subprocess.run(
        [sys.executable, "-m", "little_workflow", *words[1:]],
        cwd=REPO,
        env={**os.environ, **env(files)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 2
    assert _statuses(data) == {"run_k": "completed"}
    assert _json(data, "runs", "--stuck") == []
    # The step that had completed before the kill was not called again.
    assert [path for _, path, _ in read_calls(files["calls"])] == ["first", "slow", "after"]


async def test_a_sub_run_is_interrupted_with_its_root_and_covered_by_its_roots_lock(
    tmp_path: Path, files: dict[str, Path]
) -> None:
    data = tmp_path / "data"
    process = cli_popen(
        data, "run", str(FLOWS / "cancel_parent.yaml"), "--run-id", "run_root", env=env(files)
    )
    try:
        child = wait_for_line(files["entered"], process).split()[0]
        assert _statuses(data, "--sub-runs") == {"run_root": "running", child: "running"}
    finally:
        _kill(process)
    assert _statuses(data, "--sub-runs") == {"run_root": "interrupted", child: "interrupted"}

    async with Runtime(data) as rt:
        reader = RunReader(rt.events, interrupted=rt.interrupted_runs)
        # The root held again (as a resume does before it reaches the sub-run's step):
        # the sub-run, whose own lock nobody holds yet, is driven under it.
        root_lock = FileLock(rt.data_dir.lock_path("run", "run_root"), purpose="a resume")
        assert root_lock.try_acquire()
        try:
            view = await reader.view("run_root")
            assert view is not None
            assert view.summary.reported_status == "running"
            assert [(sub.run_id, sub.reported_status) for sub in view.sub_runs] == [
                (child, "running")
            ]
        finally:
            root_lock.release()
        view = await reader.view(child)
        assert view is not None
        assert view.summary.interrupted
        assert view.summary.status is RunStatus.RUNNING  # what its log says


def test_the_resume_command_names_the_store_and_data_dir_in_use_without_a_password() -> None:
    from little_workflow.cli._inspect import resume_command
    from little_workflow.cli._main import Options

    def options(data_dir: str, store: str | None) -> Options:
        return Options(
            data_dir=Path(data_dir),
            store=store,
            debug=False,
            lock_timeout=60.0,
            crash_after_events=None,
            setup=None,
            faults=None,
        )

    assert resume_command(options(".little-workflow", None), "run_x") == (
        "little-workflow resume run_x"
    )
    assert resume_command(options("/srv/my data", None), "run_x") == (
        "little-workflow --data-dir '/srv/my data' resume run_x"
    )
    url = "postgresql://ops:s3cret@db.internal:5432/flows?schema=prod"
    command = resume_command(options(".little-workflow", url), "run_x")
    assert "s3cret" not in command
    assert shlex.split(command) == [
        "little-workflow",
        "--store",
        "postgresql://ops:***@db.internal:5432/flows?schema=prod",
        "resume",
        "run_x",
    ]
