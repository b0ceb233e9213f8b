"""Helpers of the LWIR walk: routes, map keys, failures and ``onError``, a tool step's records."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from little_workflow._failures import error_message, error_names
from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, FunctionNotAllowedError, InvalidStepPathError
from little_workflow.events import (
    Event,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    StepFailed,
)
from little_workflow.lwir import DecisionStep, MapStep, StepBase, StepPath, branch_key
from little_workflow.runtime._core import Arguments, DurableRun, StepFailure

if TYPE_CHECKING:
    from little_workflow._secrets import Secrets
    from little_workflow.harness._redaction import Redaction

__all__ = [
    "ToolCallRecords",
    "branch_keys",
    "chosen_route",
    "config_failure",
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
    as ``${steps.<id>.error}``; on success its ``error`` is null.
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
            await run.append(
                [
                    StepFailed(
                        step_path=path,
                        step_id=step.id,
                        cause_code=failure.cause,
                        message=failure.message,
                    )
                ],
                sync=True,
            )
        error: JsonValue = {"code": failure.cause, "message": failure.message, "path": path}
        scope["steps"][step.id] = {"output": None, "route": None, "error": error}
        return None, None, target
    scope["steps"][step.id] = {"output": output, "route": route, "error": None}
    return output, route, None
