"""Cancelling a run: a durable request, recorded as ``RunCancelled`` by the run's owner.

A run has one writer at a time: the process holding its run lock. So ``cancel`` does
not append to a log another process is writing; it stores a request under
``run:cancel:<runId>`` in the run's key-value store (the same store as the log, so a
request made on one machine reaches a worker on another over Postgres) and then:

* if no process holds the run (it crashed, or was never resumed), takes the lock and
  appends ``RunCancelled`` itself;
* otherwise the owner sees the request within ``POLL_INTERVAL`` (a watcher task polls
  the key while the run executes: no cost per step), cancels its walk (steps in flight,
  map branches and sub-runs get ``asyncio.CancelledError``), appends ``RunCancelled``
  and stops with ``RunFailedError(cause_code="cancelled")``.

The request outlives the process that made it: a resume that finds one records the
cancellation instead of continuing, so a run cancelled while its owner was stuck or
dead never runs another step. Requests are made for the run and each of its unfinished
sub-runs, innermost first, so a parent never finishes with a child still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError
from little_workflow.events import RunCancelled, RunStatus
from little_workflow.ids import validate_id
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._state import RunState, fold, read_state, unfinished_sub_runs
from little_workflow.storage import StorageAdapter

if TYPE_CHECKING:
    from little_workflow.runtime._host import StoreHost
    from little_workflow.storage import PayloadLog

__all__ = [
    "CANCEL_PREFIX",
    "POLL_INTERVAL",
    "CancelOutcome",
    "CancelRequest",
    "cancel_key",
    "cancel_run",
    "lease_holder",
    "read_request",
    "record_cancelled",
    "watch",
    "write_request",
]

logger = logging.getLogger("little_workflow.runtime")

CANCEL_PREFIX = "run:cancel:"
#: Seconds between two looks at the request key while a run executes.
POLL_INTERVAL = 0.25


def cancel_key(run_id: str) -> str:
    """The key under which a cancellation of ``run_id`` is requested."""
    return CANCEL_PREFIX + validate_id(run_id, what="run id")


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """Who asked for a cancellation, when, and why."""

    reason: str | None
    requested_at: float
    pid: int

    def to_json(self) -> dict[str, JsonValue]:
        return {"reason": self.reason, "requestedAt": self.requested_at, "pid": self.pid}

    @classmethod
    def new(cls, reason: str | None) -> CancelRequest:
        return cls(reason=reason, requested_at=time.time(), pid=os.getpid())

    @classmethod
    def from_json(cls, value: JsonValue) -> CancelRequest:
        # A request is a flag first: a record this version cannot read still cancels.
        if not isinstance(value, dict):
            return cls(reason=None, requested_at=0.0, pid=0)
        reason, at, pid = value.get("reason"), value.get("requestedAt"), value.get("pid")
        return cls(
            reason=reason if isinstance(reason, str) else None,
            requested_at=float(at) if isinstance(at, int | float) else 0.0,
            pid=pid if isinstance(pid, int) else 0,
        )


async def read_request(kv: StorageAdapter, run_id: str) -> CancelRequest | None:
    """The pending cancellation request of ``run_id``, if any."""
    value = await kv.get(cancel_key(run_id))
    return None if value is None else CancelRequest.from_json(value)


async def write_request(kv: StorageAdapter, run_id: str, request: CancelRequest) -> None:
    """Store a cancellation request for ``run_id`` (a second request keeps the first)."""
    key = cancel_key(run_id)
    if await kv.get(key) is None:
        await kv.set(key, request.to_json())


@contextlib.asynccontextmanager
async def watch(
    kv: StorageAdapter, run_id: str, walk: asyncio.Task[JsonValue]
) -> AsyncIterator[list[CancelRequest]]:
    """While the block runs, cancel ``walk`` as soon as ``run_id`` has a request.

    Yields a list that holds the request once the watcher acted on it, so the caller can
    tell a cancellation it asked for from one that came from outside.
    """
    seen: list[CancelRequest] = []

    async def poll() -> None:
        while not walk.done():
            await asyncio.sleep(POLL_INTERVAL)
            try:
                request = await read_request(kv, run_id)
            except Exception as exc:
                # The run's own next append meets a store that is down; here, look again.
                logger.debug("run %r: reading its cancel request failed: %s", run_id, exc)
                request = None
            if request is not None:
                seen.append(request)
                walk.cancel()
                return

    watcher = asyncio.get_running_loop().create_task(poll(), name=f"cancel-watch {run_id}")
    try:
        yield seen
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


async def record_cancelled(
    events: PayloadLog, kv: StorageAdapter, state: RunState, request: CancelRequest
) -> None:
    """Append ``RunCancelled`` to a run this process holds, and drop the request."""
    await events.append(
        state.run_id,
        [RunCancelled(reason=request.reason)],
        sync=True,
        expected_seq=state.last_seq,
    )
    await kv.delete(cancel_key(state.run_id))


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """What ``Runtime.cancel`` saw: the run's status when it stopped waiting.

    ``status`` is ``CANCELLED`` once recorded; still ``RUNNING`` if the process that
    executes it did not act within the wait (the request stands: it will, or the next
    resume records it). ``recorded_by_owner`` says the running process recorded it.
    """

    run_id: str
    status: RunStatus
    recorded_by_owner: bool
    sub_run_ids: tuple[str, ...]


async def lease_holder(host: StoreHost, state: RunState) -> str | None:
    """The worker whose live lease covers ``state``'s run, if any.

    Its own lease (a submitted run, or a sub-run a worker's run queued), else an
    ancestor's (a sub-run driven inline, under its root's lease).
    """
    queue = host.store.queue
    if queue is None:
        return None
    current = state
    for _ in range(64):  # sub-runs nest at most 32 deep (_workflows._MAX_DEPTH)
        holder = await queue.holder(current.run_id)
        if holder is not None or current.parent_run_id is None:
            return holder
        current = await read_state(host.events, current.parent_run_id)
    return None


async def _free_to_cancel(host: StoreHost, state: RunState) -> bool:
    """Whether no worker's lease covers ``state``'s run, so it may be cancelled here.

    A run in the queue that nobody holds is settled there first (done, ``cancelled``),
    so no worker claims it while its cancellation is recorded; if one claimed it just
    before, it is the one to act.
    """
    if await lease_holder(host, state) is not None:
        return False
    queue = host.store.queue
    if queue is None or await queue.get(state.run_id) is None:
        return True
    return await queue.settle(state.run_id, "cancelled")


async def _unfinished_family(events: PayloadLog, state: RunState) -> list[RunState]:
    """``state`` and its unfinished sub-runs, parents before children."""
    family = [state]
    position = 0
    while position < len(family) and len(family) < 10_000:
        for sub_run_id in unfinished_sub_runs(family[position]):
            records = await events.read(sub_run_id)
            if records:
                sub_state = fold(sub_run_id, records)
                if not sub_state.finished:
                    family.append(sub_state)
        position += 1
    return family


async def cancel_run(
    host: StoreHost, run_id: str, *, reason: str | None, wait: float
) -> CancelOutcome:
    """Cancel ``run_id`` and its unfinished sub-runs (``Runtime.cancel``)."""
    state = await read_state(host.events, run_id)
    if state.finished:
        raise ConfigError(
            f"run {run_id!r} is already {state.status.value}; there is nothing to cancel",
            code="run_finished",
        )
    request = CancelRequest.new(reason)
    # Innermost first: a parent whose owner acts on its request at once must find
    # its children's requests already there, or a child could finish meanwhile.
    family = await _unfinished_family(host.events, state)
    for member in reversed(family):
        await write_request(host.kv, member.run_id, request)
    recorded_here = False
    for member in reversed(family):
        if not await _free_to_cancel(host, member):
            continue  # a worker holds it: it acts on the request within its poll
        lock = RunLock(host, member.run_id)
        if not await lock.try_acquire():
            continue
        try:
            current = await read_state(host.events, member.run_id)
            if not current.finished:
                await record_cancelled(host.events, host.kv, current, request)
                recorded_here = True
        finally:
            await lock.release()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        state = await read_state(host.events, run_id)
        if state.finished or loop.time() >= deadline:
            break
        await asyncio.sleep(min(POLL_INTERVAL / 2, max(0.0, deadline - loop.time())))
    return CancelOutcome(
        run_id=run_id,
        status=state.status,
        recorded_by_owner=state.finished and not recorded_here,
        sub_run_ids=tuple(member.run_id for member in family[1:]),
    )
