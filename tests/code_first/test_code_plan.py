"""``ctx.plan``: ``Runtime.run_goal`` as one durable call of a code-first body, a sub-run
of run_goal's own LWIR workflow (a planner session, then a sub-run of its plan).

The scripted planner (``role_support``) answers the goal ``score`` with an invalid
workflow, then, told why, with one that calls the ``score`` tool; the provider and the
tools count their calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow import StepFailedError, WorkflowContext, workflow
from little_workflow.events import StepCompleted, SubRunStarted
from tests.runtime.role_support import make
from tests.runtime.support import Crash


@workflow
async def planned(ctx: WorkflowContext, years: int) -> dict[str, Any]:
    result = await ctx.plan("score", {"years": years}, slot="planner")
    return {"planned": result}


async def test_plan_runs_the_planned_workflow_as_run_goal_does(tmp_path: Path) -> None:
    rt, provider, tools, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(planned, {"years": 4}, run_id="run_plan")
        log = await rt.events.read("run_plan")
        (goal_run,) = await rt.events.list_runs(parent_run_id="run_plan")
        goal_log = await rt.events.read(goal_run.run_id)
        (plan_run,) = await rt.events.list_runs(parent_run_id=goal_run.run_id)
        plan_started = (await rt.events.read(plan_run.run_id, limit=1))[0].event
        reference = await rt.run_goal("score", {"years": 4}, planner_slot="planner")
    assert result.output == {"planned": reference.output} == {"planned": 40}
    # Two model turns (an invalid plan, then a valid one) and one tool call, each time.
    assert provider.calls == 4
    assert tools.calls == [("score", 4), ("score", 4)]
    (started,) = [r.event for r in log if isinstance(r.event, SubRunStarted)]
    assert (started.step_path, started.workflow_name) == ("plan", "goal")
    completed = [
        (r.event.step_path, r.event.kind) for r in log if isinstance(r.event, StepCompleted)
    ]
    assert completed == [("plan", "workflow")]
    # The sub-run is run_goal's workflow, to the letter: the planner, then the plan.
    goal_steps = [r.event.step_path for r in goal_log if isinstance(r.event, StepCompleted)]
    assert goal_steps == ["plan", "run"]
    assert plan_started.workflow_name == "planned"  # type: ignore[attr-defined]


async def test_a_resume_never_plans_again(tmp_path: Path) -> None:
    rt, _, tools, _ = make(tmp_path / "data")
    tools.crash_at = "score"  # a kill inside the planned workflow's tool call
    async with rt:
        with pytest.raises(Crash):
            await rt.run(planned, {"years": 4}, run_id="run_plan")
    rt, provider, tools, _ = make(tmp_path / "data")  # as after a restart
    async with rt:
        result = await rt.resume("run_plan")
    assert result.output == {"planned": 40}
    assert provider.calls == 0  # the plan was committed: the planner is not asked again
    assert tools.calls == [("score", 4)]


@workflow
async def hopeless(ctx: WorkflowContext) -> str:
    try:
        await ctx.plan("anything", slot="planner", max_turns=1)
    except StepFailedError as error:
        return f"{error.cause_code} at {error.path}"
    return "planned"


async def test_a_plan_that_fails_is_a_step_failure_the_body_may_handle(tmp_path: Path) -> None:
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(hopeless, None, run_id="run_hopeless")
    assert result.output == "sub_run_failed at plan"
    assert provider.calls == 1
