"""Schedules: runs started on a cron expression by the workers.

A schedule is a record in the store's KV (key ``schedule:<name>``, format version 1):
its cron expression, time zone, workflow, input and catch-up policy. It runs nowhere by
itself: every worker looks at the schedules every ``schedule_every`` seconds and starts
each tick that is due (``Scheduler.look``).

Exactly one run per tick, whatever the number of workers, their restarts or a clock
stepped back: a tick's run id is deterministic, ``sched:<name>:<tick in UTC>``, and the
run id is the idempotency key. A tick whose run id already has a log is done; two workers
that both find it absent both submit it, the second ``RunStarted`` append conflicts
(``ConflictError``) and that worker just queues the run again, which changes nothing.

Catch-up (``catch_up``): a tick is *on time* while it is less than ``GRACE_SECONDS`` old.
Every on-time tick is started; of the ticks older than that (missed while no worker ran,
or the clock jumped forward), ``latest`` starts only the newest, ``skip`` none. Ticks
before the schedule was added, or before it was last resumed, never run.

The workflow is re-read at each tick, as cron runs a script: a file is kept by its
absolute path and a ``module:function`` is imported at each tick, so an edit takes
effect at the next tick (each run pins the version it started with, as ``submit`` does).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from little_workflow.codec import JsonValue, dumps
from little_workflow.errors import (
    ConfigError,
    ConflictError,
    CorruptDataError,
    InvalidValueError,
    LittleWorkflowError,
)
from little_workflow.ids import validate_id
from little_workflow.runtime._host import StoreHost

__all__ = [
    "GRACE_SECONDS",
    "SCHEDULE_PREFIX",
    "CatchUp",
    "Schedule",
    "Scheduler",
    "tick_run_id",
]

_log = logging.getLogger("little_workflow.worker")

#: KV prefix of the schedules.
SCHEDULE_PREFIX = "schedule:"
#: A tick younger than this is on time: started whatever the catch-up policy.
GRACE_SECONDS = 60.0
#: The longest schedule name: its run ids (name plus 25 characters) stay valid ids.
MAX_NAME_LENGTH = 150
#: At most this many on-time ticks are started by one look at one schedule.
MAX_TICKS_PER_LOOK = 100
_FORMAT = 1

CatchUp = Literal["latest", "skip"]
_CATCH_UPS: tuple[CatchUp, ...] = ("latest", "skip")


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A stored schedule."""

    name: str
    #: A cron expression: 5 fields, or 6 with seconds as the last one.
    cron: str
    #: Workflow file (absolute path) or ``module:function``.
    workflow: str
    input: JsonValue
    #: IANA time zone the cron expression is read in.
    tz: str = "UTC"
    catch_up: CatchUp = "latest"
    paused: bool = False
    #: Ticks before this (Unix seconds: added, or last resumed) never run.
    since: float = 0.0

    def to_json(self) -> dict[str, JsonValue]:
        """The stored form."""
        return {
            "format": _FORMAT,
            "name": self.name,
            "cron": self.cron,
            "workflow": self.workflow,
            "input": self.input,
            "tz": self.tz,
            "catchUp": self.catch_up,
            "paused": self.paused,
            "since": self.since,
        }

    @classmethod
    def from_json(cls, key: str, value: JsonValue) -> Schedule:
        """Read a stored schedule; ``CorruptDataError`` naming ``key`` if it is not one."""
        try:
            if not isinstance(value, dict) or value.get("format") != _FORMAT:
                raise ValueError("not a schedule record of format 1")
            name, cron, workflow = value["name"], value["cron"], value["workflow"]
            tz, catch_up, paused, since = (
                value["tz"],
                value["catchUp"],
                value["paused"],
                value["since"],
            )
            if not (
                isinstance(name, str)
                and isinstance(cron, str)
                and isinstance(workflow, str)
                and isinstance(tz, str)
                and catch_up in _CATCH_UPS
                and isinstance(paused, bool)
                and isinstance(since, int | float)
            ):
                raise ValueError("a field has the wrong type")
            schedule = cls(
                name=name,
                cron=cron,
                workflow=workflow,
                input=value["input"],
                tz=tz,
                catch_up=catch_up,
                paused=paused,
                since=float(since),
            )
            _check(schedule)
        except (KeyError, ValueError, LittleWorkflowError) as exc:
            raise CorruptDataError(f"schedule record {key!r} is corrupt: {exc}") from None
        return schedule

    def ticks_between(self, start: float, end: float) -> list[datetime]:
        """The ticks in ``(start, end]``, newest first (at most ``MAX_TICKS_PER_LOOK``)."""
        from croniter import croniter  # 0.1 s to import: only where schedules are read

        zone = ZoneInfo(self.tz)
        cron = croniter(self.cron, datetime.fromtimestamp(end, UTC).astimezone(zone))
        ticks: list[datetime] = []
        # ``get_prev`` from exactly a tick skips that tick: start just after ``end``.
        cron.set_current(datetime.fromtimestamp(end, UTC).astimezone(zone) + timedelta(0, 0, 1))
        while len(ticks) < MAX_TICKS_PER_LOOK:
            tick = cron.get_prev(datetime)
            if tick.timestamp() <= start:
                break
            ticks.append(tick)
        return ticks


def tick_run_id(name: str, tick: datetime) -> str:
    """The run id of ``name``'s tick at ``tick``: the idempotency key of its run."""
    return f"sched:{name}:{tick.astimezone(UTC).strftime('%Y%m%dT%H%M%SZ')}"


def _check(schedule: Schedule) -> None:
    """Raise a typed error if ``schedule`` is not a valid one."""
    from croniter import CroniterError, croniter

    validate_id(schedule.name, what="schedule name")
    if len(schedule.name) > MAX_NAME_LENGTH:
        raise InvalidValueError(
            f"schedule name {schedule.name[:20]!r}... is {len(schedule.name)} characters "
            f"long; the limit is {MAX_NAME_LENGTH}"
        )
    try:
        zone = ZoneInfo(schedule.tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidValueError(
            f"unknown time zone {schedule.tz!r} (an IANA name such as 'Europe/Paris')",
            code="invalid_time_zone",
        ) from None
    try:
        croniter(schedule.cron, datetime.now(zone))
    except (CroniterError, ValueError) as exc:
        raise InvalidValueError(
            f"invalid cron expression {schedule.cron!r}: {exc}", code="invalid_cron"
        ) from None
    if schedule.catch_up not in _CATCH_UPS:
        raise InvalidValueError(
            f"invalid catch-up policy {schedule.catch_up!r}: use 'latest' or 'skip'"
        )
    dumps(schedule.input, where=f"input of schedule {schedule.name!r}")


class ScheduleStore(StoreHost, Protocol):
    """What the schedule records use of the runtime: the store, opened on demand."""

    async def open(self) -> object:
        """Open the store if it is not yet."""
        ...


class ScheduleHost(ScheduleStore, Protocol):
    """What starting ticks uses of the runtime: the store, and ``submit``."""

    async def submit(
        self, workflow: Any, input: object = None, *, run_id: str | None = None
    ) -> str:
        """Create and queue a run (``Runtime.submit``)."""
        ...


def _key(name: str) -> str:
    return SCHEDULE_PREFIX + validate_id(name, what="schedule name")


def resolve_workflow(workflow: str | Path) -> str:
    """The stored form of ``workflow``: a file's absolute path, or ``module:function``
    (imported once here, so a name that does not import is refused at once)."""
    from little_workflow.runtime._code_program import code_workflow

    if isinstance(workflow, Path) or Path(workflow).is_file():
        path = Path(workflow)
        if not path.is_file():
            raise ConfigError(f"workflow file {str(path)!r} does not exist")
        return str(path.resolve())
    if code_workflow(workflow) is None:
        raise ConfigError(
            f"{workflow!r}: no such workflow file, and not a module:function naming a @workflow"
        )
    return workflow


async def add_schedule(host: ScheduleStore, schedule: Schedule) -> Schedule:
    """Store ``schedule`` (checked first: nothing is stored if it is invalid)."""
    _check(schedule)
    key = _key(schedule.name)
    await host.open()
    if await host.kv.get(key) is not None:
        raise ConfigError(
            f"schedule {schedule.name!r} exists; remove it first", code="schedule_exists"
        )
    if not schedule.since:
        schedule = replace(schedule, since=time.time())
    await host.kv.set(key, schedule.to_json())
    return schedule


async def get_schedule(host: ScheduleStore, name: str) -> Schedule:
    """The schedule named ``name``; ``ConfigError`` (``schedule_not_found``) if none."""
    key = _key(name)
    await host.open()
    value = await host.kv.get(key)
    if value is None:
        raise ConfigError(f"no schedule named {name!r}", code="schedule_not_found")
    return Schedule.from_json(key, value)


async def list_schedules(host: ScheduleStore) -> list[Schedule]:
    """Every schedule, by name."""
    await host.open()
    keys = await host.kv.list(SCHEDULE_PREFIX)
    values = await host.kv.get_many(keys)
    return [Schedule.from_json(key, values[key]) for key in keys if key in values]


async def remove_schedule(host: ScheduleStore, name: str) -> None:
    """Delete the schedule ``name`` (its runs stay); ``schedule_not_found`` if none."""
    await get_schedule(host, name)
    await host.kv.delete(_key(name))


async def set_paused(host: ScheduleStore, name: str, paused: bool) -> Schedule:
    """Pause or resume ``name``; resuming does not start the ticks missed while paused."""
    schedule = await get_schedule(host, name)
    if schedule.paused != paused:
        since = schedule.since if paused else time.time()
        schedule = replace(schedule, paused=paused, since=since)
        await host.kv.set(_key(name), schedule.to_json())
    return schedule


class Scheduler:
    """One worker's duty of starting the due ticks of every schedule."""

    def __init__(self, runtime: ScheduleHost, *, worker_id: str, interval: float) -> None:
        self.runtime = runtime
        self.worker_id = worker_id
        self.interval = interval
        #: Ticks whose run this worker submitted (a racing worker may count one too).
        self.started = 0

    async def look(self, now: float | None = None) -> list[str]:
        """Start the due ticks of every schedule; the run ids started here."""
        now = time.time() if now is None else now
        started: list[str] = []
        for schedule in await list_schedules(self.runtime):
            if schedule.paused:
                continue
            try:
                started += await self._look_at(schedule, now)
            except (Exception, SystemExit) as exc:
                # A workflow file gone, a module that no longer imports (or raises, or
                # exits, as it is imported: user code), a store error: logged, and the
                # next look tries again; the other schedules and the worker go on.
                _log.warning(
                    "worker %s: schedule %s: cannot start its run: %s",
                    self.worker_id,
                    schedule.name,
                    exc,
                )
        return started

    async def _look_at(self, schedule: Schedule, now: float) -> list[str]:
        events = self.runtime.events
        due: list[datetime] = []
        for tick in schedule.ticks_between(schedule.since, now):
            if await events.read(tick_run_id(schedule.name, tick), limit=1):
                break  # this tick ran, so did every older one that was due
            due.append(tick)
        on_time = [tick for tick in due if now - tick.timestamp() < GRACE_SECONDS]
        if schedule.catch_up == "latest" and due and not on_time:
            on_time = due[:1]
        started = []
        for tick in reversed(on_time):  # oldest first
            run_id = tick_run_id(schedule.name, tick)
            if await self._start(schedule, run_id):
                started.append(run_id)
        return started

    async def _start(self, schedule: Schedule, run_id: str) -> bool:
        workflow: str | Path = schedule.workflow
        if Path(schedule.workflow).is_absolute():
            workflow = Path(schedule.workflow)
        try:
            await self.runtime.submit(workflow, schedule.input, run_id=run_id)
        except ConflictError:
            # Another worker committed this tick's ``RunStarted`` first: queue it (a no-op
            # if that worker did), in case it died between its two writes.
            await self.runtime.submit(workflow, schedule.input, run_id=run_id)
            return False
        self.started += 1
        _log.info("worker %s: schedule %s started run %s", self.worker_id, schedule.name, run_id)
        return True
