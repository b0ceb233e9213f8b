"""Code-first waits: ``ctx.wait_for``, ``ctx.sleep``, ``ctx.sleep_until`` (docs/waits.md).

Each is a unit at its call's path, like a step: a completed wait replays its recorded
outcome; a new one goes to ``_waits.wait_point``, which ends it or parks the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from little_workflow.codec import JsonValue
from little_workflow.errors import StepFailedError
from little_workflow.lwir import RetryPolicy
from little_workflow.runtime._core import DurableRun, Site, StepFailure, StepUnit
from little_workflow.runtime._waits import wait_point

__all__ = ["WaitDriver", "code_wait"]

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
    kind: str,
    name: str,
    event: str | None,
    schema: dict[str, JsonValue] | None,
    wake_at: Callable[[], float | None],
) -> tuple[JsonValue, str]:
    """The wait at ``site``: ``(output, route)``, recorded or now; or the run parks."""
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
