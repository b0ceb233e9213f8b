"""How runs fail: each cause code, the events it leaves, and what runs before it.

Also the tool step kind, whose failures are recorded as ``harness.tool_call.failed``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import ConfigError, InvalidValueError, RunFailedError
from little_workflow.events import (
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    RunStatus,
)
from little_workflow.lwir import (
    DecisionStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    RetryPolicy,
    ToolStep,
    Workflow,
)
from little_workflow.runtime import Runtime, StepContext
from tests.runtime.support import FLOWS, Crash, cli, ev, of_type, runtime, summary, types

LOOP_FOREVER = FLOWS / "loop_forever.yaml"


def loop(max_visits: int = 2) -> Workflow:
    return Workflow(
        name="loop",
        steps=[
            DecisionStep(
                id="check",
                fn="t.loop:again",
                max_visits=max_visits,
                routes={"again": "work", "stop": "done"},
            ),
            ExecuteStep(id="work", fn="t.loop:work", max_visits=max_visits, next="check"),
            OutputStep(id="done", value="${steps.work.output}"),
        ],
    )


# --- 3. maxVisits --------------------------------------------------------------------


async def test_exceeding_max_visits_fails_the_run_and_names_the_step(tmp_path: Path) -> None:
    calls: list[str] = []

    def again(ctx: StepContext) -> str:
        calls.append(ctx.step_path)
        return "again"

    def work(ctx: StepContext) -> int | None:
        calls.append(ctx.step_path)
        return ctx.visit

    functions = {"t.loop:again": again, "t.loop:work": work}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(loop(), None, run_id="run_max")
        records = await rt.events.read("run_max")

        assert caught.value.cause_code == "max_visits_exceeded"
        assert caught.value.run_id == "run_max"
        message = str(caught.value)
        assert "'check'" in message
        assert "maxVisits is 2" in message
        assert calls == ["check.visit[0]", "work.visit[0]", "check.visit[1]", "work.visit[1]"]
        completed = [e.step_path for e in of_type(records, "StepCompleted")]
        assert completed == ["check.visit[0]", "work.visit[0]", "check.visit[1]", "work.visit[1]"]
        # The third visit never starts: the run fails on the way to it.
        assert summary(records)[-2:] == [
            ("StepCompleted", "work.visit[1]"),
            ("RunFailed", "check.visit[2]"),
        ]
        (failed,) = of_type(records, "RunFailed")
        assert failed.cause_code == "max_visits_exceeded"
        assert "'check'" in failed.message

        state = await rt.get_state("run_max")
        assert state.status is RunStatus.FAILED
        assert (state.failure_cause, state.failure_step) == (
            "max_visits_exceeded",
            "check.visit[2]",
        )
        assert state.visits("check") == 2

        with pytest.raises(RunFailedError) as resumed:
            await rt.resume("run_max")
        assert resumed.value.cause_code == "max_visits_exceeded"

        # Replay of the failed run walks to the failure and reports it as the frontier.
        replayed = await rt.replay("run_max")
        assert replayed.state.status is RunStatus.FAILED
        assert replayed.frontier == ("check.visit[2]",)
        assert replayed.unreached == ()
        assert len(await rt.events.read("run_max")) == len(records)
    assert len(calls) == 4


def test_cli_exits_1_with_the_cause_code_when_a_run_fails(tmp_path: Path) -> None:
    data = tmp_path / "data"
    failed = cli(data, "run", str(LOOP_FOREVER), "--input", "{}", "--run-id", "run_cli_max")
    assert failed.returncode == 1, failed.stderr
    assert failed.stdout == ""
    assert "max_visits_exceeded" in failed.stderr
    assert "'check'" in failed.stderr

    resumed = cli(data, "resume", "run_cli_max")
    assert resumed.returncode == 1
    assert "max_visits_exceeded" in resumed.stderr

    replayed = cli(data, "replay", "run_cli_max", "--json")
    assert replayed.returncode == 0, replayed.stderr
    shown = json.loads(replayed.stdout)
    assert shown["status"] == "failed"
    assert shown["frontier"] == ["check.visit[2]"]


def test_cli_run_prints_the_output_as_json_and_exits_0(tmp_path: Path) -> None:
    done = cli(
        tmp_path / "data",
        "run",
        str(FLOWS / "review.yaml"),
        "--input",
        json.dumps({"query": "q"}),
        "--run-id",
        "run_cli_ok",
    )
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    assert output["verdict"]["verdict"] == "accept"
    assert "run_cli_ok" in done.stderr

    again = cli(tmp_path / "data", "resume", "run_cli_ok")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == output
    assert "nothing left to run" in again.stderr


# --- 10. tool steps --------------------------------------------------------------------


def tool_flow(retry: RetryPolicy | None = None) -> Workflow:
    return Workflow(
        name="tooling",
        steps=[
            ToolStep(
                id="search",
                tool="web_search",
                with_={"query": "${input.q}"},
                retry=retry or RetryPolicy(),
            ),
            OutputStep(id="out", value="${steps.search.output}"),
        ],
    )


async def test_a_tool_step_records_its_call(tmp_path: Path) -> None:
    seen: list[tuple[str, str, int]] = []

    async def search(query: str, ctx: StepContext) -> list[str]:
        seen.append((query, ctx.step_path, ctx.attempt))
        return [f"{query} result"]

    async with runtime(tmp_path / "data", tools={"web_search": search}) as rt:
        result = await rt.run(tool_flow(), {"q": "durable"}, run_id="run_tool")
        records = await rt.events.read("run_tool")
        again = await rt.resume("run_tool")

    assert result.output == ["durable result"]
    assert again.output == result.output
    assert seen == [("durable", "search", 1)]
    assert summary(records) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "search"),
        ("harness.tool_call.started", "search"),
        ("harness.tool_call.succeeded", "search"),
        ("StepCompleted", "search"),
        ("RunCompleted", None),
    ]
    assert ev(records[2]) == HarnessToolCallStarted(
        session_id="search",
        call_id="attempt[1]",
        tool_name="web_search",
        arguments={"query": "durable"},
    )
    assert ev(records[3]) == HarnessToolCallSucceeded(
        session_id="search", call_id="attempt[1]", result=["durable result"]
    )
    assert ev(records[4]).kind == "tool"


async def test_a_failing_tool_records_the_failure_and_retries_under_its_policy(
    tmp_path: Path,
) -> None:
    failures = [ConnectionError("reset by peer")]

    def search(query: str) -> str:
        if failures:
            raise failures.pop()
        return "found"

    async with runtime(tmp_path / "data", tools={"web_search": search}) as rt:
        result = await rt.run(tool_flow(RetryPolicy(attempts=2)), {"q": "x"}, run_id="run_t")
        records = await rt.events.read("run_t")

    assert result.output == "found"
    assert summary(records)[1:-1] == [
        ("StepAttemptStarted", "search"),
        ("harness.tool_call.started", "search"),
        ("harness.tool_call.failed", "search"),
        ("StepAttemptFailed", "search"),
        ("StepAttemptStarted", "search"),
        ("harness.tool_call.started", "search"),
        ("harness.tool_call.succeeded", "search"),
        ("StepCompleted", "search"),
    ]
    assert ev(records[3]) == HarnessToolCallFailed(
        session_id="search",
        call_id="attempt[1]",
        error_code="ConnectionError",
        message="reset by peer",
    )
    assert ev(records[4]).will_retry is True
    assert [e.call_id for e in of_type(records, "harness.tool_call.started")] == [
        "attempt[1]",
        "attempt[2]",
    ]


async def test_a_tool_that_keeps_failing_fails_the_run(tmp_path: Path) -> None:
    def search(query: str) -> str:
        raise PermissionError("forbidden")

    async with runtime(tmp_path / "data", tools={"web_search": search}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(tool_flow(), {"q": "x"}, run_id="run_tool_fail")
        records = await rt.events.read("run_tool_fail")

    assert caught.value.cause_code == "step_failed"
    assert types(records) == [
        "RunStarted",
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.failed",
        "StepAttemptFailed",
        "StepFailed",
        "RunFailed",
    ]
    assert ev(records[4]).will_retry is False
    assert ev(records[3]).error_code == "PermissionError"


async def test_an_unregistered_tool_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    async with runtime(tmp_path / "data", tools={}) as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.run(tool_flow(), {"q": "x"}, run_id="run_no_tool")
        assert "web_search" in str(caught.value)
        assert await rt.events.list_runs() == []


# --- 11. failure causes ------------------------------------------------------------------


async def test_a_template_error_in_with_fails_before_any_attempt(tmp_path: Path) -> None:
    # (A missing key of the input itself is refused before the run: tests/lwir/test_input_check.py.)
    called: list[Any] = []
    workflow = Workflow(
        name="templated",
        steps=[
            ExecuteStep(id="b", fn="t.f:b"),
            ExecuteStep(id="a", fn="t.f:a", with_={"v": "${steps.b.output.missing}"}),
            OutputStep(id="out", value="${steps.a.output}"),
        ],
    )
    functions = {"t.f:a": called.append, "t.f:b": lambda: {"present": 1}}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, {"present": 1}, run_id="run_tpl")
        records = await rt.events.read("run_tpl")

    assert caught.value.cause_code == "template_error"
    assert "steps.b.output.missing" in str(caught.value)
    assert summary(records)[-2:] == [("StepCompleted", "b"), ("RunFailed", "a")]
    assert called == []


async def test_a_template_error_in_the_output_fails_after_the_steps(tmp_path: Path) -> None:
    workflow = Workflow(
        name="bad-output",
        steps=[
            ExecuteStep(id="a", fn="t.f:a"),
            OutputStep(id="out", value={"x": "${steps.a.output.nope}"}),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.f:a": lambda: 1}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, None, run_id="run_tpl_out")
        records = await rt.events.read("run_tpl_out")
    assert caught.value.cause_code == "template_error"
    assert summary(records)[-2:] == [("StepCompleted", "a"), ("RunFailed", "out")]


async def test_an_unknown_function_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    workflow = Workflow(
        name="unknown-fn",
        steps=[ExecuteStep(id="a", fn="no_such_module.anywhere:fn"), OutputStep(id="o", value=1)],
    )
    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.run(workflow, None, run_id="run_unknown")
        assert "no_such_module.anywhere:fn" in str(caught.value)
        assert await rt.events.list_runs() == []
        assert await rt.kv.list("workflows/") == []


async def test_import_functions_false_refuses_unregistered_references(tmp_path: Path) -> None:
    importable = "tests.runtime.flows.loop_funcs:work"
    workflow = Workflow(
        name="no-import",
        steps=[ExecuteStep(id="a", fn=importable), OutputStep(id="o", value="${steps.a.output}")],
    )
    async with Runtime(tmp_path / "data", import_functions=False) as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.run(workflow, None, run_id="run_no_import")
        assert "import_functions=False" in str(caught.value)
        assert await rt.events.list_runs() == []

    registered = {importable: lambda: "registered"}
    async with Runtime(tmp_path / "data", functions=registered, import_functions=False) as rt:
        result = await rt.run(workflow, None, run_id="run_registered")
    assert result.output == "registered"


@pytest.mark.parametrize("answer", ["sideways", 42, {"route": 7}])
async def test_a_decision_returning_an_unknown_route_fails(tmp_path: Path, answer: Any) -> None:
    workflow = Workflow(
        name="routing",
        steps=[
            DecisionStep(id="pick", fn="t.f:pick", routes={"left": "left", "right": "right"}),
            OutputStep(id="left", value="L"),
            OutputStep(id="right", value="R"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.f:pick": lambda: answer}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, None, run_id="run_route")
        records = await rt.events.read("run_route")

    assert caught.value.cause_code == "unknown_route"
    assert "'pick'" in str(caught.value)
    assert summary(records) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "pick"),
        ("StepFailed", "pick"),
        ("RunFailed", "pick"),
    ]
    assert ev(records[2]).cause_code == "unknown_route"


@pytest.mark.parametrize(
    ("items", "run_input", "cause"),
    [
        ([{"id": "x"}, {"id": "y"}, {"id": "x"}], None, "map_duplicate_key"),
        ("${input.items}", {"items": {"id": "x"}}, "map_items_invalid"),
        ("${input.items}", {"items": "abc"}, "map_items_invalid"),
        ([{"id": "x"}, {"name": "no key"}], None, "map_invalid_key"),
    ],
)
async def test_map_item_problems_fail_the_run_before_any_branch(
    tmp_path: Path, items: Any, run_input: Any, cause: str
) -> None:
    called: list[Any] = []
    workflow = Workflow(
        name="mapping",
        steps=[
            MapStep(
                id="m",
                items=items,
                key="id",
                body=[ExecuteStep(id="w", fn="t.f:w", with_={"item": "${item}"})],
            ),
            OutputStep(id="out", value="${steps.m.output}"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.f:w": called.append}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, run_input, run_id="run_map_bad")
        records = await rt.events.read("run_map_bad")

    assert caught.value.cause_code == cause
    assert summary(records) == [("RunStarted", None), ("RunFailed", "m")]
    assert called == []


@pytest.mark.parametrize(
    "value",
    [{1, 2}, math.nan, math.inf, {"k": (lambda: 0)}, {3: "int key"}, ["lone \ud800 surrogate"]],
    ids=["set", "nan", "inf", "function", "int-key", "lone-surrogate"],
)
async def test_a_non_json_step_result_is_invalid_output_and_not_retried(
    tmp_path: Path, value: Any
) -> None:
    calls: list[int] = []

    def produce(ctx: StepContext) -> Any:
        calls.append(ctx.attempt)
        return value

    workflow = Workflow(
        name="non-json",
        steps=[
            ExecuteStep(id="p", fn="t.f:p", retry=RetryPolicy(attempts=3)),
            OutputStep(id="out", value="${steps.p.output}"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.f:p": produce}) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, None, run_id="run_nonjson")
        records = await rt.events.read("run_nonjson")

    assert caught.value.cause_code == "invalid_output"
    assert calls == [1]
    assert types(records) == [
        "RunStarted",
        "StepAttemptStarted",
        "StepAttemptFailed",
        "StepFailed",
        "RunFailed",
    ]
    assert ev(records[2]).will_retry is False
    assert ev(records[2]).error_code == "invalid_value"
    assert ev(records[3]).cause_code == "invalid_output"


async def test_a_run_input_that_is_not_json_text_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    called: list[Any] = []
    workflow = Workflow(
        name="bad-input",
        steps=[
            ExecuteStep(id="a", fn="t.f:a", with_={"q": "${input.q}"}),
            OutputStep(id="o", value="${steps.a.output}"),
        ],
    )

    def record(q: Any) -> None:
        called.append(q)

    async with runtime(tmp_path / "data", functions={"t.f:a": record}) as rt:
        for bad in ({"q": math.nan}, {"q": {1}}, {"q": "lone \udc00"}):
            with pytest.raises(InvalidValueError):
                await rt.run(workflow, bad, run_id="run_bad_input")
        assert await rt.events.list_runs() == []
    assert called == []


async def test_resume_without_a_step_function_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    def dies() -> None:
        raise Crash

    workflow = Workflow(
        name="needs-fn",
        steps=[
            ExecuteStep(id="first", fn="t.f:first"),
            ExecuteStep(id="second", fn="t.f:second"),
            OutputStep(id="o", value="${steps.second.output}"),
        ],
    )
    functions = {"t.f:first": lambda: 1, "t.f:second": dies}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(Crash):
            await rt.run(workflow, None, run_id="run_nofn")
        seen = await rt.events.last_seq("run_nofn")
        assert seen > 0

    async with Runtime(
        tmp_path / "data", functions={"t.f:first": lambda: 1}, import_functions=False
    ) as rt:
        with pytest.raises(ConfigError) as caught:
            await rt.resume("run_nofn")
        assert "t.f:second" in str(caught.value)
        assert await rt.events.last_seq("run_nofn") == seen
