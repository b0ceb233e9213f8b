"""Code drift of code-first runs: the code a run calls is pinned, and a resume with changed
code goes on (recording ``code.drifted``, one line on stderr) or, strict, refuses.

The workflow module is written into ``tmp_path`` and rewritten between a run killed
mid-way (a real process, ended by the crash injection right after a commit) and its
resume, as a developer edits a file; the steps count their calls in a file.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from little_workflow import CodeDriftError, Runtime
from little_workflow.events import RecordedEvent
from little_workflow.runtime import CRASH_EXIT_CODE
from tests.runtime.support import cli

RUN = "run_drift"
SOURCE = """\
import os
import signal

from little_workflow import WorkflowContext, step, workflow


def _called(name: str) -> None:
    with open(os.environ["DRIFT_CALLS"], "a", encoding="utf-8") as calls:
        calls.write(name + "\\n")
    if os.environ.get("DRIFT_KILL") == name:
        os.kill(os.getpid(), signal.SIGKILL)


@step
def first(x: int) -> int:
    _called("first")
    return x + 1


@step
def second(x: int) -> int:
    _called("second")
    return x * 2


@step
def third(x: int) -> int:
    _called("third")
    return x + 100


@workflow
async def flow(ctx: WorkflowContext, x: int) -> int:
    a = await ctx.step(first, x)
    b = await ctx.step(second, a)
    return await ctx.step(third, b)


@workflow
async def parent(ctx: WorkflowContext, x: int) -> int:
    return await ctx.workflow(flow, {"x": x})
"""
#: ``first`` as edited after the kill: another source, the same result.
EDITED = SOURCE.replace("    return x + 1\n", "    # Reviewed: still adds one.\n    return x + 1\n")


class Project:
    """A module in ``tmp_path`` that the command line imports, and its data directory."""

    def __init__(self, tmp_path: Path, module: str) -> None:
        self.module = module
        self.folder = tmp_path / "src"
        self.folder.mkdir()
        self.file = self.folder / f"{module}.py"
        self.file.write_text(SOURCE, encoding="utf-8")
        self.data = tmp_path / "data"
        self.calls = tmp_path / "calls"
        self.env = {
            "PYTHONPATH": str(self.folder),
            # The edit may keep the file's size and mtime second: no stale bytecode.
            "PYTHONDONTWRITEBYTECODE": "1",
            "DRIFT_CALLS": str(self.calls),
        }

    def cli(self, *args: str, crash: int | None = None, kill: str = "") -> Any:
        return cli(self.data, *args, env={**self.env, "DRIFT_KILL": kill}, crash=crash)

    def called(self) -> list[str]:
        return self.calls.read_text().splitlines() if self.calls.exists() else []

    async def events(self) -> list[RecordedEvent]:
        async with Runtime(self.data) as rt:
            return await rt.events.read(RUN)

    def killed_after_second(self, tmp_path: Path) -> None:
        """Run the flow once in full elsewhere to find the commit of ``second``, then run it
        here and kill the process right after that commit."""
        reference = cli(
            tmp_path / "reference",
            "run", f"{self.module}:flow", "--input", '{"x": 1}', "--run-id", RUN,
            env={**self.env, "DRIFT_CALLS": str(tmp_path / "reference-calls")},
        )  # fmt: skip
        assert reference.returncode == 0, reference.stderr
        assert json.loads(reference.stdout) == 104

        async def cut() -> int:
            async with Runtime(tmp_path / "reference") as rt:
                records = await rt.events.read(RUN)
            return next(
                r.seq
                for r in records
                if r.type == "StepCompleted" and getattr(r.event, "step_path", "") == "second"
            )

        seq = asyncio.run(cut())
        crashed = self.cli(
            "run", f"{self.module}:flow", "--input", '{"x": 1}', "--run-id", RUN, crash=seq
        )
        assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
        assert self.called() == ["first", "second"]


def pinned(records: list[RecordedEvent]) -> dict[str, str]:
    found: dict[str, str] = {}
    for record in records:
        if record.type == "code.pinned":
            found.update(getattr(record.event, "functions", {}))
    return found


def drifts(records: list[RecordedEvent]) -> list[list[tuple[str, str, str, str]]]:
    return [
        [(c.kind, c.name, c.old, c.new) for c in getattr(record.event, "changes", [])]
        for record in records
        if record.type == "code.drifted"
    ]


def test_a_changed_step_is_drift_recorded_and_the_run_goes_on(tmp_path: Path) -> None:
    project = Project(tmp_path, "drift_goes_on")
    project.killed_after_second(tmp_path)
    before = asyncio.run(project.events())
    pins = pinned(before)
    name = f"{project.module}:first"
    assert set(pins) == {name, f"{project.module}:second"}
    project.file.write_text(EDITED, encoding="utf-8")

    resumed = project.cli("resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 104
    # first and second were committed: only third runs, with the new code.
    assert project.called() == ["first", "second", "third"]
    records = asyncio.run(project.events())
    [[(kind, step, old, new)]] = drifts(records)
    assert (kind, step, old) == ("step", name, pins[name])
    assert new.startswith("py-")
    assert new != old
    line = f'step {name}: "{old}" → "{new}"'
    reported = [text for text in resumed.stderr.splitlines() if "code changed" in text]
    assert len(reported) == 1
    assert line in reported[0]
    # The drift is recorded before anything the resumed pass ran.
    types = [r.type for r in records[len(before) :]]
    assert types[:2] == ["RunResumed", "code.drifted"]

    shown = project.cli("show", RUN)
    assert shown.returncode == 0, shown.stderr
    assert f"workflow {project.module}:flow" in shown.stdout
    assert f"step {name}  {old}" in shown.stdout
    assert line in shown.stdout
    as_json = json.loads(project.cli("show", RUN, "--json").stdout)
    code = as_json["code"]
    assert code["workflow"]["name"] == f"{project.module}:flow"
    assert {"name": name, "hash": old} in code["steps"]
    assert code["drift"][0]["changes"] == [{"kind": "step", "name": name, "old": old, "new": new}]

    # The new code is what the run pins now: resuming it again finds no drift.
    again = project.cli("resume", RUN)
    assert again.returncode == 0, again.stderr
    assert "code changed" not in again.stderr
    assert len(drifts(asyncio.run(project.events()))) == 1


def test_a_strict_resume_refuses_changed_code_and_writes_nothing(tmp_path: Path) -> None:
    project = Project(tmp_path, "drift_refused")
    project.killed_after_second(tmp_path)
    before = asyncio.run(project.events())
    old = pinned(before)[f"{project.module}:first"]
    project.file.write_text(EDITED, encoding="utf-8")

    refused = project.cli("resume", RUN, "--on-code-drift", "refuse")
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.splitlines()
    assert lines[0] == f"CodeDriftError: Run '{RUN}' was started with different code."
    assert lines[2] == "Changes detected:"
    assert lines[3].startswith(f'- step {project.module}:first: "{old}" → "py-')
    assert len(asyncio.run(project.events())) == len(before)
    assert project.called() == ["first", "second"]

    # The same through the API, in this process (which never imported the old module).
    sys.path.insert(0, str(project.folder))
    try:

        async def strict() -> None:
            async with Runtime(project.data, on_code_drift="refuse") as rt:
                with pytest.raises(CodeDriftError) as caught:
                    await rt.resume(RUN)
            assert caught.value.code == "code_drift"
            assert caught.value.run_id == RUN
            [(step, was, now)] = caught.value.changes
            assert (step, was) == (f"{project.module}:first", old)
            assert now != old

        asyncio.run(strict())
    finally:
        sys.path.remove(str(project.folder))
        sys.modules.pop(project.module, None)
    assert len(asyncio.run(project.events())) == len(before)
    assert project.called() == ["first", "second"]

    # Accepting it (the default) goes on.
    resumed = project.cli("resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert project.called() == ["first", "second", "third"]


def test_a_strict_resume_refuses_a_sub_run_whose_code_changed_before_writing(
    tmp_path: Path,
) -> None:
    project = Project(tmp_path, "drift_in_a_sub_run")
    start = ("run", f"{project.module}:parent", "--input", '{"x": 1}', "--run-id", RUN)
    killed = project.cli(*start, kill="third")  # SIGKILL inside the sub-run's third step
    assert killed.returncode == -9, killed.stderr
    assert project.called() == ["first", "second", "third"]

    async def logs() -> dict[str, int]:
        async with Runtime(project.data) as rt:
            runs = [info.run_id for info in await rt.events.list_runs(limit=100)]
            return {run_id: len(await rt.events.read(run_id)) for run_id in runs}

    before = asyncio.run(logs())
    assert len(before) == 2
    [child] = [run_id for run_id in before if run_id != RUN]
    project.file.write_text(EDITED, encoding="utf-8")

    refused = project.cli("resume", RUN, "--on-code-drift", "refuse")
    assert refused.returncode == 3, refused.stderr
    lines = refused.stderr.splitlines()
    assert lines[0] == f"CodeDriftError: Run '{child}' was started with different code."
    assert lines[3].startswith(f'- step {project.module}:first: "py-')
    assert asyncio.run(logs()) == before
    assert project.called() == ["first", "second", "third"]

    resumed = project.cli("resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 104
    assert project.called() == ["first", "second", "third", "third"]


def test_an_unchanged_resume_records_no_drift(tmp_path: Path) -> None:
    project = Project(tmp_path, "drift_none")
    project.killed_after_second(tmp_path)
    resumed = project.cli("resume", RUN)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == 104
    assert "code changed" not in resumed.stderr
    records = asyncio.run(project.events())
    assert drifts(records) == []
    assert set(pinned(records)) == {f"{project.module}:{n}" for n in ("first", "second", "third")}
    shown = json.loads(project.cli("show", RUN, "--json").stdout)
    assert shown["code"]["drift"] == []


def test_on_code_drift_takes_accept_or_refuse(tmp_path: Path) -> None:
    from little_workflow.errors import ConfigError

    with pytest.raises(ConfigError, match="on_code_drift must be 'accept' or 'refuse'"):
        Runtime(tmp_path, on_code_drift="ignore")  # type: ignore[arg-type]
