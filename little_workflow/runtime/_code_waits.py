"""Code-first waits: ``ctx.wait_for``, ``ctx.sleep``, ``ctx.sleep_until`` (docs/waits.md).

Each is a unit at its call's path, like a step: a completed wait replays its recorded
outcome; a new one goes to ``_waits.wait_point``, which ends it or parks the run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

from pydantic import BaseModel

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, InvalidValueError, StepFailedError
from little_workflow.lwir import RetryPolicy
from little_workflow.lwir._models import check_json_schema
from little_workflow.runtime._core import DurableRun, Site, StepFailure, StepUnit
from little_workflow.runtime._waits import wait_point

__all__ = ["WaitDriver", "code_wait", "payload", "seconds_of", "wait_schema"]

_NO_RETRY = RetryPolicy()


class WaitDriver(Protocol):
    """What a code-first wait uses of its pass (``_code_run.CodeRun``)."""

    @property
    def run(self) -> DurableRun:
        """The core of the pass."""
        ...


async def code_wait(
    driver: WaitDriver,
    site: Site,
    *,
    name: str,
    wake_at: Callable[[], float | None],
    event: str | None = None,
    schema: dict[str, Any] | None = None,
) -> tuple[JsonValue, str]:
    """The wait at ``site`` (a sleep when ``event`` is None): ``(output, route)``, recorded
    or now; or the run parks."""
    kind = "sleep" if event is None else "wait"
    run = driver.run
    record = run.state.steps.get(site.text)
    if record is not None and record.status == "completed":
        hit = run.recorded(site.text, site.identity)
        assert hit is not None
        output, route = run.replay(site.text, hit)
        return output, route or ""
    unit = StepUnit(site=site, kind=kind, step_id=name, retry=_NO_RETRY)
    try:
        output, route = await wait_point(run, unit, event=event, schema=schema, wake_at=wake_at)
    except StepFailure as failure:
        raise StepFailedError(failure.message, path=site.text, cause_code=failure.cause) from None
    run.remember(site, output, route)
    return output, route


def wait_schema(
    event: str,
    schema: type[BaseModel] | Mapping[str, Any] | None,
    declared: Mapping[str, dict[str, Any] | None] | None = None,
) -> tuple[type[BaseModel] | None, dict[str, Any] | None]:
    """``wait_for``'s ``schema``: the pydantic model (if one), and the JSON Schema ``send``
    checks payloads against; a dict that is no JSON Schema is refused here.

    ``declared``: the events the run pinned (``@workflow(events=...)``). Then the event
    must be one of them (``undeclared_event``), and ``schema`` is the declared one or
    omitted, which takes the declared schema (``event_schema_mismatch`` otherwise), so
    what ``send`` checked before the wait is what the wait checks.
    """
    model, json_schema = _given(event, schema)
    if declared is None:
        return model, json_schema
    if event not in declared:
        raise ConfigError(
            f"ctx.wait_for({event!r}): the workflow does not declare this event (it declares: "
            f"{', '.join(sorted(declared)) or 'none'}); add it to @workflow(events=...)",
            code="undeclared_event",
        )
    if schema is None:
        return None, declared[event]
    if json_schema != declared[event]:
        raise ConfigError(
            f"ctx.wait_for({event!r}): schema differs from the one @workflow(events=...) "
            "declares for it (and the run pinned); pass the same, or omit schema",
            code="event_schema_mismatch",
        )
    return model, json_schema


def _given(
    event: str, schema: type[BaseModel] | Mapping[str, Any] | None
) -> tuple[type[BaseModel] | None, dict[str, Any] | None]:
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema, schema.model_json_schema()
    if schema is None:
        return None, None
    json_schema = dict(schema)
    try:
        check_json_schema(json_schema)
    except ValueError as exc:
        raise InvalidValueError(f"ctx.wait_for({event!r}): schema: {exc}") from None
    return None, json_schema


def seconds_of(value: timedelta | float | None, what: str) -> float | None:
    """``value`` in seconds (``None`` stays ``None``); a negative or non-number is refused."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise InvalidValueError(f"{what} must be a timedelta or seconds (>= 0), not {value!r}")
    return float(seconds)


async def payload(
    done: Awaitable[tuple[JsonValue, str]], model: type[BaseModel] | None, *, nothing: bool = False
) -> Any:
    """What the body's ``await`` gives: the event's payload (as ``model`` if one), ``None``
    on a timeout or for a sleep."""
    output, route = await done
    if nothing:
        return None
    if route != "event" or model is None:
        return output
    return model.model_validate(output)
