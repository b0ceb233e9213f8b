"""A worker wakes the runs that wait (docs/waits.md) and that no queue row looks after.

A run parked by a ``run``/``resume`` process (not a worker's claim) has no queue row: its
``run:waiting:<run id>`` record (``_waits.py``) is what says it waits. A worker looks at
those records every poll; a run is due when its timer's time has come, its event wait's
timeout has passed (by ``TIMEOUT_GRACE``), or an event arrived (``send`` marked the record
``ready``, or left the event in the mailbox). A due run is resumed like a recovered one:
under its run lock, tried without waiting (``Recovery.take``), so one worker drives it,
once; the walk replays to the wait, which now ends. A run a worker parked is woken by
its queue row instead (``RunQueue.release(..., not_before=...)``): claimed when due.
"""

from __future__ import annotations

import time

from little_workflow.codec import JsonValue
from little_workflow.events import RunStatus
from little_workflow.runtime._host import StoreHost
from little_workflow.runtime._waits import MAIL_PREFIX, NEVER, TIMEOUT_GRACE, WAITING_PREFIX

__all__ = ["due_runs", "not_before"]


async def due_runs(runtime: StoreHost) -> list[str]:
    """The root runs parked without a queue row that are due to continue, oldest first."""
    kv = runtime.kv
    keys = await kv.list(WAITING_PREFIX)
    if not keys:
        return []
    now = time.time()
    found: list[tuple[float, str]] = []
    for key, record in (await kv.get_many(keys)).items():
        if not isinstance(record, dict):
            continue
        run_id = key.removeprefix(WAITING_PREFIX)
        if not await _due(runtime, run_id, record, now):
            continue
        info = await runtime.events.get_run(run_id)
        if info is None or info.status is not RunStatus.RUNNING:
            await kv.delete(key)  # the run ended (cancelled, say) or is gone: a stale record
            continue
        if info.parent_run_id is not None:
            continue  # a sub-run continues with its root
        queue = runtime.store.queue
        entry = None if queue is None else await queue.get(run_id)
        if entry is not None and entry.state != "done":
            continue  # the queue wakes it
        since = record.get("since")
        found.append((float(since) if isinstance(since, int | float) else now, run_id))
    return [run_id for _, run_id in sorted(found)]


async def _due(runtime: StoreHost, run_id: str, record: dict[str, JsonValue], now: float) -> bool:
    # A root that waits because its sub-run does names the sub-run (``runId``): the
    # sub-run's own record says whether an event came (gone: its wait ended).
    target = record.get("runId")
    if isinstance(target, str) and target != run_id:
        own = await runtime.kv.get(WAITING_PREFIX + target)
        if not isinstance(own, dict) or own.get("ready"):
            return True
    else:
        target = run_id
    if record.get("ready"):
        return True
    event, wake = record.get("event"), record.get("wakeAt")
    if isinstance(wake, int | float) and now >= wake + (0.0 if event is None else TIMEOUT_GRACE):
        return True
    return event is not None and bool(await runtime.kv.list(f"{MAIL_PREFIX}{target}:"))


def not_before(waits: list[dict[str, object]]) -> float | None:
    """When a run parked with ``waits`` (``RunWaitingError.waits``) is due in the queue:
    its earliest timer or timeout; ``None`` for no wait at all (at once)."""
    times = []
    for wait in waits:
        wake = wait.get("wakeAt")
        if isinstance(wake, int | float):
            times.append(float(wake) + (0.0 if wait.get("event") is None else TIMEOUT_GRACE))
    return min(times) if times else (NEVER if waits else None)
