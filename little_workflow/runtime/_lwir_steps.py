"""Helpers of the LWIR walk: routes, map keys, failures and ``onError``, a tool step's records.

A tool step (``kind: tool``, and the code-first ``ctx.tool``) is one mechanism for both
front ends: ``registered_tool`` finds the tool, ``call_tool`` runs its attempts and commits
its records (``ToolCallRecords``) with its ``StepCompleted``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from little_workflow._failures import error_message, error_names
from little_workflow._tracing import sub_run_attributes, traced
from little_workflow.codec import JsonValue
from little_workflow.errors import (
    ConfigError,
    FunctionNotAllowedError,
    InvalidStepPathError,
    RunFailedError,
)
from little_workflow.events import (
    Event,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    StepAttemptStarted,
    StepFailed,
)
from little_workflow.lwir import DecisionStep, MapStep, StepBase, StepPath, branch_key
from little_workflow.runtime._core import Arguments, DurableRun, StepFailure, StepUnit
from little_workflow.runtime._host import SubRunner
from little_workflow.runtime._workflows import WorkflowVersion

if TYPE_CHECKING:
    from little_workflow._secrets import Secrets
    from little_workflow.harness._harness import Toolset
    from little_workflow.harness._redaction import Redaction
    from little_workflow.harness._tools import Tool

__all__ = [
    "ToolCallRecords",
    "branch_keys",
    "call_tool",
    "chosen_route",
    "config_failure",
    "registered_tool",
    "run_sub_workflow",
    "scope_entry",
]


def chosen_route(step: DecisionStep, path: str, result: JsonValue) -> tuple[str, JsonValue]:
    """A decision's result: a route name, or ``{"route": name, "output": value}``."""
    if isinstance(result, dict) and isinstance(result.get("route"), str):
        route, output = str(result["route"]), result.get("output", result["route"])
    elif isinstance(result, str):
        route, output = result, result
    else:
        raise StepFailure(
            "unknown_route",
            f"decision {path!r} returned {result!r}; return a route name or "
            '{"route": name, "output": value}',
            path=path,
            step_id=step.id,
        )
    if route not in step.routes:
        raise StepFailure(
            "unknown_route",
            f"decision {path!r} chose route {route!r}, which is not one of {sorted(step.routes)}",
            path=path,
            step_id=step.id,
        )
    return route, output


def branch_keys(step: MapStep, path: str, items: JsonValue) -> list[str]:
    """The branch keys of a map's items (unique), or a step failure."""
    if not isinstance(items, list):
        raise StepFailure(
            "map_items_invalid",
            f"map {path!r}: items evaluated to {type(items).__name__}, not a list",
            path=path,
            step_id=step.id,
        )
    try:
        keys = [branch_key(item, key=step.key, index=i) for i, item in enumerate(items)]
    except InvalidStepPathError as exc:
        raise StepFailure(
            "map_invalid_key", f"map {path!r}: {exc}", path=path, step_id=step.id
        ) from exc
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise StepFailure(
                "map_duplicate_key",
                f"map {path!r}: several items have the key {key!r}; branch keys "
                f"(field {step.key!r}) must be unique",
                path=path,
                step_id=step.id,
            )
        seen.add(key)
    return keys


def config_failure(exc: ConfigError, *, path: str, step_id: str) -> StepFailure:
    """A step that cannot run as configured: ``function_not_allowed`` keeps its own code."""
    cause = exc.code if isinstance(exc, FunctionNotAllowedError) else "runtime_config_error"
    return StepFailure(cause, str(exc), path=path, step_id=step_id)


class ToolCallRecords:
    """The ``harness.tool_call.*`` events of a tool step's attempts, redacted as the tool asks.

    The tool's redaction rule (harness/_redaction.py) applies to what a tool step stores,
    as to an agent's call: the tool gets the real arguments, and the steps after it the
    real result while the run lives; after a restart they read the stored, redacted form
    (docs/harness.md).
    """

    def __init__(
        self, path: str, tool: str, redaction: Redaction | None, *, sink: Secrets | None = None
    ) -> None:
        self.path = path
        self.tool = tool
        self.redactor = None
        if redaction is not None and not redaction.is_empty:
            from little_workflow.harness._redaction import Redactor

            # The run's secrets learn what this step redacts: its writer scrubs them from
            # the step's other events (a failed attempt's message quoting an argument).
            self.redactor = Redactor({tool: redaction}, sink=sink)

    @staticmethod
    def call_id(attempt: int) -> str:
        """The call id of an attempt."""
        return f"attempt[{attempt}]"

    def started(self, attempt: int, current: Arguments) -> list[Event]:
        """The attempt's ``harness.tool_call.started``."""
        stored: JsonValue = current
        if self.redactor is not None:
            stored = self.redactor.arguments(self.tool, current)
        return [
            HarnessToolCallStarted(
                session_id=self.path,
                call_id=self.call_id(attempt),
                tool_name=self.tool,
                arguments=stored if isinstance(stored, dict) else current,
            )
        ]

    def failed(self, attempt: int, exc: BaseException) -> list[Event]:
        """The attempt's ``harness.tool_call.failed``."""
        message: JsonValue = error_message(exc)
        if self.redactor is not None:
            message = self.redactor.scrub(message)
        return [
            HarnessToolCallFailed(
                session_id=self.path,
                call_id=self.call_id(attempt),
                error_code=error_names(exc)[0],
                message=str(message),
            )
        ]

    def succeeded(self, attempt: int, result: JsonValue) -> tuple[Event, JsonValue]:
        """The ``harness.tool_call.succeeded`` of ``result``, and ``result`` as stored."""
        stored = result if self.redactor is None else self.redactor.result(self.tool, result)
        event = HarnessToolCallSucceeded(
            session_id=self.path, call_id=self.call_id(attempt), result=stored
        )
        return event, stored


def registered_tool(toolset: Toolset, name: str, *, path: str, step_id: str) -> Tool[..., Any]:
    """The registered tool ``name``; a step failure (``runtime_config_error``) if there is none."""
    if name not in toolset.registry:
        raise StepFailure(
            "runtime_config_error",
            f"step {path!r} calls tool {name!r}, which is not registered",
            path=path,
            step_id=step_id,
        )
    return toolset.get(name)


async def call_tool(
    run: DurableRun, unit: StepUnit, tool: Tool[..., Any], arguments: dict[str, JsonValue]
) -> JsonValue:
    """A tool step's attempts under ``unit`` (its retry policy, outbox and fixer), each with
    its ``harness.tool_call.*`` records; commit the result with ``StepCompleted``.

    Returns the tool's result as it came; the log holds it redacted as the tool asks, and
    that is what a replay reads (``ToolCallRecords``).
    """
    records = ToolCallRecords(unit.site.text, tool.name, tool.redaction, sink=run.writer.secrets)

    def call(attempt: int, current: Arguments) -> Awaitable[Any]:
        return tool.invoke(current or {}, ctx=run.context(unit, attempt))

    result, attempt = await run.attempts(
        unit, call, arguments=arguments, started=records.started, failed=records.failed
    )
    succeeded, stored = records.succeeded(attempt, result)
    await run.append([succeeded, run.completed(unit, stored)], sync=True)
    return result


async def run_sub_workflow(
    run: DurableRun,
    sub_runner: SubRunner,
    unit: StepUnit,
    child: WorkflowVersion,
    arguments: JsonValue,
) -> JsonValue:
    """A ``workflow`` step's sub-run of ``child`` with ``arguments``: its id committed
    before it starts (the recorded one on a resume), its output committed with the step's
    ``StepCompleted``; ``sub_run_failed`` if it failed."""
    path = unit.site.text
    sub_run_id = await run.start_sub_run(unit, child.name, child.definition_hash)
    try:
        with traced(run.trace, "sub_run", path, sub_run_attributes(sub_run_id, child.name)):
            output = await sub_runner.run_child(
                child,
                arguments,
                run_id=sub_run_id,
                parent_run_id=run.run_id,
                parent_step_path=path,
                retry_failed=run.retrying,
            )
    except RunFailedError as exc:
        raise StepFailure(
            "sub_run_failed",
            f"sub-run {sub_run_id!r} of step {path!r} failed ({exc.cause_code}): {exc}",
            path=path,
            step_id=unit.step_id,
        ) from exc
    await run.append([run.completed(unit, output)], sync=True)
    return output


async def scope_entry(
    run: DurableRun,
    run_step: Callable[
        [Any, StepPath, int | None, dict[str, Any]], Awaitable[tuple[JsonValue, str | None]]
    ],
    step: StepBase,
    at: StepPath,
    scope: dict[str, Any],
) -> tuple[JsonValue, str | None, str | None]:
    """Run ``step`` at ``at`` (``run_step``) and record it in ``scope``: its output, route,
    and the ``onError`` target to go on at if it failed for good (``None`` otherwise).

    A step with ``onError`` that fails for good gets ``StepFailed`` committed once
    (never in a replay: a walk that finds it in the log raises it again without running
    the step) and ``error`` in its entry: ``{code, message, path}``, what the target reads
    as ``${steps.<id>.error}``; on success its ``error`` is null. On a step that loops
    (``maxVisits`` above 1) each visit is its own path: a failed visit counts as a visit
    (``RunState.visits``), and the entry holds the latest visit's outcome.
    """
    target: str | None = getattr(step, "on_error", None)
    if target is None:
        output, route = await run_step(step, at, at.visit, scope)
        scope["steps"][step.id] = {"output": output, "route": route}
        return output, route, None
    path = str(at)
    record = run.state.steps.get(path)
    try:
        if record is not None and record.status == "failed":
            cause, _, message = (record.last_error or "step_failed: ").partition(": ")
            raise StepFailure(cause, message, path=path, step_id=step.id)
        output, route = await run_step(step, at, at.visit, scope)
    except StepFailure as failure:
        if failure.path != path:
            raise
        if record is None or record.status != "failed":
            events: list[Event] = []
            if path not in run.state.steps:
                # It failed before an attempt (a ``with`` that does not render): the
                # visit still happened, and its failure needs a step to belong to.
                events.append(
                    StepAttemptStarted(
                        step_path=path, step_id=step.id, kind=step.kind, visit=at.visit
                    )
                )
            events.append(
                StepFailed(
                    step_path=path,
                    step_id=step.id,
                    cause_code=failure.cause,
                    message=failure.message,
                )
            )
            await run.append(events, sync=True)
        error: JsonValue = {"code": failure.cause, "message": failure.message, "path": path}
        scope["steps"][step.id] = {"output": None, "route": None, "error": error}
        return None, None, target
    scope["steps"][step.id] = {"output": output, "route": route, "error": None}
    return output, route, None
