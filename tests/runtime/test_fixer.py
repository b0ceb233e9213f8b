"""The fixer role: a step that fails for good asks a model for corrected arguments.

Each consultation is its own durable session (``<path>#fix[<n>]``) whose decision is
recorded; ``retry`` runs the step once more with the corrected ``with``, ``give_up``
(or anything that is not a decision) fails it as it would have failed. The fixer's
model is ``fixer-model`` in ``role_support``; its answer depends on the failed step's id.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import RunStatus
from little_workflow.lwir import (
    ExecuteStep,
    FixerPolicy,
    MapStep,
    OutputStep,
    RetryPolicy,
    ToolStep,
    Workflow,
)
from little_workflow.runtime._agents import FIXER_PREAMBLE
from tests.runtime.role_support import make
from tests.runtime.session_support import cut_log, seq_of
from tests.runtime.support import FakeSleep, ev, of_type, summary, types

ZERO = {"a": 10, "b": 0}
FIXED = {"a": 10, "b": 2}
GIVE_UP = {"action": "give_up", "reason": "b must not be zero"}
FIXER = FixerPolicy(slot="fixer")


def divide_workflow(
    step_id: str = "divide",
    *,
    fixer: FixerPolicy | None = FIXER,
    retry: RetryPolicy | None = None,
) -> Workflow:
    """``divide(a=10, b=0)`` (the zero from the input), with ``fixer``, then its output."""
    return Workflow(
        name="dividing",
        steps=(
            ExecuteStep(
                id=step_id,
                fn="roles:divide",
                with_={"a": 10, "b": "${input.b}"},
                fixer=fixer,
                retry=retry or RetryPolicy(),
            ),
            OutputStep(id="out", value=f"${{steps.{step_id}.output}}"),
        ),
    )


async def test_a_failing_step_is_fixed_and_runs_once_more_with_the_corrected_arguments(
    tmp_path: Path,
) -> None:
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.run(divide_workflow(), {"b": 0}, run_id="run_f")
        log = await rt.events.read("run_f")

    assert result.output == 5.0
    assert calls.arguments() == [ZERO, FIXED]
    assert provider.calls == 1
    assert summary(log) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "divide"),
        ("StepAttemptFailed", "divide"),
        ("harness.session.started", "divide"),  # the step path; its session id below
        ("harness.model.called", "divide#fix[0]"),
        ("harness.model.responded", "divide#fix[0]"),
        ("harness.session.completed", "divide#fix[0]"),
        ("StepAttemptStarted", "divide"),
        ("StepCompleted", "divide"),
        ("RunCompleted", None),
    ]
    (started,) = of_type(log, "harness.session.started")
    assert (started.session_id, started.role, started.step_path) == (
        "divide#fix[0]",
        "fixer",
        "divide",
    )
    assert started.manifest == {"role": "fixer", "fixerModelSlotId": "fixer-model", "tools": []}
    (called,) = of_type(log, "harness.model.called")
    assert (called.slot, called.call_id) == ("fixer", "agent.turns[0].model")
    (completed,) = of_type(log, "harness.session.completed")
    assert completed.output == {"action": "retry", "with": FIXED}
    failed = of_type(log, "StepAttemptFailed")[0]
    assert (failed.attempt, failed.error_code, failed.will_retry) == (1, "ZeroDivisionError", False)
    assert [e.attempt for e in of_type(log, "StepAttemptStarted")] == [1, 2]


async def test_the_fixer_sees_the_step_its_arguments_and_the_error(tmp_path: Path) -> None:
    workflow = divide_workflow(fixer=FixerPolicy(slot="fixer", instructions="b is a divisor."))
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(workflow, {"b": 0}, run_id="run_f")

    (request,) = provider.requests
    assert request.model == "fixer-model"
    assert not request.tools  # a fixer only answers
    system, user = request.messages
    assert (system.role, system.content) == ("system", f"{FIXER_PREAMBLE}\n\nb is a divisor.")
    assert user.role == "user"
    assert json.loads(user.content or "") == {
        "step": {
            "kind": "execute",
            "id": "divide",
            "fn": "roles:divide",
            "with": {"a": 10, "b": "${input.b}"},
            "fixer": {"slot": "fixer", "instructions": "b is a divisor."},
        },
        "arguments": ZERO,
        "error": {"code": "ZeroDivisionError", "message": "division by zero"},
    }


async def test_a_fixer_that_gives_up_fails_the_run_as_without_a_fixer(tmp_path: Path) -> None:
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as fixed:
            await rt.run(divide_workflow("hopeless"), {"b": 0}, run_id="run_f")
        with pytest.raises(RunFailedError) as unfixed:
            await rt.run(divide_workflow("hopeless", fixer=None), {"b": 0}, run_id="run_n")
        with_fixer, without = await rt.get_state("run_f"), await rt.get_state("run_n")
        log = await rt.events.read("run_f")

    assert provider.calls == 1
    assert calls.arguments() == [ZERO, ZERO]  # once in each run
    assert fixed.value.cause_code == unfixed.value.cause_code == "step_failed"
    assert with_fixer.status is without.status is RunStatus.FAILED
    assert with_fixer.failure_cause == without.failure_cause == "step_failed"
    assert with_fixer.failure_message == without.failure_message
    assert with_fixer.failure_message == (
        "step 'hopeless' failed (attempt 1): ZeroDivisionError: division by zero"
    )
    assert of_type(log, "harness.session.completed")[0].output == GIVE_UP
    assert types(log)[-2:] == ["StepFailed", "RunFailed"]
    assert types(log).count("StepAttemptStarted") == 1


async def test_an_answer_that_is_not_a_decision_counts_as_giving_up(tmp_path: Path) -> None:
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(divide_workflow("garbled"), {"b": 0}, run_id="run_f")
        log = await rt.events.read("run_f")

    assert caught.value.cause_code == "step_failed"
    assert provider.calls == 1
    assert calls.arguments() == [ZERO]
    (completed,) = of_type(log, "harness.session.completed")
    assert completed.output["action"] == "give_up"
    assert completed.output["reason"].startswith(
        "the fixer's answer was not a decision: the fixer was asked for JSON but answered "
        "'Try dividing by two?'"
    )


async def test_max_fixes_bounds_the_consultations_of_one_step_visit(tmp_path: Path) -> None:
    workflow = divide_workflow("stubborn", fixer=FixerPolicy(slot="fixer", max_fixes=2))
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, {"b": 0}, run_id="run_f")
        log = await rt.events.read("run_f")

    assert provider.calls == 2  # not a third time
    assert calls.arguments() == [ZERO, {"a": 11, "b": 0}, {"a": 12, "b": 0}]
    assert [e.session_id for e in of_type(log, "harness.session.started")] == [
        "stubborn#fix[0]",
        "stubborn#fix[1]",
    ]
    # The second consultation sees the arguments of the attempt that failed.
    second = json.loads(provider.requests[1].messages[-1].content or "")
    assert second["arguments"] == {"a": 11, "b": 0}
    assert caught.value.cause_code == "step_failed"
    assert "(attempt 3)" in caught.value.message


async def test_the_retry_policy_runs_before_the_fixer_is_consulted(tmp_path: Path) -> None:
    sleep = FakeSleep()
    workflow = divide_workflow(retry=RetryPolicy(attempts=3, backoff=0.5))
    rt, provider, _, calls = make(tmp_path / "data", sleep=sleep)
    async with rt:
        result = await rt.run(workflow, {"b": 0}, run_id="run_f")
        log = await rt.events.read("run_f")

    assert result.output == 5.0
    assert calls.arguments() == [ZERO, ZERO, ZERO, FIXED]
    assert sleep.delays == [0.5, 1.0]
    assert provider.calls == 1
    assert [(e.attempt, e.will_retry) for e in of_type(log, "StepAttemptFailed")] == [
        (1, True),
        (2, True),
        (3, False),
    ]
    # Consulted once, after the last failure the policy allowed.
    order = types(log)
    last_failure = max(i for i, name in enumerate(order) if name == "StepAttemptFailed")
    assert order.index("harness.session.started") == last_failure + 1


async def test_a_tool_step_with_a_fixer(tmp_path: Path) -> None:
    workflow = Workflow(
        name="dividing",
        steps=(
            ToolStep(
                id="div",
                tool="div",
                with_={"a": 10, "b": "${input.b}"},
                fixer=FixerPolicy(slot="fixer"),
            ),
            OutputStep(id="out", value="${steps.div.output}"),
        ),
    )
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.run(workflow, {"b": 0}, run_id="run_t")
        log = await rt.events.read("run_t")

    assert result.output == 5.0
    assert calls.calls == [("div", ZERO), ("div", FIXED)]
    assert provider.calls == 1
    tool_events = [(r.type, ev(r).call_id) for r in log if r.type.startswith("harness.tool_call.")]
    assert tool_events == [
        ("harness.tool_call.started", "attempt[1]"),
        ("harness.tool_call.failed", "attempt[1]"),
        ("harness.tool_call.started", "attempt[2]"),
        ("harness.tool_call.succeeded", "attempt[2]"),
    ]
    assert [e.arguments for e in of_type(log, "harness.tool_call.started")] == [ZERO, FIXED]
    prompt = json.loads(provider.requests[0].messages[-1].content or "")
    assert prompt["step"]["kind"] == "tool"
    assert prompt["error"]["code"] == "ZeroDivisionError"
    (started,) = of_type(log, "harness.session.started")
    assert (started.session_id, started.role) == ("div#fix[0]", "fixer")


async def test_a_resume_after_the_fixers_decision_does_not_consult_it_again(
    tmp_path: Path,
) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(divide_workflow(), {"b": 0}, run_id="ref")
        full = await rt.events.read("ref")
    cut = seq_of(full, "harness.session.completed")

    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == 5.0
    assert provider.calls == 0
    assert calls.arguments() == [FIXED]
    assert types(log).count("harness.session.started") == 1
    assert types(log).count("harness.session.completed") == 1
    assert [e.attempt for e in of_type(log, "StepAttemptStarted")] == [1, 2]


async def test_a_resume_inside_the_fixers_session_replays_its_committed_answer(
    tmp_path: Path,
) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(divide_workflow(), {"b": 0}, run_id="ref")
        full = await rt.events.read("ref")
    cut = seq_of(full, "harness.model.responded")  # the decision is not recorded yet

    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == 5.0
    assert provider.calls == 0  # the fixer's answer was committed
    # The failed attempt is not sealed (no decision, no StepFailed): it runs once more
    # before the consultation goes on, like any step failure cut short by a crash.
    assert calls.arguments() == [ZERO, FIXED]
    assert [e.session_id for e in of_type(log, "harness.session.started")] == ["divide#fix[0]"]
    assert types(log).count("harness.session.completed") == 1


async def test_a_fixer_in_a_map_branch_whose_key_holds_a_hash(tmp_path: Path) -> None:
    # The session id is the step path plus "#fix[0]"; only that suffix names the fixer.
    workflow = Workflow(
        name="dividing",
        steps=(
            MapStep(
                id="m",
                items="${input.items}",
                key="k",
                body=(
                    ExecuteStep(
                        id="divide",
                        fn="roles:divide",
                        with_={"a": 10, "b": "${item.b}"},
                        fixer=FixerPolicy(slot="fixer"),
                    ),
                ),
            ),
            OutputStep(id="out", value="${steps.m.output}"),
        ),
    )
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.run(workflow, {"items": [{"k": "a#b", "b": 0}]}, run_id="run_m")
        log = await rt.events.read("run_m")

    assert result.output == [5.0]
    assert calls.calls == [('m["a#b"].divide', ZERO), ('m["a#b"].divide', FIXED)]
    assert provider.calls == 1
    (started,) = of_type(log, "harness.session.started")
    assert (started.session_id, started.step_path) == ('m["a#b"].divide#fix[0]', 'm["a#b"].divide')
    assert types(log).count("harness.session.completed") == 1


async def test_a_fixer_slot_that_is_not_configured_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    rt, provider, _, calls = make(tmp_path / "data", drop="fixer")
    async with rt:
        with pytest.raises(ConfigError) as caught:
            await rt.run(divide_workflow(), {"b": 0}, run_id="run_f")
        assert await rt.events.read("run_f") == []
        assert await rt.events.list_runs() == []

    assert caught.value.code == "unknown_model_slot"
    assert caught.value.message == (
        "no model slot 'fixer' is configured (configured: judge, planner); configure it with "
        "Runtime(model_slots={'fixer': ModelSlot(provider=..., model=...)}), or on the command "
        "line with --setup module:attr naming a RuntimeSetup whose model_slots has it"
    )
    assert provider.calls == 0
    assert calls.calls == []
