"""The store-wide settings a ``Runtime`` edits: queues, model limits and schedules.

A base of ``Runtime`` of its own so that the facade stays small (``tests/runtime/
test_layers.py``: at most 600 lines a module). Every method opens the store first; none
touches a run. ``_schedules`` and ``_queues`` are imported by the methods that use them,
so that a process that only runs or resumes runs (such as ``little-workflow resume``)
imports neither.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from little_workflow.codec import JsonValue, dumps
from little_workflow.runtime._resources import RunResources
from little_workflow.storage import Limit, Rate

if TYPE_CHECKING:
    from little_workflow.runtime._queues import QueueInfo
    from little_workflow.runtime._schedules import CatchUp, Schedule

__all__ = ["RuntimeSettings"]


class RuntimeSettings(RunResources):
    """Queues, model limits and schedules, stored for every process of the store."""

    async def set_queue(
        self, name: str, *, concurrency: int | None = None, rate: Rate | None = None
    ) -> QueueInfo:
        """Store queue ``name``'s limits, replacing any before: at most ``concurrency`` of
        its runs held by workers at once, at most ``rate`` claims (``storage/_limits.py``).
        Every worker of the store enforces them from its next claim."""
        from little_workflow.runtime._queues import QueueInfo

        await self.open()
        limit = Limit(concurrency=concurrency, rate=rate)
        await self.queue.set_limit("queue", name, limit)
        return QueueInfo(name=name, limit=limit)

    async def queues(self) -> list[QueueInfo]:
        """Every queue and its limits, ``default`` included."""
        from little_workflow.runtime._queues import list_queues

        await self.open()
        return await list_queues(self.queue)

    async def remove_queue(self, name: str) -> bool:
        """Forget queue ``name``'s limits (its queued runs are then claimed unlimited)."""
        await self.open()
        return await self.queue.remove_limit("queue", name)

    async def set_model_limit(
        self, slot: str, *, concurrency: int | None = None, rate: Rate | None = None
    ) -> None:
        """Store model slot ``slot``'s limits: at most ``concurrency`` calls through it at
        once and ``rate`` calls, across every process of the store (``_model_limits``)."""
        await self.open()
        await self.queue.set_limit("model", slot, Limit(concurrency=concurrency, rate=rate))

    async def model_limits(self) -> dict[str, Limit]:
        """The model slots that have limits, and their limits."""
        await self.open()
        return await self.queue.limits("model")

    async def remove_model_limit(self, slot: str) -> bool:
        """Forget model slot ``slot``'s limits; whether it had any."""
        await self.open()
        return await self.queue.remove_limit("model", slot)

    async def add_schedule(
        self,
        name: str,
        *,
        cron: str,
        workflow: str | os.PathLike[str],
        input: object = None,
        tz: str = "UTC",
        catch_up: CatchUp = "latest",
    ) -> Schedule:
        """Store a schedule: the workers start a run of ``workflow`` with ``input`` at
        each tick of ``cron`` (read in ``tz``), exactly once (``runtime/_schedules.py``).

        ``workflow`` is a workflow file (kept by its absolute path, re-read at each
        tick) or ``module:function``. An invalid name, cron expression, time zone or
        input raises ``InvalidInputError`` (``RunInputError`` for an input that does not
        fit the workflow), an existing name ``ConfigError``; then nothing is stored.
        """
        from little_workflow.runtime._input_check import check_input
        from little_workflow.runtime._schedules import Schedule, add_schedule, resolve_workflow

        dumps(input, where="schedule input")
        target = resolve_workflow(Path(workflow) if isinstance(workflow, os.PathLike) else workflow)
        run_input: JsonValue = input  # type: ignore[assignment]
        schedule = Schedule(
            name=name, cron=cron, workflow=target, input=run_input, tz=tz, catch_up=catch_up
        )
        check_input(target, input)  # as the workflow is now: not refused at every tick
        return await add_schedule(self, schedule)

    async def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name."""
        from little_workflow.runtime._schedules import list_schedules

        return await list_schedules(self)

    async def remove_schedule(self, name: str) -> None:
        """Delete the schedule ``name`` (the runs it started stay)."""
        from little_workflow.runtime._schedules import remove_schedule

        await remove_schedule(self, name)

    async def pause_schedule(self, name: str) -> Schedule:
        """Start no more ticks of ``name`` until ``resume_schedule``."""
        from little_workflow.runtime._schedules import set_paused

        return await set_paused(self, name, True)

    async def resume_schedule(self, name: str) -> Schedule:
        """Start ``name``'s ticks again, from now on (the ticks missed while paused never
        run)."""
        from little_workflow.runtime._schedules import set_paused

        return await set_paused(self, name, False)
