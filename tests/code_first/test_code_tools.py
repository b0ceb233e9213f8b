"""``ctx.tool``: a registered tool called as a step, the code-first form of LWIR's
``kind: tool`` (one mechanism: the same records, retries, outbox and reconcile).

Each tool appends a line to a file (``FAR_END``) for every request it gets: a count kept
outside the process. ``Crash`` (a ``SimulatedKill``: nothing is recorded for it) stands
for a kill in the middle of a call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_workflow import (
    Happened,
    RetryPolicy,
    RunFailedError,
    Runtime,
    StepContext,
    StepFailedError,
    WorkflowContext,
    parse_workflow,
    side_effect,
    step,
    tool,
    workflow,
)
from little_workflow.events import RecordedEvent, StepCompleted
from little_workflow.harness import ModelSlot
from little_workflow.harness.models import scripted
from little_workflow.lwir import FixerPolicy
from tests.runtime.role_support import make as make_roles
from tests.runtime.session_support import cut_log, seq_of
from tests.runtime.support import Crash, FakeSleep

STATE: dict[str, Any] = {}


def _far_end() -> Path:
    path = STATE["far_end"]
    assert isinstance(path, Path)
    return path


def _asked(line: str) -> None:
    with _far_end().open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _requests() -> list[str]:
    path = _far_end()
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture(autouse=True)
def _reset(tmp_path: Path) -> None:
    STATE.clear()
    STATE["far_end"] = tmp_path / "far_end"


@tool
def lookup(name: str, ctx: StepContext) -> dict[str, Any]:
    """Look a person up.

    Args:
        name: Who.
    """
    _asked(f"lookup {name} {ctx.step_path} {ctx.attempt}")
    if STATE.get("fail_first") and ctx.attempt == 1:
        raise TimeoutError(f"the directory timed out on {name}")
    return {"name": name, "years": len(name)}


def _paid(key: str) -> Happened | None:
    # The far end's own record of the request: did it get there, and what did it say?
    for line in _requests():
        far_end, request, answer = line.split(" ", 2)
        if (far_end, request) == ("pay", key):
            return Happened(answer)
    return None


@tool
@side_effect(reconcile=_paid)
def pay(amount: int, ctx: StepContext) -> str:
    """Pay an amount.

    Args:
        amount: How much.
    """
    _asked(f"pay {ctx.idempotency_key} paid-{amount}")
    if STATE.get("crash_in_pay"):
        raise Crash()
    return f"paid-{amount}"


def make_runtime(tmp_path: Path) -> Runtime:
    return Runtime(tmp_path / "data", sleep=FakeSleep(), tools=[lookup, pay])


@workflow
async def people(ctx: WorkflowContext, names: list[str]) -> list[Any]:
    found = [await ctx.tool(lookup, {"name": name}) for name in names]
    return [*found, await ctx.tool("pay", {"amount": len(names)})]


def _completed(records: list[RecordedEvent]) -> list[tuple[str, str, Any]]:
    return [
        (r.event.step_path, r.event.kind, r.event.output)
        for r in records
        if isinstance(r.event, StepCompleted)
    ]


def _tool_events(records: list[RecordedEvent], path: str) -> list[str]:
    """The types of the events of the step at ``path`` and of its tool calls, in log order."""
    return [
        r.type
        for r in records
        if path in (getattr(r.event, "step_path", None), getattr(r.event, "session_id", None))
    ]


async def test_a_tool_call_is_a_tool_step_with_lwir_paths_and_records(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        result = await rt.run(people, {"names": ["Ada", "Bo"]}, run_id="run_tools")
        records = await rt.events.read("run_tools")
    assert result.output == [{"name": "Ada", "years": 3}, {"name": "Bo", "years": 2}, "paid-2"]
    assert _completed(records) == [
        ("lookup", "tool", {"name": "Ada", "years": 3}),
        ("lookup.visit[1]", "tool", {"name": "Bo", "years": 2}),
        ("pay", "tool", "paid-2"),
    ]
    identities = [r.event.identity for r in records if isinstance(r.event, StepCompleted)]
    assert identities == [
        "little_workflow:tool/lookup@0",
        "little_workflow:tool/lookup@1",
        "little_workflow:tool/pay@2",
    ]
    # The records of LWIR's tool step, to the letter (see the comparison below).
    assert _tool_events(records, "lookup") == [
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.succeeded",
        "StepCompleted",
    ]


async def test_the_records_are_those_of_an_lwir_tool_step(tmp_path: Path) -> None:
    document = parse_workflow(
        {
            "lwir": 1,
            "name": "people",
            "steps": [
                {"id": "lookup", "kind": "tool", "tool": "lookup", "with": {"name": "Ada"}},
                {"id": "pay", "kind": "tool", "tool": "pay", "with": {"amount": 1}},
                {"id": "done", "kind": "output", "value": "${steps.pay.output}"},
            ],
        }
    )

    @workflow
    async def same(ctx: WorkflowContext) -> Any:
        await ctx.tool(lookup, {"name": "Ada"})
        return await ctx.tool(pay, {"amount": 1})

    async with make_runtime(tmp_path) as rt:
        await rt.run(document, None, run_id="run_lwir")
        await rt.run(same, None, run_id="run_code")
        lwir = await rt.events.read("run_lwir")
        code = await rt.events.read("run_code")

    def shape(records: list[RecordedEvent]) -> list[tuple[str, str | None, Any]]:
        return [
            (
                r.type,
                getattr(r.event, "step_path", None) or getattr(r.event, "session_id", None),
                getattr(r.event, "arguments", getattr(r.event, "result", None)),
            )
            for r in records
            if not r.type.startswith("Run")
        ]

    assert shape(code) == shape(lwir)
    assert [p.split()[0] for p in _requests()] == ["lookup", "pay", "lookup", "pay"]


async def test_a_tool_retries_under_its_policy_and_a_failure_is_a_value(tmp_path: Path) -> None:
    STATE["fail_first"] = True

    @workflow
    async def flaky(ctx: WorkflowContext) -> dict[str, Any]:
        once = None
        try:
            once = await ctx.tool(lookup, {"name": "Ada"}, name="once")
        except StepFailedError as error:
            failed = {"path": error.path, "cause": error.cause_code}
        twice = await ctx.tool(lookup, {"name": "Ada"}, retry=RetryPolicy(attempts=2))
        return {"once": once, "failed": failed, "twice": twice}

    async with make_runtime(tmp_path) as rt:
        result = await rt.run(flaky, None, run_id="run_flaky")
        again = await rt.resume("run_flaky")
        records = await rt.events.read("run_flaky")
    assert result.output == {
        "once": None,
        "failed": {"path": "once", "cause": "step_failed"},
        "twice": {"name": "Ada", "years": 3},
    }
    assert again.output == result.output
    # once: one attempt, failed for good; lookup: failed, then retried. A resume of the
    # finished run asked nothing again.
    assert _requests() == ["lookup Ada once 1", "lookup Ada lookup 1", "lookup Ada lookup 2"]
    assert _tool_events(records, "lookup") == [
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.failed",
        "StepAttemptFailed",
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.succeeded",
        "StepCompleted",
    ]


async def test_a_side_effecting_tool_cut_by_a_crash_is_reconciled_not_asked_again(
    tmp_path: Path,
) -> None:
    STATE["crash_in_pay"] = True
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(Crash):
            await rt.run(people, {"names": ["Ada"]}, run_id="run_pay")
        del STATE["crash_in_pay"]
        result = await rt.resume("run_pay")
        records = await rt.events.read("run_pay")
    assert result.output == [{"name": "Ada", "years": 3}, "paid-1"]
    # The far end was asked once: the resume asked the hook, which found the payment.
    assert _requests() == ["lookup Ada lookup 1", "pay run_pay/pay paid-1"]
    assert "SideEffectIntended" in _tool_events(records, "pay")
    assert "SideEffectReconciled" in _tool_events(records, "pay")
    assert result.replayed_steps == 1


async def test_a_tool_the_runtime_does_not_have_fails_the_step_and_records_nothing(
    tmp_path: Path,
) -> None:
    @workflow
    async def missing(ctx: WorkflowContext) -> str:
        try:
            await ctx.tool("nowhere", {"x": 1})
        except StepFailedError as error:
            return f"{error.cause_code} at {error.path}"
        return "called"

    async with make_runtime(tmp_path) as rt:
        result = await rt.run(missing, None, run_id="run_missing")
        records = await rt.events.read("run_missing")
    assert result.output == "runtime_config_error at nowhere"
    assert [r.type for r in records] == ["RunStarted", "RunCompleted"]


async def test_tool_arguments_that_are_not_json_are_refused_in_the_body(tmp_path: Path) -> None:
    @workflow
    async def bad(ctx: WorkflowContext) -> str:
        await ctx.tool(lookup, {"name": object()})
        return "called"

    async with make_runtime(tmp_path) as rt:
        with pytest.raises(RunFailedError, match=r"arguments of ctx\.tool"):
            await rt.run(bad, None, run_id="run_bad")
    assert _requests() == []


# --- a fixer: LWIR's, on the same core --------------------------------------------------


@workflow
async def dividing(ctx: WorkflowContext, b: int) -> Any:
    return await ctx.tool("div", {"a": 10, "b": b}, fixer=FixerPolicy(slot="fixer"))


async def test_a_tool_with_a_fixer_is_fixed_as_an_lwir_tool_step_is(tmp_path: Path) -> None:
    rt, provider, _, calls = make_roles(tmp_path / "data")
    async with rt:
        result = await rt.run(dividing, {"b": 0}, run_id="run_fix")
        log = await rt.events.read("run_fix")
    assert result.output == 5.0
    # As tests/runtime/test_fixer.py's tool step: the failed call, one consultation, the
    # call again with the fixer's arguments.
    assert calls.calls == [("div", {"a": 10, "b": 0}), ("div", {"a": 10, "b": 2})]
    assert provider.calls == 1
    assert [r.type for r in log if r.type != "harness.model.called"] == [
        "RunStarted",
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.failed",
        "StepAttemptFailed",
        "harness.session.started",
        "harness.model.responded",
        "harness.session.completed",
        "StepAttemptStarted",
        "harness.tool_call.started",
        "harness.tool_call.succeeded",
        "StepCompleted",
        "RunCompleted",
    ]
    prompt = json.loads(provider.requests[0].messages[-1].content or "")
    assert prompt["step"] == {"kind": "tool", "id": "div", "tool": "div", "with": {"a": 10, "b": 0},
                              "fixer": {"slot": "fixer"}}  # fmt: skip


async def test_a_resume_after_the_fixers_decision_does_not_ask_it_again(tmp_path: Path) -> None:
    rt, _, _, _ = make_roles(tmp_path / "data")
    async with rt:
        await rt.run(dividing, {"b": 0}, run_id="ref")
        full = await rt.events.read("ref")
    rt, provider, _, calls = make_roles(tmp_path / "data")
    async with rt:
        # The log as a kill right after the fixer's decision leaves it.
        await cut_log(rt, "ref", "run_cut", seq_of(full, "harness.session.completed"))
        result = await rt.resume("run_cut")
    assert result.output == 5.0
    assert provider.calls == 0
    assert calls.calls == [("div", {"a": 10, "b": 2})]


# --- docs/code-first.md, "Fixers in code": a step's fixer is an except and a call -------


@step
def divide(a: float, b: float) -> float:
    _asked(f"divide {a} {b}")
    return a / b


@workflow
async def divided(ctx: WorkflowContext, a: float, b: float) -> float:
    try:
        return await ctx.step(divide, a, b)
    except StepFailedError as error:
        fix = await ctx.agent(
            "fixer",
            name="fix",
            output="json",
            prompt=f"divide({a}, {b}) failed: {error.message}. Answer a JSON object "
            "with the arguments to try instead, a and b.",
        )
        assert isinstance(fix, dict)
        new_a, new_b = fix["a"], fix["b"]
        assert isinstance(new_a, int | float)
        assert isinstance(new_b, int | float)
        return await ctx.step(divide, new_a, new_b)  # divide.visit[1]


async def test_the_documented_fixer_in_code_works_and_replays(tmp_path: Path) -> None:
    provider = scripted(lambda request: '{"a": 10, "b": 2}')
    slots = {"fixer": ModelSlot(provider=provider, model="fixer-model")}
    async with Runtime(tmp_path / "data", sleep=FakeSleep(), model_slots=slots) as rt:
        result = await rt.run(divided, {"a": 10, "b": 0}, run_id="run_divided")
        again = await rt.resume("run_divided")
        records = await rt.events.read("run_divided")
    assert result.output == again.output == 5.0
    assert _requests() == ["divide 10 0", "divide 10 2"]
    assert provider.calls == 1
    assert [(path, kind) for path, kind, _ in _completed(records)] == [
        ("fix", "agent"),
        ("divide.visit[1]", "execute"),
    ]


@workflow
async def dividing_then_stamped(ctx: WorkflowContext, b: int) -> Any:
    divided = await ctx.tool("div", {"a": 10, "b": b}, fixer=FixerPolicy(slot="fixer"))
    return [divided, await ctx.random() < 1]


async def test_a_fork_keeps_a_fixed_tool_call_with_its_fixer_session(tmp_path: Path) -> None:
    rt, provider, _, calls = make_roles(tmp_path / "data")
    async with rt:
        await rt.run(dividing_then_stamped, {"b": 0}, run_id="src")
        fork = await rt.fork("src", at="random", run_id="fork")
        log = await rt.events.read("fork")
    assert fork.output == [5.0, True]
    assert provider.calls == 1  # the source's consultation only
    assert len(calls.calls) == 2  # the source's two calls only
    # The consultation is copied whole: its session, the model's answer, the decision.
    fixer = [r.type for r in log if getattr(r.event, "session_id", None) == "div#fix[0]"]
    assert fixer == [
        "harness.session.started",
        "harness.model.called",
        "harness.model.responded",
        "harness.session.completed",
    ]
