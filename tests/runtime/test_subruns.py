"""Sub-runs: their own run id and log, committed before they start, reused on resume, pinned.

The crash tests kill a real ``little-workflow run`` process (``os._exit`` right after
the N-th commit, N taken from an uncrashed reference run) and resume in this process.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import RunStatus, SubRunStarted
from little_workflow.lwir import ExecuteStep, OutputStep, SubWorkflowStep, Workflow
from little_workflow.runtime import CRASH_EXIT_CODE
from tests.runtime.support import FLOWS, cli, ev, of_type, read_calls, runtime, summary

INPUT = {"n": 4}


def child_workflow() -> Workflow:
    return Workflow(
        name="child",
        steps=[
            ExecuteStep(id="compute", fn="t.sub:compute", with_={"n": "${input.n}"}),
            OutputStep(id="out", value={"n": "${steps.compute.output}"}),
        ],
    )


def parent_workflow() -> Workflow:
    return Workflow(
        name="parent",
        steps=[
            SubWorkflowStep(id="delegate", workflow="child", with_={"n": "${input.n}"}),
            OutputStep(id="out", value="${steps.delegate.output}"),
        ],
    )


async def test_a_sub_run_has_its_own_id_log_and_parent(tmp_path: Path) -> None:
    calls: list[int] = []

    def compute(n: int) -> int:
        calls.append(n)
        return n * n

    async with runtime(
        tmp_path / "data", workflows=[child_workflow()], functions={"t.sub:compute": compute}
    ) as rt:
        result = await rt.run(parent_workflow(), INPUT, run_id="run_parent")
        parent_log = await rt.events.read("run_parent")
        (started,) = of_type(parent_log, "SubRunStarted")
        sub_id = started.sub_run_id
        children = await rt.events.list_runs(parent_run_id="run_parent")
        child_log = await rt.events.read(sub_id)
        again = await rt.resume("run_parent")

    assert result.output == {"n": 16}
    assert again.output == {"n": 16}
    assert calls == [4]
    assert sub_id != "run_parent"
    assert sub_id.startswith("run_")
    assert summary(parent_log) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "delegate"),
        ("SubRunStarted", "delegate"),
        ("StepCompleted", "delegate"),
        ("RunCompleted", None),
    ]
    assert started == SubRunStarted(
        step_path="delegate",
        sub_run_id=sub_id,
        workflow_name="child",
        definition_hash=started.definition_hash,
    )
    assert [(run.run_id, run.workflow, run.parent_run_id, run.status) for run in children] == [
        (sub_id, "child", "run_parent", RunStatus.COMPLETED)
    ]
    assert summary(child_log) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "compute"),
        ("StepCompleted", "compute"),
        ("RunCompleted", None),
    ]
    child_started = ev(child_log[0])
    assert (child_started.parent_run_id, child_started.parent_step_path) == (
        "run_parent",
        "delegate",
    )
    assert child_started.input == INPUT
    assert child_started.definition_hash == started.definition_hash
    assert result.state.steps["delegate"].sub_run_id == sub_id
    # No harness session in either run: no scratch directory (made when one needs it).
    assert not (tmp_path / "data" / "runs" / sub_id).exists()


async def test_retry_of_a_parent_retries_its_failed_sub_run_in_place(tmp_path: Path) -> None:
    flag = tmp_path / "fixed"
    calls: list[int] = []

    def compute(n: int) -> int:
        calls.append(n)
        if not flag.exists():
            raise RuntimeError("not yet")
        return n

    async with runtime(
        tmp_path / "data", workflows=[child_workflow()], functions={"t.sub:compute": compute}
    ) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(parent_workflow(), INPUT, run_id="run_p")
        assert caught.value.cause_code == "sub_run_failed"
        (sub,) = await rt.events.list_runs(parent_run_id="run_p")
        assert sub.status is RunStatus.FAILED

        flag.touch()
        result = await rt.retry("run_p")
        assert result.output == {"n": 4}
        (same,) = await rt.events.list_runs(parent_run_id="run_p")
        assert same.run_id == sub.run_id
        assert same.status is RunStatus.COMPLETED
    assert calls == [4, 4]


# --- crashes around a sub-run -----------------------------------------------------------


def copy_flows(directory: Path) -> Path:
    directory.mkdir()
    for name in ("sub_parent.yaml", "sub_child.yaml"):
        shutil.copy(FLOWS / name, directory / name)
    return directory / "sub_parent.yaml"


async def reference_counts(tmp_path: Path) -> tuple[dict[str, int], JsonValue]:
    """Run ``sub_parent.yaml`` uncrashed: seqs of the parent's events, its output, its log."""
    async with runtime(tmp_path / "reference") as rt:
        result = await rt.run(FLOWS / "sub_parent.yaml", INPUT, run_id="run_ref")
        log = await rt.events.read("run_ref")
        (child,) = await rt.events.list_runs(parent_run_id="run_ref")
        child_log = await rt.events.read(child.run_id)
    seqs = {f"{record.type} {getattr(record.event, 'step_path', '')}": record.seq for record in log}
    seqs["child events"] = child.last_seq
    seqs["child StepCompleted"] = next(r.seq for r in child_log if r.type == "StepCompleted")
    return seqs, result.output


def crash_run(data: Path, workflow: Path, calls: Path, crash: int) -> None:
    crashed = cli(
        data,
        "run",
        str(workflow),
        "--input",
        json.dumps(INPUT),
        "--run-id",
        "run_sub",
        env={"LW_TEST_CALLS": str(calls)},
        crash=crash,
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr


async def test_a_parent_resumed_after_its_sub_run_finished_reuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seqs, expected = await reference_counts(tmp_path)
    # Every event of the sub-run is committed; the parent's StepCompleted for it is not.
    crash_at = seqs["SubRunStarted child"] + seqs["child events"]
    data, calls = tmp_path / "data", tmp_path / "calls"
    crash_run(data, FLOWS / "sub_parent.yaml", calls, crash_at)

    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    async with runtime(data) as rt:
        state = await rt.get_state("run_sub")
        assert summary(await rt.events.read("run_sub"))[-1] == ("SubRunStarted", "child")
        (sub,) = await rt.events.list_runs(parent_run_id="run_sub")
        assert sub.status is RunStatus.COMPLETED
        assert state.steps["child"].sub_run_id == sub.run_id
        seen = len(await rt.events.read(sub.run_id))

        result = await rt.resume("run_sub")
        subs = await rt.events.list_runs(parent_run_id="run_sub")
        assert len(await rt.events.read(sub.run_id)) == seen  # the finished sub-run is read only

    assert result.output == expected
    assert [run.run_id for run in subs] == [sub.run_id]
    assert [(path, attempt) for _, path, attempt in read_calls(calls)] == [
        ("prepare", 1),
        ("compute", 1),
        ("finish", 1),
    ]


async def test_a_parent_resumed_while_its_sub_run_was_unfinished_resumes_that_sub_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seqs, expected = await reference_counts(tmp_path)
    # The sub-run's step is committed; its RunCompleted is not.
    crash_at = seqs["SubRunStarted child"] + seqs["child StepCompleted"]
    data, calls = tmp_path / "data", tmp_path / "calls"
    crash_run(data, FLOWS / "sub_parent.yaml", calls, crash_at)

    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    async with runtime(data) as rt:
        (sub,) = await rt.events.list_runs(parent_run_id="run_sub")
        assert sub.status is RunStatus.RUNNING
        seen = len(await rt.events.read(sub.run_id))
        assert (await rt.get_state(sub.run_id)).completed("compute") is not None
        result = await rt.resume("run_sub")
        subs = await rt.events.list_runs(parent_run_id="run_sub")
        sub_log = await rt.events.read(sub.run_id)

    assert result.output == expected
    assert [run.run_id for run in subs] == [sub.run_id]
    assert summary(sub_log[seen:]) == [("RunResumed", None), ("RunCompleted", None)]
    assert read_calls(calls) == [
        ("run_sub", "prepare", 1),
        (sub.run_id, "compute", 1),
        ("run_sub", "finish", 1),
    ]


async def test_a_resumed_run_uses_the_pinned_sub_workflow_not_the_edited_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seqs, expected = await reference_counts(tmp_path)
    # The parent's first step is committed; the sub-run has not started.
    crash_at = seqs["StepCompleted prepare"]
    workflow = copy_flows(tmp_path / "flows")
    data, calls = tmp_path / "data", tmp_path / "calls"
    crash_run(data, workflow, calls, crash_at)

    child_file = workflow.parent / "sub_child.yaml"
    child_file.write_text(child_file.read_text().replace("child_v1", "child_v2"))
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))

    async with runtime(data) as rt:
        # A new run of the edited files runs the new child ...
        other = await rt.run(workflow, INPUT, run_id="run_other")
        assert other.output == {"final": {"version": 2, "n": 500}}
        # ... and running the crashed run's id again with the edited files is refused:
        # its workflows are not the ones it was started with.
        with pytest.raises(ConfigError) as conflict:
            await rt.run(workflow, INPUT, run_id="run_sub")
        assert conflict.value.code == "run_id_conflict"
        assert await rt.events.list_runs(parent_run_id="run_sub") == []

    # A new process resumes from the store's pinned closure, never from the files.
    async with runtime(data) as rt:
        result = await rt.resume("run_sub")
        replayed = await rt.replay("run_sub")
    assert result.output == expected == {"final": {"version": 1, "n": 50}}
    assert replayed.output == expected
    compute_calls = [(run_id, path) for run_id, path, _ in read_calls(calls) if path == "compute"]
    assert len(compute_calls) == 2  # one for run_other's sub-run, one for run_sub's
