"""Waits: a run that stops for an event or a timer (docs/waits.md).

A front end reaches a wait (LWIR ``kind: wait``/``sleep``, ``ctx.wait_for``/``ctx.sleep``)
and calls ``wait_point``. The first time, the wait's wake-up time (a timer's time, an
event wait's timeout) is computed and recorded in ``WaitStarted``; every later pass reads
it back from the log, so a kill, a reboot or another worker never moves it. The wait ends
when

* the event is in the run's log (``EventReceived``, appended by ``send`` while nobody drove
  the run) or in its mailbox (KV ``run:mail:<run>:...``, where ``send`` leaves an event
  while a process drives the run): ``WaitCompleted`` (outcome ``event``) + ``StepCompleted``
  with the payload as output, route ``event``;
* an event wait's timeout has passed by ``TIMEOUT_GRACE``: outcome and route ``timeout``;
* a timer is due: outcome and route ``due``, output the wake-up time (ISO 8601, UTC).

Otherwise the run **parks**: ``WaitStarted`` is committed, a record goes to KV
``run:waiting:<run>`` (what lists and wakes waiting runs), the mailbox is looked at once
more, and ``RunParked`` unwinds the run: its process, lock or lease is given back. What
makes it run again: a worker (the run's queue row is released with a not-before time, or,
for a run no worker had, ``wakeups.py`` finds its record due), or ``resume``.

Exactly once: a ``send`` appends to the log only holding what a driver holds (the run lock,
or a claim of the run's queue row), so it never races a driver's appends; while a driver
holds the run it leaves the event in the mailbox and, if the log shows the run already at
that wait (the driver may have looked before the event arrived), waits for the driver to
let go or take it. A send's key names the event once: in the log it is delivered once,
in the mailbox it is one key. A timeout is decided by the driver alone; ``send`` refuses
from the wait's ``wakeAt`` on, and the driver times out ``TIMEOUT_GRACE`` later, so an
event accepted before the deadline is in the mailbox by the time the driver looks.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, cast

import pydantic

from little_workflow._failures import RunParked
from little_workflow._tracing import traced
from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import (
    CorruptDataError,
    EventPayloadError,
    EventRefusedError,
    InvalidInputError,
    RunWaitingError,
)
from little_workflow.events import EventReceived, WaitCompleted, WaitStarted
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import WaitStep
from little_workflow.runtime._core import DurableRun, StepFailure, StepUnit
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._state import ReceivedEvent, RunState, WaitRecord, read_state
from little_workflow.runtime._workflows import WorkflowCatalog, walk_steps
from little_workflow.storage import ManagedStorage, fenced

if TYPE_CHECKING:
    from little_workflow.runtime._host import StoreHost

__all__ = [
    "ASK_PREFIX",
    "ASK_USER",
    "MAIL_PREFIX",
    "NEVER",
    "TIMEOUT_GRACE",
    "WAITING_PREFIX",
    "SendResult",
    "check_payload",
    "describe",
    "note_root_waiting",
    "parse_duration",
    "send",
    "wait_point",
    "waiting_error",
    "waiting_key",
    "wake_time",
]

#: The kind of an agent's ``ask_user`` wait, and the prefix of its event's name.
ASK_USER = "ask_user"
ASK_PREFIX = "ask_user:"
#: KV: ``run:waiting:<run id>`` -> what a parked run waits for (``describe``).
WAITING_PREFIX = "run:waiting:"
#: KV: ``run:mail:<run id>:<hash of key>`` -> an event sent while a process drove the run.
MAIL_PREFIX = "run:mail:"
#: How long after its deadline an event wait times out (see the module docstring).
TIMEOUT_GRACE = 1.0
#: The queue's not-before of a run waiting for an event with no timeout: only a send wakes it.
NEVER = 1e15
#: The event keys each pass (a ``DurableRun``) is taking at one of its waits right now.
_TAKEN: weakref.WeakKeyDictionary[DurableRun, set[str]] = weakref.WeakKeyDictionary()
#: How long a ``send`` waits for a driver that holds the run at the wait (seconds).
_SEND_PATIENCE = 30.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str, *, where: str) -> float:
    """Seconds in ``2h``, ``1h30m``, ``45s``, ``250ms``, ``2d`` (``InvalidInputError``)."""
    compact = text.replace(" ", "")
    if not compact or _DURATION.sub("", compact) != "":
        raise InvalidInputError(
            f"{where}: {text!r} is not a duration; write a number and a unit, such as "
            "90s, 15m, 2h, 1h30m or 2d (units: ms, s, m, h, d, w)"
        )
    return sum(float(n) * _UNITS[unit] for n, unit in _DURATION.findall(compact))


def wake_time(value: object, *, where: str) -> float:
    """Seconds since the epoch of a timestamp: an ISO 8601 string, or a number of seconds."""
    if isinstance(value, bool):
        raise InvalidInputError(f"{where}: {value!r} is not a timestamp")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                f"{where}: {value!r} is not an ISO 8601 timestamp (2026-12-02T09:00:00Z)"
            ) from None
    else:
        raise InvalidInputError(f"{where}: {type(value).__name__} is not a timestamp")
    if moment.tzinfo is None:
        raise InvalidInputError(
            f"{where}: {value!r} has no time zone; add one (Z, +01:00) so it names one instant"
        )
    return moment.timestamp()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def waiting_key(run_id: str) -> str:
    """The KV key of ``run_id``'s waiting record."""
    return f"{WAITING_PREFIX}{run_id}"


def _mail_key(run_id: str, key: str) -> str:
    return f"{MAIL_PREFIX}{run_id}:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def describe(wait: WaitRecord) -> dict[str, JsonValue]:
    """What a wait waits for, as status views and ``RunWaitingError`` show it."""
    return {
        "path": wait.path,
        "kind": wait.kind,
        "event": wait.event,
        "since": wait.since,
        "wakeAt": wait.wake_at,
        "schema": wait.schema,
        "question": wait.question,
    }


def check_payload(schema: dict[str, JsonValue] | None, data: JsonValue, *, where: str) -> None:
    """Raise ``EventPayloadError`` (with the schema's error) if ``data`` fails ``schema``."""
    if schema is None:
        return
    from little_workflow.lwir._jsonschema import schema_problems, validate

    if problems := schema_problems(schema, where="schema"):
        raise EventPayloadError(f"{where}: the wait's schema is invalid: {problems[0]}")
    if problems := validate(data, schema, where="payload"):
        shown = "; ".join(map(str, problems[:3]))
        raise EventPayloadError(f"{where}: the payload fails the wait's schema: {shown}")


# --- the driver's side --------------------------------------------------------------


async def wait_point(
    run: DurableRun,
    unit: StepUnit,
    *,
    event: str | None,
    schema: dict[str, JsonValue] | None,
    wake_at: Callable[[], float | None],
    question: str | None = None,
) -> tuple[JsonValue, str]:
    """End the wait at ``unit`` (``(output, route)``, committed), or park the run.

    Called for a path the log has not completed. ``wake_at`` is called once, the first
    time the run reaches the wait; the recorded value is used ever after. A unit of kind
    ``ask_user`` (an agent's question, ``_ask_user``) records no ``StepCompleted``: its
    answer is recorded as the result of the tool call that asked.
    """
    attributes = {"little_workflow.wait.kind": unit.kind}
    if event is not None:
        attributes["little_workflow.wait.event"] = event
    with traced(run.trace, "wait", unit.site.text, attributes):
        return await _wait_point(
            run, unit, event=event, schema=schema, wake_at=wake_at, question=question
        )


async def _wait_point(
    run: DurableRun,
    unit: StepUnit,
    *,
    event: str | None,
    schema: dict[str, JsonValue] | None,
    wake_at: Callable[[], float | None],
    question: str | None,
) -> tuple[JsonValue, str]:
    path = unit.site.text
    wait = run.state.waits.get(path)
    if wait is None:
        started = WaitStarted(
            step_path=path,
            step_id=unit.step_id,
            kind=unit.kind,
            event=event,
            wake_at=wake_at(),
            schema_=schema,
            question=question,
        )
        await run.append([started], sync=False)
        wait = run.state.waits[path]
    ended = await _try_end(run, unit, wait)
    if ended is not None:
        return ended
    await run.append([], sync=True)
    kv = run.host.kv
    await kv.set(waiting_key(run.run_id), {"runId": run.run_id, **describe(wait)})
    # A send that found the run driven left its event in the mailbox; it may have come
    # after the first look and before the WaitStarted above was committed.
    ended = await _try_end(run, unit, wait)
    if ended is not None:
        return ended
    raise RunParked(run.run_id, [dict(describe(wait))])


async def _try_end(
    run: DurableRun, unit: StepUnit, wait: WaitRecord
) -> tuple[JsonValue, str] | None:
    now = time.time()
    if wait.event is None:
        assert wait.wake_at is not None
        if now < wait.wake_at:
            return None
        return await _complete(
            run, unit, wait, [], outcome="due", output=_iso(wait.wake_at), key=None
        )
    # Waits of one run in flight at once (map branches) each take a different event: the
    # key is taken here, before anything is awaited, and let go once its commit is done.
    taken = _TAKEN.setdefault(run, set())
    received = next(
        (
            event
            for event in run.state.received.values()
            if event.event == wait.event and event.consumed_by is None and event.key not in taken
        ),
        None,
    )
    extra: list[EventReceived] = []
    mail: str | None = None
    if received is None:
        items = await _mailbox(run.host.kv, run.state, wait.event)
        item = next((item for item in items if item.key not in taken), None)
        if item is not None:
            extra, mail = [item], _mail_key(run.run_id, item.key)
            received = ReceivedEvent(
                event=item.event, key=item.key, data=item.data, sent_at=item.sent_at, seq=0
            )
    if received is not None:
        taken.add(received.key)
        try:
            return await _take(run, unit, wait, received, extra=extra, mail=mail)
        finally:
            taken.discard(received.key)
    if wait.wake_at is not None and now >= wait.wake_at + TIMEOUT_GRACE:
        return await _complete(run, unit, wait, [], outcome="timeout", output=None, key=None)
    return None


async def _take(
    run: DurableRun,
    unit: StepUnit,
    wait: WaitRecord,
    received: ReceivedEvent,
    *,
    extra: list[EventReceived],
    mail: str | None,
) -> tuple[JsonValue, str]:
    """End ``wait`` with ``received`` (from the log, or the mailbox: ``extra``, ``mail``)."""
    try:
        check_payload(wait.schema, received.data, where=f"event {received.key!r}")
    except EventPayloadError as exc:
        if extra:
            await run.append(extra, sync=True)
        raise StepFailure(
            "invalid_event_payload",
            f"wait {wait.path!r}: {exc.message}",
            path=wait.path,
            step_id=unit.step_id,
        ) from None
    output = await _complete(
        run, unit, wait, extra, outcome="event", output=received.data, key=received.key
    )
    if mail is not None:
        await run.host.kv.delete(mail)
    return output


async def _complete(
    run: DurableRun,
    unit: StepUnit,
    wait: WaitRecord,
    extra: list[EventReceived],
    *,
    outcome: str,
    output: JsonValue,
    key: str | None,
) -> tuple[JsonValue, str]:
    ended = WaitCompleted(step_path=wait.path, outcome=outcome, key=key)
    step = [] if unit.kind == ASK_USER else [run.completed(unit, output, outcome)]
    await run.append([*extra, ended, *step], sync=True)
    if not run.state.pending_waits:
        await run.host.kv.delete(waiting_key(run.run_id))
    return output, outcome


async def _mailbox(kv: ManagedStorage, state: RunState, event: str) -> list[EventReceived]:
    """The mailbox's events of this name the log does not hold yet, oldest first."""
    keys = await kv.list(f"{MAIL_PREFIX}{state.run_id}:")
    if not keys:
        return []
    found: list[EventReceived] = []
    for key, value in (await kv.get_many(keys)).items():
        try:
            item = EventReceived.model_validate(value)
        except pydantic.ValidationError as exc:
            raise CorruptDataError(
                f"the mailbox entry {key!r} of run {state.run_id!r} is not an event: "
                f"{exc.error_count()} error(s)"
            ) from None
        if item.key in state.received:
            await kv.delete(key)  # delivered; its deletion was cut short
        elif item.event == event:
            found.append(item)
    return sorted(found, key=lambda item: item.sent_at)


async def note_root_waiting(kv: ManagedStorage, root_run_id: str, parked: RunParked) -> None:
    """Record that ``root_run_id`` waits because its sub-run ``parked.run_id`` does."""
    for wait in parked.waits:
        record = {**wait, "runId": parked.run_id}
        await kv.set(waiting_key(root_run_id), cast(JsonValue, record))


def waiting_error(parked: RunParked, root_run_id: str) -> RunWaitingError:
    """The error a caller sees for a run that parked: what it waits for, how to answer."""
    lines = []
    for wait in parked.waits:
        if wait.get("event") is None:
            lines.append(f"a timer at {_iso(float(str(wait['wakeAt'])))} ({wait['path']})")
        elif wait.get("kind") == ASK_USER:
            lines.append(
                f"an answer to the agent's question {wait.get('question')!r} "
                f"({wait['path']}); answer with: little-workflow send {parked.run_id} "
                f"{wait['event']} --data '\"YOUR ANSWER\"'"
            )
        else:
            timeout = wait.get("wakeAt")
            until = "" if timeout is None else f", until {_iso(float(str(timeout)))}"
            lines.append(
                f"event {wait['event']!r} at {wait['path']!r}{until}; answer with: "
                f"little-workflow send {parked.run_id} {wait['event']} --data JSON"
            )
    return RunWaitingError(
        f"run {root_run_id!r} waits for " + "; ".join(lines),
        run_id=root_run_id,
        waits=[{"runId": parked.run_id, **wait} for wait in parked.waits],
    )


# --- sending ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    """What a ``send`` did."""

    run_id: str
    event: str
    key: str
    #: ``delivered``: in the run's log now; ``kept``: in its mailbox until the run's
    #: driver reaches the wait; ``duplicate``: this key was sent before (nothing written).
    outcome: str


def _check(state: RunState, event: str, data: JsonValue, key: str) -> bool:
    """Refuse a send (typed, nothing written); ``True`` if ``key`` was delivered before."""
    if key in state.received:
        return True
    if state.finished:
        raise EventRefusedError(
            f"run {state.run_id!r} is {state.status.value}: it no longer waits for {event!r}"
        )
    pending = [wait for wait in state.pending_waits if wait.event == event]
    now = time.time()
    for wait in pending:
        if wait.wake_at is not None and now >= wait.wake_at:
            raise EventRefusedError(
                f"run {state.run_id!r}: the wait for {event!r} at {wait.path!r} timed out at "
                f"{_iso(wait.wake_at)}; it no longer waits for it"
            )
        check_payload(wait.schema, data, where=f"run {state.run_id!r}, event {event!r}")
    if not pending and any(
        wait.event == event and wait.outcome == "timeout" for wait in state.waits.values()
    ):
        raise EventRefusedError(
            f"run {state.run_id!r}: its wait for {event!r} timed out; it no longer waits for it"
        )
    if not pending and event.startswith(ASK_PREFIX):
        # An answer to a question not asked yet would be taken by whatever the agent asks
        # next: refused, so an answer always answers the question it was given for.
        raise EventRefusedError(
            f"run {state.run_id!r}: no agent question waits for {event!r}; answer a question "
            "once the run waits for it"
        )
    return False


async def _check_declared(host: StoreHost, state: RunState, event: str, data: JsonValue) -> None:
    """For a run not yet at a wait for ``event``: its pinned workflow's waits say.

    LWIR: no ``wait`` step for the event: refused (``not_waiting``: it never will). Every
    one with a schema: the payload must meet one of them (``EventPayloadError``).
    Code-first: the events ``@workflow(events=...)`` declared, the same way; a body that
    declared none says its waits only when it reaches them: nothing to check here.
    """
    if any(wait.event == event for wait in state.pending_waits):
        return  # ``_check`` held it against the wait itself
    where = f"run {state.run_id!r}, event {event!r}"
    if state.declared_events is not None:
        if event not in state.declared_events:
            declared = ", ".join(sorted(state.declared_events)) or "none"
            raise EventRefusedError(
                f"{where}: workflow {state.workflow_name!r} declares no such event (it "
                f"declares: {declared}); the run will never take it"
            )
        check_payload(state.declared_events[event], data, where=where)
        return
    key = f"workflows/{state.workflow_version_id}"
    if not state.workflow_version_id or await host.kv.get(key) is None:
        return
    version = await WorkflowCatalog(host.kv, {}).load(state.workflow_version_id)
    waits = [
        step
        for step in walk_steps(version.workflow.steps)
        if isinstance(step, WaitStep) and step.event == event
    ]
    if not waits:
        raise EventRefusedError(
            f"{where}: workflow {version.workflow.name!r} has no wait step for this event; "
            "the run will never take it"
        )
    schemas = [step.schema_ for step in waits]
    if any(schema is None for schema in schemas):
        return
    errors = []
    for schema in schemas:
        try:
            check_payload(schema, data, where=where)
        except EventPayloadError as exc:
            errors.append(exc)
        else:
            return
    raise errors[0]


async def send(
    host: StoreHost, run_id: str, event: str, data: JsonValue, *, key: str | None = None
) -> SendResult:
    """Send ``event`` with ``data`` to ``run_id`` (see the module docstring)."""
    validate_id(run_id, what="run id")
    validate_id(event, what="event name")
    check_json_value(data, where=f"data of event {event!r}")
    if key is None:
        key = new_id("evt")
    elif not key or len(key) > 200:
        raise InvalidInputError("an event key is 1 to 200 characters")
    deadline = time.monotonic() + _SEND_PATIENCE
    mailed = False
    declared_checked = False
    while True:
        state = await read_state(host.events, run_id)
        if not declared_checked and not _check(state, event, data, key):
            await _check_declared(host, state, event, data)
            declared_checked = True
        if _check(state, event, data, key):
            if mailed:
                await host.kv.delete(_mail_key(run_id, key))
            return SendResult(run_id=run_id, event=event, key=key, outcome="duplicate")
        if await _deliver(host, run_id, event, data, key):
            if mailed:
                await host.kv.delete(_mail_key(run_id, key))
            return SendResult(run_id=run_id, event=event, key=key, outcome="delivered")
        # Someone drives the run: its driver takes the event from the mailbox at the wait.
        if not mailed:
            item = EventReceived(event=event, key=key, data=data, sent_at=time.time())
            await host.kv.set(_mail_key(run_id, key), item.model_dump(mode="json", by_alias=True))
            mailed = True
            continue  # look at the log again, now that the mailbox holds it
        at_wait = any(wait.event == event for wait in state.pending_waits)
        if not at_wait or time.monotonic() > deadline:
            return SendResult(run_id=run_id, event=event, key=key, outcome="kept")
        # The driver is at this very wait: it parks (and lets go) or takes the event.
        await asyncio.sleep(0.05)


async def _deliver(host: StoreHost, run_id: str, event: str, data: JsonValue, key: str) -> bool:
    """Append the event holding what a driver holds; ``False`` if a driver holds the run.

    The run lock (what ``run``/``resume`` hold) and, for a run in the queue, a claim of its
    row (what a worker holds): a driver of either kind excludes the send.
    """
    lock = RunLock(host, run_id, purpose=f"send to run {run_id!r}")
    if not await lock.try_acquire():
        return False
    try:
        queue = host.store.queue
        entry = None if queue is None else await queue.get(run_id)
        if queue is None or entry is None or entry.state == "done":
            await _append_event(host, run_id, event, data, key)
            return True
        claim = await queue.claim_run(run_id, f"send-{os.getpid()}", lease_seconds=30.0)
        if claim is None:
            return False
        try:
            with fenced(claim.fence):
                await _append_event(host, run_id, event, data, key)
        finally:
            # Claimable at once: a worker drives the run on to the wait, which takes it.
            await queue.release(claim.fence)
        return True
    finally:
        await lock.release()


async def _append_event(
    host: StoreHost, run_id: str, event: str, data: JsonValue, key: str
) -> None:
    state = await read_state(host.events, run_id)
    if _check(state, event, data, key):
        return
    item = EventReceived(event=event, key=key, data=data, sent_at=time.time())
    await host.events.append(run_id, [item], sync=True, expected_seq=state.last_seq)
    record = await host.kv.get(waiting_key(run_id))
    if isinstance(record, dict) and record.get("event") == event:
        await host.kv.set(waiting_key(run_id), {**record, "ready": True})
