"""Step code is untrusted: whatever it raises or returns, the run records a typed outcome.

``SystemExit`` (0 or not), ``GeneratorExit``, a ``BaseException`` of the user's own, a
``CancelledError`` nobody asked for and an exception whose ``str()`` raises are the step's
failure (``StepAttemptFailed`` with the exception's type name, ``StepFailed``,
``RunFailed``): the CLI exits 1 with one line naming the step, the Python API raises
``RunFailedError``, and ``retry`` and ``fork`` work afterwards. An int too long to write is
``invalid_output``; a tuple is stored, and seen by later steps, as a list. Before, each of
these left the run ``running`` (or exited 0, or 70 with a traceback).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import InvalidValueError, RunFailedError, SupervisorError
from little_workflow.events import RunStatus
from little_workflow.harness._tools import tool
from little_workflow.harness.models import scripted
from little_workflow.lwir import ExecuteStep, OutputStep, ToolStep, Workflow
from little_workflow.runtime import Continue, Cycle, Done, Runtime
from tests.runtime.agent_flows import Tools, script, slots, worker_workflow
from tests.runtime.flows import untrusted_funcs
from tests.runtime.outer_support import CALLS_ENV, DONE_AT_ENV, supervise
from tests.runtime.outer_support import FLOW as OUTER_FLOW
from tests.runtime.support import FLOWS, cli, of_type, runtime, types

FLOW = FLOWS / "untrusted.yaml"
ASYNC_FLOW = FLOWS / "untrusted_async.yaml"

#: kind -> (the error code recorded for the attempt, the run's cause code)
FAILURES = {
    "system_exit_0": ("SystemExit", "step_failed"),
    "system_exit_3": ("SystemExit", "step_failed"),
    "base_exception": ("Custom", "step_failed"),
    "generator_exit": ("GeneratorExit", "step_failed"),
    "cancelled": ("CancelledError", "step_failed"),
    "bad_str": ("BadStr", "step_failed"),
    "huge_int": ("invalid_value", "invalid_output"),
}


def _input(kind: str, marker: Path) -> str:
    return json.dumps({"kind": kind, "marker": str(marker)})


def _events(data: Path, run_id: str) -> list[dict[str, Any]]:
    shown = cli(data, "events", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line) for line in shown.stdout.splitlines()]


@pytest.mark.parametrize("flow", [FLOW, ASYNC_FLOW], ids=["sync", "async"])
@pytest.mark.parametrize("kind", sorted(FAILURES))
def test_the_cli_records_the_failure_exits_1_and_retry_then_completes(
    tmp_path: Path, kind: str, flow: Path
) -> None:
    data, marker = tmp_path / "data", tmp_path / "fixed"
    failed = cli(data, "run", str(flow), "--input", _input(kind, marker), "--run-id", "r1")

    error_code, cause = FAILURES[kind]
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout == ""
    (line,) = failed.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(f"error: run failed ({cause})")
    assert "step 'misbehave'" in line
    assert error_code in line

    state = json.loads(cli(data, "replay", "r1", "--json").stdout)
    assert state["status"] == "failed"
    events = _events(data, "r1")
    attempt = next(e for e in events if e["type"] == "StepAttemptFailed")
    assert attempt["event"]["errorCode"] == error_code
    assert [e["type"] for e in events][-2:] == ["StepFailed", "RunFailed"]
    assert events[-1]["event"]["causeCode"] == cause

    # The user fixes the code: retry continues from the failed step and completes.
    marker.touch()
    retried = cli(data, "retry", "r1")
    assert retried.returncode == 0, retried.stderr
    assert json.loads(retried.stdout) == "fixed"


def test_bad_str_is_described_without_calling_str_again(tmp_path: Path) -> None:
    data = tmp_path / "data"
    failed = cli(data, "run", str(FLOW), "--input", _input("bad_str", tmp_path / "m"))
    assert failed.returncode == 1
    assert "<BadStr whose str() raised RuntimeError>" in failed.stderr


def test_fork_after_a_system_exit_runs_the_step_anew(tmp_path: Path) -> None:
    data, marker = tmp_path / "data", tmp_path / "fixed"
    failed = cli(
        data, "run", str(FLOW), "--input", _input("system_exit_0", marker), "--run-id", "r"
    )
    assert failed.returncode == 1
    marker.touch()
    forked = cli(data, "fork", "r", "--at", "misbehave", "--run-id", "r2")
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == "fixed"


def test_a_tuple_result_is_stored_and_seen_as_a_list(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = cli(data, "run", str(FLOW), "--input", _input("tuple", tmp_path / "m"), "--run-id", "t")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1, [2, [3, "x"]]]
    completed = next(e for e in _events(data, "t") if e["type"] == "StepCompleted")
    assert completed["event"]["output"] == [1, [2, [3, "x"]]]


# --- the Python API ---------------------------------------------------------------------


def _workflow(fn: str) -> Workflow:
    return Workflow(
        name="untrusted",
        steps=[
            ExecuteStep(id="bad", fn=fn),
            ExecuteStep(id="after", fn="t:after", with_={"seen": "${steps.bad.output}"}),
            OutputStep(id="out", value="${steps.after.output}"),
        ],
    )


@pytest.mark.parametrize("kind", sorted(FAILURES))
async def test_the_api_raises_run_failed_and_records_the_outcome(tmp_path: Path, kind: str) -> None:
    marker = tmp_path / "fixed"

    def bad() -> Any:
        return untrusted_funcs.misbehave(kind, str(marker))

    functions = {"t:bad": bad, "t:after": lambda seen: seen}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(_workflow("t:bad"), None, run_id="api")
        records = await rt.events.read("api")
        state = await rt.get_state("api")

        error_code, cause = FAILURES[kind]
        assert caught.value.cause_code == cause
        assert "'bad'" in caught.value.message
        assert of_type(records, "StepAttemptFailed")[0].error_code == error_code
        assert types(records)[-2:] == ["StepFailed", "RunFailed"]
        assert state.status is RunStatus.FAILED

        marker.touch()
        retried = await rt.retry("api")
        assert retried.output == "fixed"


async def test_a_tuple_is_a_list_for_the_next_step_as_after_a_restart(tmp_path: Path) -> None:
    seen: list[Any] = []

    def after(seen_value: Any) -> Any:
        seen.append(seen_value)
        return seen_value

    workflow = Workflow(
        name="tuples",
        steps=[
            ExecuteStep(id="bad", fn="t:bad"),
            ExecuteStep(id="after", fn="t:after", with_={"seen_value": "${steps.bad.output}"}),
            OutputStep(id="out", value="${steps.after.output}"),
        ],
    )
    functions = {"t:bad": lambda: (1, (2, 3)), "t:after": after}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        result = await rt.run(workflow, None, run_id="tup")
    assert result.output == [1, [2, 3]]
    assert seen == [[1, [2, 3]]]
    assert type(seen[0]) is list


async def test_a_tool_step_raising_system_exit_is_a_recorded_tool_failure(tmp_path: Path) -> None:
    def search(query: str) -> str:
        raise SystemExit(2)

    workflow = Workflow(
        name="tool-exit",
        steps=[
            ToolStep(id="search", tool="web_search", with_={"query": "x"}),
            OutputStep(id="out", value="${steps.search.output}"),
        ],
    )
    async with runtime(tmp_path / "data", tools={"web_search": search}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, None, run_id="tool")
        records = await rt.events.read("tool")
    assert caught.value.cause_code == "step_failed"
    (failed,) = of_type(records, "harness.tool_call.failed")
    assert (failed.error_code, failed.message) == ("SystemExit", "2")


async def test_an_agents_tool_raising_system_exit_is_told_to_the_model(tmp_path: Path) -> None:
    tools = Tools()

    def check(name: str) -> str:
        """Check a candidate's references.

        Args:
            name: The candidate's name.
        """
        raise SystemExit(0)

    provider = scripted(script)
    rt = Runtime(
        tmp_path / "data",
        model_slots=slots(provider),
        tools=[tools.lookup, tools.score, tool(check)],
    )
    workflow = worker_workflow(prompt="Check ${input.who}", tools=("check",))
    async with rt:
        result = await rt.run(workflow, {"who": "Ada"}, run_id="agent")
        log = await rt.events.read("agent")
    (failed,) = of_type(log, "harness.tool_call.failed")
    assert failed.error_code == "SystemExit"
    assert result.output == "Check: SystemExit: 0"
    assert provider.requests[1].messages[-1].is_error


# --- a loop's supervisor ----------------------------------------------------------------


@pytest.mark.parametrize(
    "raised", [SystemExit(0), GeneratorExit(), untrusted_funcs.BadStr()], ids=type
)
async def test_a_supervisor_that_raises_is_a_typed_error_and_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, raised: BaseException
) -> None:
    monkeypatch.setenv(CALLS_ENV, str(tmp_path / "calls"))
    monkeypatch.setenv(DONE_AT_ENV, "1")
    asked: list[int] = []

    def broken(cycle: Cycle) -> Done | Continue:
        asked.append(cycle.cycle_number)
        raise raised

    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(SupervisorError) as caught:
            await rt.run_outer_loop(
                OUTER_FLOW,
                {"topic": "tea"},
                max_outer_cycles=2,
                supervise=broken,
                outer_loop_id="ol",
            )
        assert caught.value.code == "supervise_failed"
        assert "cycle 1 of outer loop 'ol'" in caught.value.message
        assert type(raised).__name__ in caught.value.message
        # Nothing was recorded for the cycle: the fixed supervisor is asked about it.
        outcome = await rt.run_outer_loop(
            OUTER_FLOW,
            {"topic": "tea"},
            max_outer_cycles=2,
            supervise=supervise,
            outer_loop_id="ol",
        )
    assert asked == [1]
    assert (outcome.kind, len(outcome.cycles)) == ("done", 1)


async def test_a_supervisor_done_with_a_non_json_output_is_invalid_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CALLS_ENV, str(tmp_path / "calls"))
    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(InvalidValueError, match=r"Done\.final_output of cycle 1"):
            await rt.run_outer_loop(
                OUTER_FLOW,
                {"topic": "tea"},
                max_outer_cycles=2,
                supervise=lambda cycle: Done(final_output={1, 2}),
                outer_loop_id="ol2",
            )


def test_the_loop_command_exits_1_with_one_line_when_supervise_raises(tmp_path: Path) -> None:
    done = cli(
        tmp_path / "data",
        "loop",
        str(OUTER_FLOW),
        "--input",
        '{"topic": "tea"}',
        "--max-cycles",
        "2",
        "--supervise",
        "tests.runtime.flows.untrusted_funcs:exiting_supervisor",
        env={CALLS_ENV: str(tmp_path / "calls")},
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: supervise_failed: supervise() raised SystemExit: 4")
