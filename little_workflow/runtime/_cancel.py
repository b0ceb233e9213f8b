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

from little_workflow.codec import JsonValue
from little_workflow.ids import validate_id
from little_workflow.storage import StorageAdapter

__all__ = [
    "CANCEL_PREFIX",
    "POLL_INTERVAL",
    "CancelRequest",
    "cancel_key",
    "read_request",
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
