"""``Runtime`` in one process: the events of a step, step paths, visits, resume, replay.

Every test owns a data directory under ``tmp_path``; step functions are registered by
reference (or imported from ``tests.runtime.flows``) and count their calls.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import (
    HarnessExecuteStepSucceeded,
    RunCompleted,
    RunResumed,
    RunStarted,
    RunStatus,
    StepAttemptStarted,
    StepCompleted,
)
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow, definition_hash
from little_workflow.runtime import CRASH_EXIT_CODE, Runtime
from tests.runtime.support import FLOWS, Crash, cli, ev, of_type, read_calls, runtime, summary

REVIEW = FLOWS / "review.yaml"
REVIEW_INPUT = {"query": "senior engineers"}
WORKERS = {f"review-candidates[cand_{n}].worker" for n in (1, 2, 3)}


def one_step() -> Workflow:
    return Workflow(
        name="one-step",
        steps=[
            ExecuteStep(id="double", fn="t.steps:double", with_={"x": "${input.x}"}),
            OutputStep(id="out", value={"doubled": "${steps.double.output}"}),
        ],
    )


class Calls:
    """Registered step functions that record their calls."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def double(self, x: int) -> int:
        self.log.append(("double", x))
        return x * 2

    def functions(self) -> dict[str, Any]:
        return {"t.steps:double": self.double}


# --- 1. one execute step ------------------------------------------------------------


async def test_one_execute_step_writes_the_durability_unit_and_resume_executes_nothing(
    tmp_path: Path,
) -> None:
    calls = Calls()
    workflow = one_step()
    async with runtime(tmp_path / "data", functions=calls.functions()) as rt:
        result = await rt.run(workflow, {"x": 21}, run_id="run_one")

        assert result.run_id == "run_one"
        assert result.status is RunStatus.COMPLETED
        assert result.output == {"doubled": 42}
        assert (result.executed_steps, result.replayed_steps) == (1, 0)
        assert calls.log == [("double", 21)]

        records = await rt.events.read("run_one")
        assert summary(records) == [
            ("RunStarted", None),
            ("StepAttemptStarted", "double"),
            ("StepCompleted", "double"),
            ("RunCompleted", None),
        ]
        assert [record.seq for record in records] == [1, 2, 3, 4]
        started, attempt, completed, done = (ev(record) for record in records)
        assert started == RunStarted(
            workflow_name="one-step",
            definition_hash=definition_hash(workflow),
            workflow_version_id=started.workflow_version_id,
            input={"x": 21},
        )
        assert started.workflow_version_id.startswith("wv_")
        assert attempt == StepAttemptStarted(
            step_path="double", step_id="double", kind="execute", attempt=1, visit=None
        )
        assert isinstance(completed, StepCompleted)
        assert (completed.step_path, completed.kind, completed.visit) == ("double", "execute", None)
        assert (completed.output, completed.route) == (42, None)
        assert completed.identity is not None
        assert completed.identity.startswith("sha256:")
        assert done == RunCompleted(output={"doubled": 42})

        again = await rt.resume("run_one")
        assert again.output == {"doubled": 42}
        assert again.status is RunStatus.COMPLETED
        assert (again.executed_steps, again.replayed_steps) == (1 - 1, 1)
        assert calls.log == [("double", 21)]
        assert len(await rt.events.read("run_one")) == 4  # a finished run appends nothing

    # A new process (a new runtime on the same directory) sees the same run.
    async with runtime(tmp_path / "data", functions=calls.functions()) as rt:
        resumed = await rt.resume("run_one")
        assert resumed.output == {"doubled": 42}
        assert resumed.executed_steps == 0
        assert calls.log == [("double", 21)]


async def test_logs_with_the_former_second_copy_of_a_result_still_resume(
    tmp_path: Path,
) -> None:
    # Earlier versions committed ``harness.execute_step.succeeded`` (the result) in the
    # same transaction as each execute step's ``StepCompleted``. Such a log folds as it
    # did; one holding the result without its completion completes from it uncalled.
    calls = Calls()
    async with runtime(tmp_path / "data", functions=calls.functions()) as rt:
        first = await rt.run(one_step(), {"x": 21}, run_id="run_new")
        started, attempt, completed, _ = (ev(r) for r in await rt.events.read("run_new"))
        old_result = HarnessExecuteStepSucceeded(step_path="double", attempt=1, result=42)
        await rt.events.append("run_both", [started, attempt, old_result, completed])
        await rt.events.append("run_half", [started, attempt, old_result])

        both = await rt.resume("run_both")
        assert both.output == first.output == {"doubled": 42}
        assert (both.executed_steps, both.replayed_steps) == (0, 1)
        assert both.state.steps["double"].output == first.state.steps["double"].output

        half = await rt.resume("run_half")
        assert half.output == {"doubled": 42}
        assert calls.log == [("double", 21)]
        assert summary(await rt.events.read("run_half"))[3:] == [
            ("RunResumed", None),
            ("StepCompleted", "double"),
            ("RunCompleted", None),
        ]


async def test_resume_of_an_unknown_run_is_a_config_error(tmp_path: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.resume("run_nope")
        assert caught.value.code == "run_not_found"


# --- 2. step paths, visits, decision routes -----------------------------------------


async def test_review_flow_step_paths_and_visits_to_the_letter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    async with runtime(tmp_path / "data") as rt:
        result = await rt.run(REVIEW, REVIEW_INPUT, run_id="run_review")
        records = await rt.events.read("run_review")

    completed = [event.step_path for event in of_type(records, "StepCompleted")]
    # The branches run concurrently, so only their set is fixed.
    assert set(completed[1:4]) == WORKERS
    assert [completed[0], *completed[4:]] == [
        "fetch",
        "review-candidates",
        "summarize",
        "judge.visit[0]",
        "revise.visit[0]",
        "judge.visit[1]",
    ]
    routes = {e.step_path: e.route for e in of_type(records, "StepCompleted") if e.route}
    assert routes == {"judge.visit[0]": "revise", "judge.visit[1]": "accept"}
    visits = {e.step_path: e.visit for e in of_type(records, "StepAttemptStarted")}
    assert visits["judge.visit[0]"] == 0
    assert visits["judge.visit[1]"] == 1
    assert visits["revise.visit[0]"] == 0
    assert visits["review-candidates[cand_1].worker"] is None
    assert visits["fetch"] is None

    state = result.state
    assert state.visits("judge") == 2
    assert state.visits("revise") == 1
    assert state.visits("fetch") == 1
    assert state.visits("worker") == 0  # not at top level
    assert state.visits("worker", "review-candidates[cand_1].") == 1
    assert state.pending_decision_target("judge") == "accept"
    assert state.pending_decision_target("revise") is None
    assert state.steps["judge.visit[1]"].output == {
        "verdict": "accept",
        "visit": 1,
        "total": 233,
        "count": 3,
    }
    assert isinstance(result.output, dict)
    assert result.output["revision"] == "draft revised at visit 0"
    # Every function ran once, with the path the step context gave it.
    paths = sorted(path for _, path, _ in read_calls(calls))
    assert paths == sorted(
        ["fetch", *WORKERS, "total", "judge.visit[0]", "revise.visit[0]", "judge.visit[1]"]
    )


def _sub_run_event_count(records_by_run: dict[str, int], parent: str) -> int:
    return sum(count for run_id, count in records_by_run.items() if run_id != parent)


async def test_kill_mid_loop_resumes_the_recorded_route_without_calling_the_decision_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference run tells where the crash must land: right after the commit that
    # holds judge.visit[0]'s StepCompleted (route "revise"), before revise.visit[0]
    # completes. The crash counter counts the sub-run's events too, which all come
    # before the loop.
    monkeypatch.setenv("LW_TEST_CALLS", str(tmp_path / "reference-calls"))
    async with runtime(tmp_path / "reference") as rt:
        reference = await rt.run(REVIEW, REVIEW_INPUT, run_id="run_loop")
        parent_records = await rt.events.read("run_loop")
        counts = {run.run_id: run.last_seq for run in await rt.events.list_runs()}
    judged = next(
        record.seq
        for record in parent_records
        if record.type == "StepCompleted" and ev(record).step_path == "judge.visit[0]"
    )
    crash_at = judged + _sub_run_event_count(counts, "run_loop")

    data_dir, calls = tmp_path / "data", tmp_path / "calls"
    env = {"LW_TEST_CALLS": str(calls)}
    crashed = cli(
        data_dir,
        "run",
        str(REVIEW),
        "--input",
        json.dumps(REVIEW_INPUT),
        "--run-id",
        "run_loop",
        env=env,
        crash=crash_at,
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    before = read_calls(calls)
    assert ("run_loop", "judge.visit[0]", 1) in before
    assert not [call for call in before if call[1] == "revise.visit[0]"]

    # The resumed judge must not be asked again: it would now choose another route.
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    async with runtime(data_dir) as rt:
        state = await rt.get_state("run_loop")
        assert state.status is RunStatus.RUNNING
        assert summary(await rt.events.read("run_loop"))[-1] == ("StepCompleted", "judge.visit[0]")
        assert state.visits("judge") == 1
        assert state.visits("revise") == 0
        assert state.pending_decision_target("judge") == "revise"
        seen = state.last_seq

        replayed = await rt.replay("run_loop")
        assert replayed.frontier == ("revise.visit[0]",)
        assert replayed.unreached == ()
        assert replayed.output is None
        assert (await rt.get_state("run_loop")).last_seq == seen

        result = await rt.resume("run_loop")
        assert result.output == reference.output
        tail = (await rt.events.read("run_loop"))[seen:]

    assert summary(tail) == [
        ("RunResumed", None),
        ("StepAttemptStarted", "revise.visit[0]"),
        ("StepCompleted", "revise.visit[0]"),
        ("StepAttemptStarted", "judge.visit[1]"),
        ("StepCompleted", "judge.visit[1]"),
        ("RunCompleted", None),
    ]
    assert ev(tail[0]) == RunResumed(reason="resume", pid=ev(tail[0]).pid)
    assert ev(tail[1]).visit == 0
    after = read_calls(calls)[len(before) :]
    assert after == [("run_loop", "revise.visit[0]", 1), ("run_loop", "judge.visit[1]", 1)]
    assert result.state.visits("judge") == 2
    assert result.state.pending_decision_target("judge") == "accept"
    assert (result.executed_steps, result.replayed_steps) == (2, 4)


# --- 6. replay ------------------------------------------------------------------------


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("replay called a step function")


async def test_replay_calls_nothing_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    async with runtime(tmp_path / "data") as rt:
        done = await rt.run(REVIEW, REVIEW_INPUT, run_id="run_replay")
    calls_before = calls.read_text()

    refusing = {
        f"tests.runtime.flows:{name}": _refuse
        for name in ("fetch", "score", "total", "judge", "revise")
    }
    monkeypatch.delenv("LW_TEST_CALLS")
    async with Runtime(
        tmp_path / "data", functions=refusing, import_functions=False, sleep=_refuse
    ) as rt:
        runs_before = [(run.run_id, run.last_seq) for run in await rt.events.list_runs()]
        replayed = await rt.replay("run_replay")
        runs_after = [(run.run_id, run.last_seq) for run in await rt.events.list_runs()]

    assert runs_after == runs_before
    assert calls.read_text() == calls_before
    assert replayed.output == done.output
    assert replayed.state.status is RunStatus.COMPLETED
    assert replayed.frontier == ()
    assert replayed.unreached == ()
    # fetch, the map (whole), summarize, judge x2, revise: the map's branches are inside it.
    assert replayed.replayed_steps == 6


async def test_replay_of_a_partial_map_reports_each_unfinished_branch(tmp_path: Path) -> None:
    def work(name: str) -> str:
        if name == "b":
            raise RuntimeError("b is broken")
        return name.upper()

    workflow = Workflow(
        name="partial-map",
        steps=[
            {
                "id": "m",
                "kind": "map",
                "items": ["a", "b", "c"],
                "concurrency": 1,
                "body": [
                    {"id": "w", "kind": "execute", "fn": "t.m:work", "with": {"name": "${item}"}}
                ],
            },
            OutputStep(id="out", value="${steps.m.output}"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.m:work": work}) as rt:
        with pytest.raises(RunFailedError):
            await rt.run(workflow, None, run_id="run_map")
        count = len(await rt.events.read("run_map"))
        replayed = await rt.replay("run_map")
        assert len(await rt.events.read("run_map")) == count

    assert replayed.state.steps["m[0].w"].status == "completed"
    assert replayed.state.steps["m[1].w"].status == "failed"
    # The branch after the failed one never starts (the map has failed by then).
    assert "m[2].w" not in replayed.state.steps
    assert replayed.frontier == ("m[1].w", "m[2].w")
    assert replayed.unreached == ()
    assert replayed.output is None


# --- 8. run with an existing run id --------------------------------------------------


async def test_run_with_an_existing_run_id_resumes_it_or_refuses_other_input(
    tmp_path: Path,
) -> None:
    calls = Calls()
    async with runtime(tmp_path / "data", functions=calls.functions()) as rt:
        first = await rt.run(one_step(), {"x": 1}, run_id="run_same")
        again = await rt.run(one_step(), {"x": 1}, run_id="run_same")
        assert again.output == first.output == {"doubled": 2}
        assert again.executed_steps == 0
        assert calls.log == [("double", 1)]

        with pytest.raises(ConfigError) as other_input:
            await rt.run(one_step(), {"x": 2}, run_id="run_same")
        assert other_input.value.code == "run_id_conflict"
        assert "other input" in str(other_input.value)

        renamed = one_step().model_copy(update={"name": "other-workflow"})
        with pytest.raises(ConfigError) as other_workflow:
            await rt.run(Workflow.model_validate(renamed.model_dump()), {"x": 1}, run_id="run_same")
        assert other_workflow.value.code == "run_id_conflict"
        assert "another workflow" in str(other_workflow.value)

        assert len(await rt.events.read("run_same")) == 4
        assert calls.log == [("double", 1)]


async def test_run_with_an_existing_run_id_continues_an_unfinished_run(tmp_path: Path) -> None:
    """A run that died in its second step: ``run`` with its id picks it up there."""
    calls = Calls()
    dying = [True]

    def second(x: int) -> int:
        if dying.pop() if dying else False:
            raise Crash  # the process "dies" here: nothing more is written
        return calls.double(x)

    workflow = Workflow(
        name="two-steps",
        steps=[
            ExecuteStep(id="a", fn="t.steps:double", with_={"x": "${input.x}"}),
            ExecuteStep(id="b", fn="t.steps:second", with_={"x": "${steps.a.output}"}),
            OutputStep(id="out", value="${steps.b.output}"),
        ],
    )
    functions = {**calls.functions(), "t.steps:second": second}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(Crash):
            await rt.run(workflow, {"x": 3}, run_id="run_cont")
        state = await rt.get_state("run_cont")
        assert state.status is RunStatus.RUNNING
        assert state.completed("a") is not None
        assert state.completed("b") is None
        seen = state.last_seq
        assert calls.log == [("double", 3)]

    async with runtime(tmp_path / "data", functions=functions) as rt:
        result = await rt.run(workflow, {"x": 3}, run_id="run_cont")
        assert result.output == 12
        assert (result.executed_steps, result.replayed_steps) == (1, 1)
        assert calls.log == [("double", 3), ("double", 6)]
        assert summary(await rt.events.read("run_cont"))[seen:] == [
            ("RunResumed", None),
            ("StepAttemptStarted", "b"),
            ("StepCompleted", "b"),
            ("RunCompleted", None),
        ]


# --- 12. the data directory -----------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_data_directory_layout_and_permissions(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with runtime(data, functions=Calls().functions()) as rt:
        await rt.run(one_step(), {"x": 1}, run_id="run_layout")

    assert (data / "little-workflow.db").is_file()
    assert _mode(data / "little-workflow.db") == 0o600
    for directory in (
        data,
        data / "artifacts",
        data / "runs",
        data / "memory",
        data / "locks",
    ):
        assert directory.is_dir(), directory
        assert _mode(directory) == 0o700, (directory, oct(_mode(directory)))
    assert list((data / "locks").iterdir()) == []
    # A run's scratch directory is made when a harness session needs it: one step, none.
    assert not (data / "runs" / "run_layout").exists()
