"""Helpers shared by the runtime tests: a recording sleep, event summaries, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from little_workflow.events import RecordedEvent
from little_workflow.runtime import CRASH_ENV, Runtime
from little_workflow.testing import SimulatedKill

REPO = Path(__file__).resolve().parents[2]
FLOWS = REPO / "tests" / "runtime" / "flows"


class FakeSleep:
    """An instant ``sleep`` that records every delay it was asked for."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


def runtime(
    data_dir: Path,
    *,
    functions: Mapping[str, Callable[..., Any]] | None = None,
    **options: Any,
) -> Runtime:
    """A runtime on ``data_dir`` with an instant sleep unless one is given."""
    options.setdefault("sleep", FakeSleep())
    return Runtime(data_dir, functions=functions, **options)


def summary(records: list[RecordedEvent]) -> list[tuple[str, str | None]]:
    """``(type, step path)`` of each event, in log order (``None`` where there is no path)."""
    result: list[tuple[str, str | None]] = []
    for record in records:
        path = getattr(record.event, "step_path", None)
        if path is None:
            path = getattr(record.event, "session_id", None)
        result.append((record.type, path))
    return result


def ev(record: RecordedEvent) -> Any:
    """A recorded event's event, typed loosely so tests can read any field."""
    return record.event


def types(records: list[RecordedEvent]) -> list[str]:
    """The type of each event, in log order."""
    return [record.type for record in records]


def of_type(records: list[RecordedEvent], type_name: str) -> list[Any]:
    """The events of one type, in log order."""
    return [record.event for record in records if record.type == type_name]


def cli(
    data_dir: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    crash: int | None = None,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m little_workflow --data-dir DATA_DIR ARGS`` in the repository."""
    environment = {**os.environ, **(env or {})}
    environment.pop(CRASH_ENV, None)
    if crash is not None:
        environment[CRASH_ENV] = str(crash)
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_popen(
    data_dir: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.Popen[str]:
    """Start the CLI in the background (for lock tests)."""
    environment = {**os.environ, **(env or {})}
    environment.pop(CRASH_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_file(path: Path, process: subprocess.Popen[str], limit: float = 30) -> None:
    """Wait until ``path`` exists; fail if ``process`` exits first or ``limit`` s pass."""
    deadline = time.monotonic() + limit
    while not path.exists():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the process exited ({process.returncode}) first: {err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} did not appear within {limit} s")
        time.sleep(0.01)


def wait_for_line(path: Path, process: subprocess.Popen[str], limit: float = 30) -> str:
    """The first whole line written to ``path``: the file appears before its writer's
    ``write``, so its existence alone says nothing of what it holds."""
    deadline = time.monotonic() + limit
    wait_for_file(path, process, limit)
    while not (text := path.read_text()).endswith("\n"):
        if process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{path} holds no whole line within {limit} s: {text!r}")
        time.sleep(0.01)
    return text.splitlines()[0]


def read_calls(calls: Path) -> list[tuple[str, str, int]]:
    """The ``(run id, step path, attempt)`` lines a counting step function wrote."""
    if not calls.exists():
        return []
    result = []
    for line in calls.read_text().splitlines():
        run_id, path, attempt = line.split()
        result.append((run_id, path, int(attempt)))
    return result


class Crash(SimulatedKill):
    """Raised by a step function to stop the process's work on the spot, like a kill.

    A ``SimulatedKill``: the runtime records nothing for it, so nothing is appended after
    the events already committed (the run lock is released, as the kernel would).
    """
