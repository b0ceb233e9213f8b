"""LWIR ``kind: wait`` and ``kind: sleep``: their wake-up times, over ``_waits.wait_point``."""

from __future__ import annotations

import time

from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidInputError
from little_workflow.lwir import SleepStep, Step, WaitStep
from little_workflow.runtime._agents import Render
from little_workflow.runtime._core import DurableRun, StepFailure, StepUnit
from little_workflow.runtime._waits import parse_duration, wait_point, wake_time

__all__ = ["next_after_wait", "wait_at"]


async def wait_at(
    run: DurableRun, step: Step, unit: StepUnit, render: Render
) -> tuple[JsonValue, str]:
    """A ``wait`` or ``sleep`` step at ``unit``: ``(output, route)``, or the run parks."""
    path = unit.site.text

    def wake_at() -> float | None:
        # Called once, when the run first reaches the step: the time is then in the log.
        try:
            if isinstance(step, WaitStep):
                if step.timeout is None:
                    return None
                return time.time() + parse_duration(step.timeout, where=f"{path}.timeout")
            assert isinstance(step, SleepStep)
            if step.duration is not None:
                return time.time() + parse_duration(step.duration, where=f"{path}.duration")
            return wake_time(render(step.until, step, path, "until"), where=f"{path}.until")
        except InvalidInputError as exc:
            raise StepFailure("invalid_wait", exc.message, path=path, step_id=step.id) from exc

    if isinstance(step, WaitStep):
        return await wait_point(run, unit, event=step.event, schema=step.schema_, wake_at=wake_at)
    return await wait_point(run, unit, event=None, schema=None, wake_at=wake_at)


def next_after_wait(
    step: Step, route: str | None, index: dict[str, int], following: int | None
) -> int | None:
    """The position after ``step``: ``following``, or a timed-out wait's ``onTimeout``."""
    if isinstance(step, WaitStep) and route == "timeout" and step.on_timeout is not None:
        return index[step.on_timeout]
    return following
