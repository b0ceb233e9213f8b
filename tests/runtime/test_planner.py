"""The planner role: a session whose answer is an LWIR workflow, checked after every turn.

An invalid answer goes back to the model with the validation errors; a valid one ends
the session with the canonical workflow as its output. ``Runtime.run_goal`` plans and
runs the plan as a pinned sub-run in one durable run; ``Runtime.plan`` returns the plan.
Calls are counted by the scripted provider (``role_support``) and the tools.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_workflow.errors import RunFailedError
from little_workflow.events import RunStatus
from little_workflow.lwir import (
    AgentStep,
    ExecuteStep,
    OutputStep,
    RetryPolicy,
    Workflow,
    canonical_definition,
    definition_hash,
    parse_workflow,
)
from little_workflow.runtime._planner import PLANNER_PREAMBLE
from tests.runtime.role_support import INVALID_PLAN, LOOKED_UP_PLAN, VALID_PLAN, make
from tests.runtime.session_support import cut_log, seq_of
from tests.runtime.support import FakeSleep, ev, of_type, types

PLAN = canonical_definition(parse_workflow(VALID_PLAN))
FEEDBACK = (
    "That is not a valid workflow: invalid LWIR workflow in your workflow (1 problem):\n"
    "  steps[0].tool: required field is missing\n"
    "Answer again with the corrected workflow as one JSON object."
)


def planner_workflow(
    goal: str,
    *,
    max_turns: int = 4,
    tools: tuple[str, ...] = (),
    retry: RetryPolicy | None = None,
) -> Workflow:
    """One planner step for ``goal``, its plan as the run's output."""
    return Workflow(
        name="planning",
        steps=(
            AgentStep(
                id="plan",
                role="planner",
                slot="planner",
                prompt=f"Goal: {goal}",
                tools=tools,
                max_turns=max_turns,
                retry=retry or RetryPolicy(),
            ),
            OutputStep(id="out", value="${steps.plan.output}"),
        ),
    )


# --- the planner session --------------------------------------------------------------


async def test_an_invalid_plan_goes_back_with_its_errors_and_a_valid_one_ends_the_session(
    tmp_path: Path,
) -> None:
    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(planner_workflow("score"), run_id="run_p")
        log = await rt.events.read("run_p")

    assert provider.calls == 2
    first, second = provider.requests
    assert first.messages[-1].content == "Goal: score"
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "user"]
    assert json.loads(second.messages[2].content or "") == INVALID_PLAN
    assert second.messages[-1].content == FEEDBACK
    assert not second.tools  # a planner without tools is offered none

    assert result.output == PLAN
    (started,) = of_type(log, "harness.session.started")
    assert (started.session_id, started.role, started.step_path) == ("plan", "planner", "plan")
    assert started.manifest == {
        "role": "planner",
        "plannerModelSlotId": "planner-model",
        "tools": [],
    }
    (completed,) = of_type(log, "harness.session.completed")
    assert completed.output == PLAN
    assert of_type(log, "StepCompleted")[0].output == PLAN
    assert types(log).count("harness.model.responded") == 2
    assert tools.calls == []  # a plan is only a plan: nothing in it ran


async def test_a_fenced_json_plan_is_accepted(tmp_path: Path) -> None:
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(planner_workflow("fenced"), run_id="run_p")
    assert provider.calls == 1
    assert result.output == PLAN


async def test_a_planner_without_a_valid_workflow_in_max_turns_fails_the_step(
    tmp_path: Path,
) -> None:
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(planner_workflow("never", max_turns=3), run_id="run_p")
        state = await rt.get_state("run_p")
        log = await rt.events.read("run_p")

    assert provider.calls == 3
    # Each invalid answer was sent back once, with why it was refused.
    assert [len(request.messages) for request in provider.requests] == [2, 4, 6]
    assert provider.requests[1].messages[-1].content == (
        "That is not a valid workflow: the planner was asked for JSON but answered "
        "'I cannot plan that.': Expecting value: line 1 column 1 (char 0)\n"
        "Answer again with the corrected workflow as one JSON object."
    )
    assert caught.value.cause_code == "step_failed"
    assert state.status is RunStatus.FAILED
    message = state.failure_message or ""
    assert message.startswith("step 'plan' failed (attempt 1): planner_gave_up: ")
    assert "the planner gave no valid workflow in its turns" in message
    assert "planner_gave_up" in caught.value.message
    (step_failed,) = of_type(log, "StepFailed")
    assert (step_failed.step_path, step_failed.cause_code) == ("plan", "step_failed")
    assert "harness.session.completed" not in types(log)


async def test_a_planner_that_gave_up_is_not_retried(tmp_path: Path) -> None:
    # A retry would replay the committed turns and give up again, after a backoff.
    workflow = planner_workflow("never", max_turns=2, retry=RetryPolicy(attempts=3))
    sleep = FakeSleep()
    rt, provider, _, _ = make(tmp_path / "data", sleep=sleep)
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, run_id="run_p")
        log = await rt.events.read("run_p")
    assert caught.value.cause_code == "step_failed"
    assert provider.calls == 2
    assert [(e.attempt, e.error_code, e.will_retry) for e in of_type(log, "StepAttemptFailed")] == [
        (1, "planner_gave_up", False)
    ]
    assert sleep.delays == []


async def test_a_planner_may_call_tools_before_it_answers(tmp_path: Path) -> None:
    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(planner_workflow("look", tools=("lookup",)), run_id="run_p")
        log = await rt.events.read("run_p")

    assert tools.calls == [("lookup", "Ada")]
    assert provider.calls == 2
    assert [spec.name for spec in provider.requests[0].tools] == ["lookup"]
    # A turn that asks for tools is not an answer: no feedback, the tool's result instead.
    last = provider.requests[1].messages[-1]
    assert (last.role, last.content) == ("tool", '{"name": "Ada", "years": 7}')
    assert result.output == canonical_definition(parse_workflow(LOOKED_UP_PLAN))
    (succeeded,) = of_type(log, "harness.tool_call.succeeded")
    assert (succeeded.session_id, succeeded.call_id) == ("plan", "planner.turns[0].tools[c_look]")
    started = of_type(log, "harness.session.started")[0]
    assert started.manifest["tools"] == [{"name": "lookup", "schemaHash": tools.lookup.schema_hash}]


async def test_the_planner_system_prompt_lists_the_tools_workflows_and_slots(
    tmp_path: Path,
) -> None:
    registered = Workflow(
        name="echo-it",
        description="Echoes its value.",
        steps=(
            ExecuteStep(id="e", fn="roles:echo", with_={"value": "${input.value}"}),
            OutputStep(id="out", value="${steps.e.output}"),
        ),
    )
    undescribed = registered.model_copy(update={"name": "quiet", "description": None})
    rt, provider, _, _ = make(tmp_path / "data", workflows=(registered, undescribed))
    async with rt:
        result = await rt.run_goal(
            "fenced", {"years": 1}, planner_slot="planner", instructions="Be brief."
        )

    assert result.output == 10
    system = provider.requests[0].messages[0]
    assert system.role == "system"
    assert system.content == "\n\n".join(
        [
            PLANNER_PREAMBLE,
            "Tools:\n"
            "- lookup: Look a candidate up by name.\n"
            "- score: Score a candidate's years of experience.\n"
            "- check: Check a candidate's references.\n"
            "- div: Divide a by b.",
            "Registered workflows:\n- echo-it: Echoes its value.\n- quiet: (no description)",
            "Model slots: fixer, judge, planner",
            "Be brief.",
        ]
    )


# --- run_goal and plan ----------------------------------------------------------------


async def test_run_goal_plans_and_runs_the_plan_as_a_pinned_sub_run(tmp_path: Path) -> None:
    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run_goal("score", {"years": 4}, planner_slot="planner", run_id="run_g")
        log = await rt.events.read("run_g")
        (child,) = await rt.events.list_runs(parent_run_id="run_g")
        sub_log = await rt.events.read(child.run_id)

    assert result.status is RunStatus.COMPLETED
    assert result.output == 40
    assert provider.calls == 2
    assert provider.requests[0].messages[-1].content == (
        'Goal: score\nThe workflow\'s input: {"years":4}'
    )
    assert tools.calls == [("score", 4)]  # the input reached the planned workflow

    (sub_started,) = of_type(log, "SubRunStarted")
    assert sub_started.step_path == "run"
    assert sub_started.sub_run_id == child.run_id
    assert sub_started.workflow_name == "planned"
    assert sub_started.definition_hash == definition_hash(parse_workflow(VALID_PLAN))
    child_started = ev(sub_log[0])
    assert child_started.parent_run_id == "run_g"
    assert child_started.parent_step_path == "run"
    assert child_started.input == {"years": 4}
    assert child_started.definition_hash == sub_started.definition_hash
    # Pinned: a fresh runtime finds the planned workflow's version in the store.
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        assert await rt.kv.get(f"workflows/{child_started.workflow_version_id}") is not None
        pinned = await rt.catalog.load(child_started.workflow_version_id)
    assert canonical_definition(pinned.workflow) == PLAN


async def test_plan_returns_the_validated_workflow(tmp_path: Path) -> None:
    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        planned = await rt.plan("score", planner_slot="planner", input_example={"years": 1})
    assert isinstance(planned, Workflow)
    assert planned == parse_workflow(VALID_PLAN)
    assert provider.calls == 2
    assert tools.calls == []


async def test_resume_after_the_planners_first_answer_makes_one_more_request(
    tmp_path: Path,
) -> None:
    rt, reference_provider, _, _ = make(tmp_path / "data")
    async with rt:
        reference = await rt.run_goal("score", {"years": 4}, planner_slot="planner", run_id="ref")
        full = await rt.events.read("ref")
    cut = seq_of(full, "harness.model.responded")

    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == reference.output == 40
    # The first answer was replayed, checked again and sent back: one request, the
    # one the uninterrupted run made second.
    assert provider.calls == 1
    assert provider.requests[0] == reference_provider.requests[1]
    assert provider.requests[0].messages[-1].content == FEEDBACK
    assert types(log).count("harness.model.called") == 2
    assert types(log).count("harness.model.responded") == 2
    assert types(log).count("harness.session.started") == 1
    assert tools.calls == [("score", 4)]
