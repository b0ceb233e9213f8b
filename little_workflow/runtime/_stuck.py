"""Runs that need a look: ``little-workflow runs --stuck``.

Three kinds, all of runs that nobody is driving now:

* ``lease_expired``: a submitted run whose worker's lease ran out (the worker died,
  paused or lost the database) and that no worker has claimed again yet. Workers claim
  such runs by themselves; one that stays here means no worker is running.
* ``intent_unreconciled``: an unfinished run with a side effect whose intent has no
  outcome (a crash mid-dispatch). Its next resume (or claim) reconciles it; until then
  nobody knows whether the effect happened.
* ``recovery_failed``: an interrupted run a worker tried to recover and could not resume
  (``runtime/_recovery.py``: code changed under it, a function gone...); workers retry
  it after a growing backoff, but it needs a look.
* ``interrupted``: any other unfinished run whose process died (``runtime/_liveness.py``):
  nothing carries it on until someone resumes it, or a worker recovers it.

A run that a worker's live lease or a local run lock holds is in flight, not stuck. A run
listed for an expired lease or an open intent is not listed again as ``interrupted``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from little_workflow.events import RunStatus
from little_workflow.runtime._cancel import lease_holder
from little_workflow.runtime._liveness import interrupted_runs
from little_workflow.runtime._recovery import recovery_failures
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._state import read_state

if TYPE_CHECKING:
    from little_workflow.runtime._host import ServiceHost
    from little_workflow.runtime._state import RunState

__all__ = ["StuckRun", "find_stuck_runs"]

#: How many unfinished runs are folded to look for open intents, newest first.
MAX_SCANNED = 1000


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckRun:
    """One run that needs a look, and why."""

    run_id: str
    reason: Literal["lease_expired", "intent_unreconciled", "recovery_failed", "interrupted"]
    #: One line for a person.
    detail: str
    worker_id: str | None = None
    step_path: str | None = None
    key: str | None = None


async def find_stuck_runs(runtime: ServiceHost) -> list[StuckRun]:
    """The stuck runs of ``runtime``'s store (see the module docstring)."""
    await runtime.open()
    queue = runtime.store.queue
    found: list[StuckRun] = []
    if queue is not None:
        for entry in await queue.expired():
            found.append(
                StuckRun(
                    run_id=entry.run_id,
                    reason="lease_expired",
                    detail=(
                        f"lease {entry.lease_token} of worker {entry.worker_id} expired; "
                        f"claimed {entry.attempts} time(s)"
                    ),
                    worker_id=entry.worker_id,
                )
            )
    listed = {item.run_id for item in found}
    unfinished = await runtime.events.list_runs(status=RunStatus.RUNNING, limit=MAX_SCANNED)
    interrupted = await interrupted_runs(runtime, unfinished)
    failures = await recovery_failures(runtime) if interrupted else {}
    for info in unfinished:
        state = await read_state(runtime.events, info.run_id)
        open_intents = [record for record in state.steps.values() if record.open_intent is not None]
        if open_intents and (info.run_id in interrupted or not await _in_flight(runtime, state)):
            found.extend(
                StuckRun(
                    run_id=info.run_id,
                    reason="intent_unreconciled",
                    detail=f"step {record.path}: intent {record.open_intent} has no outcome",
                    step_path=record.path,
                    key=record.open_intent,
                )
                for record in open_intents
            )
        elif info.run_id in interrupted and info.run_id in failures:
            failure = failures[info.run_id]
            retry = time.strftime("%H:%M:%S", time.localtime(failure.retry_at))
            found.append(
                StuckRun(
                    run_id=info.run_id,
                    reason="recovery_failed",
                    detail=(
                        f"a worker could not resume it ({failure.attempts} time(s), "
                        f"{failure.code}): {failure.message}; next try after {retry}"
                    ),
                    worker_id=failure.worker_id,
                )
            )
        elif info.run_id in interrupted and info.run_id not in listed:
            found.append(
                StuckRun(run_id=info.run_id, reason="interrupted", detail=interrupted[info.run_id])
            )
    return found


async def _in_flight(runtime: ServiceHost, state: RunState) -> bool:
    """Whether a worker's live lease or a process's run lock holds the run now."""
    if await lease_holder(runtime, state) is not None:
        return True
    lock = RunLock(runtime, state.run_id)
    if not await lock.try_acquire():
        return True
    await lock.release()
    return False
