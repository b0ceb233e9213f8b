"""The code-first front end's agent sessions beyond a worker's: an agent decision
(``ctx.decide``), the workflows an orchestrator may start (``ctx.agent(workflows=)``) and
a planned workflow (``ctx.plan``).

All are LWIR's (``_agents``, ``Runtime.run_goal``'s workflow), fed the body's own strings
instead of templates.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, InvalidValueError, ToolArgumentsError
from little_workflow.events import HarnessSessionCompleted
from little_workflow.lwir import DecisionStep, StepBase, Workflow
from little_workflow.runtime._agents import SessionRun, Startable, decide_with_agent
from little_workflow.runtime._code_api import WorkflowSpec
from little_workflow.runtime._core import DurableRun, StepUnit
from little_workflow.runtime._lwir_steps import chosen_route, config_failure, run_sub_workflow

__all__ = ["as_given", "decide_once", "plan_and_run", "startable"]


def as_given(value: JsonValue, _step: StepBase, _path: str, _field: str) -> JsonValue:
    """A code-first prompt or instructions: the body's own string, not a template."""
    return value


async def decide_once(
    run: DurableRun, sessions: SessionRun, step: DecisionStep, unit: StepUnit
) -> tuple[str, JsonValue]:
    """Run an agent decision's attempts and commit it with its session's completion; its
    route and output (``StepFailure`` if it fails for good, ``unknown_route`` included)."""
    site = unit.site

    def attempt(_attempt: int, _arguments: object) -> Awaitable[JsonValue]:
        return decide_with_agent(sessions, step, site, as_given)

    answer, _ = await run.attempts(unit, attempt)
    route, output = chosen_route(step, site.text, answer)
    await run.append(
        [
            HarnessSessionCompleted(session_id=site.text, output=answer),
            run.completed(unit, output, route),
        ],
        sync=True,
    )
    run.remember(site, output, route)
    return route, output


def startable(
    spec: WorkflowSpec,
    body: Callable[..., Any],
    bind: Callable[[Callable[..., Any], object], object],
    start: Callable[[Callable[..., Any], JsonValue, str], Awaitable[JsonValue]],
) -> Startable:
    """``body`` as a workflow an orchestrator may start: ``bind(body, input)`` checks the
    input (``InvalidValueError``), ``start(body, input, sub_run_id)`` runs the sub-run."""

    async def run(workflow_input: dict[str, JsonValue] | None, sub_run_id: str) -> JsonValue:
        try:
            bind(body, workflow_input)
        except InvalidValueError as exc:
            # The model chose the input: it hears what is wrong and may try again.
            raise ToolArgumentsError(str(exc)) from exc
        return await start(body, workflow_input, sub_run_id)

    doc = (inspect.getdoc(body) or "").strip().splitlines()
    return Startable(doc[0] if doc else "(no description)", run)


async def plan_and_run(
    sessions: SessionRun, unit: StepUnit, goal_workflow: Workflow, input: JsonValue
) -> JsonValue:
    """``ctx.plan``: ``Runtime.run_goal``'s LWIR workflow (a planner session, then a
    sub-run of the workflow it planned, untrusted) as a sub-run at ``unit``'s path; its
    output (``StepFailure`` if it cannot start or fails)."""
    host = sessions.host
    try:
        version = await host.catalog.store(host.catalog.resolve(goal_workflow))
        host.check_callables(version)
    except ConfigError as exc:
        raise config_failure(exc, path=unit.site.text, step_id=unit.step_id) from exc
    return await run_sub_workflow(sessions.run, sessions.sub_runner, unit, version, input)
