"""Recovery: a worker resumes the runs whose driving process died.

A run started by ``little-workflow run`` (or ``Runtime.run``/``resume``) is driven under its
run lock (``runtime/_run_lock.py``). If that process dies, the run is *interrupted*
(``runtime/_liveness.py`` decides: no live lock holder, no lease, no queue row) and
nothing carries it on. A worker looks for such runs when it starts and then every
``interval`` seconds, as DBOS recovers pending workflows at launch:

1. the candidates: unfinished *root* runs that ``_liveness`` finds interrupted and that
   the run queue has no row for (a submitted run is the queue's: lease expiry takes it
   over). A sub-run is recovered through its root: an inline sub-run resumes when its
   root resumes, under the root's lock, as it ran before;
2. for each, the run lock is tried without waiting: a lock another process holds (another
   worker recovering it, a ``resume`` by hand) means someone else drives it: skip;
3. under the lock, it is checked again that the run is unfinished and has no queue row
   (the first look was taken without the lock);
4. then it is resumed (``RunResumed`` with reason ``recover`` and this process's pid) in
   one of the worker's slots, still under that lock, released when the drive ends.

Exactly one driver: the run lock is the one ``run`` and ``resume`` take (a file lock on
this machine; on PostgreSQL also the advisory lock every machine sharing the store sees).

A run whose resume fails before it ends (``CapabilityDriftError`` after the code changed,
a workflow that no longer loads, a function gone) is not retried at once: the failure is
kept in the store (key ``run:recovery:<run id>``, so every worker sees it), logged in one
line, listed by ``runs --stuck`` (``recovery_failed``), and retried after a backoff that
doubles each time (from ``2 * max(interval, 1 s)`` up to an hour). Once the run ends
(recovered, or resumed by hand) the record is deleted, at the next look.

A run created with nothing but its ``RunStarted`` less than ``FRESH_SECONDS`` ago is left
alone: it may be a ``submit`` between its two writes (the run, then its queue row).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from little_workflow.codec import JsonValue
from little_workflow.errors import LittleWorkflowError, RunWaitingError
from little_workflow.events import RunStatus
from little_workflow.ids import validate_id
from little_workflow.runtime._host import StoreHost
from little_workflow.runtime._liveness import interrupted_runs
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._state import read_state

if TYPE_CHECKING:
    from little_workflow.runtime._launch import RunResult
    from little_workflow.runtime._state import RunState

__all__ = ["RECOVERY_PREFIX", "Recovery", "RecoveryFailure", "recovery_failures"]

_log = logging.getLogger("little_workflow.worker")

#: KV prefix of the failures recorded for runs that could not be recovered.
RECOVERY_PREFIX = "run:recovery:"
#: Longest wait between two attempts at a run that keeps failing to resume.
MAX_BACKOFF = 3600.0
#: How many unfinished runs one look scans, newest first.
MAX_SCANNED = 1000
#: A run with only its ``RunStarted``, younger than this, may be a submit in progress.
FRESH_SECONDS = 5.0


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoveryFailure:
    """The last failed attempt at recovering a run, and when the next one may start."""

    run_id: str
    attempts: int
    #: The error's stable code (``capability_drift``...) and its message.
    code: str
    message: str
    failed_at: float
    retry_at: float
    worker_id: str | None

    def to_json(self) -> dict[str, JsonValue]:
        """The stored form."""
        return {
            "attempts": self.attempts,
            "code": self.code,
            "message": self.message,
            "failedAt": self.failed_at,
            "retryAt": self.retry_at,
            "workerId": self.worker_id,
        }

    @classmethod
    def from_json(cls, run_id: str, value: JsonValue) -> RecoveryFailure | None:
        """Read a stored failure; ``None`` if it is not one (then it is ignored)."""
        if not isinstance(value, dict):
            return None
        attempts, failed, retry = value.get("attempts"), value.get("failedAt"), value.get("retryAt")
        if (
            not isinstance(attempts, int)
            or not isinstance(failed, int | float)
            or not isinstance(retry, int | float)
        ):
            return None
        worker = value.get("workerId")
        return cls(
            run_id=run_id,
            attempts=attempts,
            code=str(value.get("code", "")),
            message=str(value.get("message", "")),
            failed_at=float(failed),
            retry_at=float(retry),
            worker_id=worker if isinstance(worker, str) else None,
        )


class RecoveryHost(StoreHost, Protocol):
    """What recovery uses of the runtime: the store, and resuming under a held lock."""

    async def resume_held(self, state: RunState, *, reason: str = "resume") -> RunResult:
        """Continue ``state``'s run under a run lock the caller holds."""
        ...


def _key(run_id: str) -> str:
    return RECOVERY_PREFIX + validate_id(run_id, what="run id")


async def recovery_failures(runtime: StoreHost) -> dict[str, RecoveryFailure]:
    """The recorded failures to recover runs, by run id."""
    kv = runtime.kv
    keys = await kv.list(RECOVERY_PREFIX)
    found: dict[str, RecoveryFailure] = {}
    for key, value in (await kv.get_many(keys)).items():
        run_id = key.removeprefix(RECOVERY_PREFIX)
        failure = RecoveryFailure.from_json(run_id, value)
        if failure is not None:
            found[run_id] = failure
    return found


async def clear_failure(runtime: StoreHost, run_id: str) -> None:
    """Forget a recorded recovery failure of ``run_id`` (it was resumed)."""
    await runtime.kv.delete(_key(run_id))


class Recovery:
    """One worker's recovery: finds interrupted runs, takes them, resumes them."""

    def __init__(self, runtime: RecoveryHost, *, worker_id: str, interval: float) -> None:
        self.runtime = runtime
        self.worker_id = worker_id
        self.interval = interval

    async def candidates(self) -> list[str]:
        """Interrupted root runs that no queue row covers and no backoff holds back,
        oldest first."""
        runtime = self.runtime
        unfinished = await runtime.events.list_runs(status=RunStatus.RUNNING, limit=MAX_SCANNED)
        failures = await recovery_failures(runtime)
        if failures and len(unfinished) < MAX_SCANNED:
            # A run that ended since (resumed by hand, cancelled) or was deleted: its record
            # would only grow the list every look reads.
            running = {info.run_id for info in unfinished}
            for run_id in sorted(failures.keys() - running):
                await clear_failure(runtime, run_id)
        now = time.time()
        roots = [
            info
            for info in unfinished
            if info.parent_run_id is None
            and not (info.last_seq <= 1 and now - info.created_at < FRESH_SECONDS)
        ]
        if not roots:
            return []
        interrupted = await interrupted_runs(runtime, roots)
        if not interrupted:
            return []
        queue = runtime.store.queue
        found = []
        for info in reversed(roots):  # oldest first
            if info.run_id not in interrupted:
                continue
            failure = failures.get(info.run_id)
            if failure is not None and failure.retry_at > now:
                continue
            if queue is not None and await queue.get(info.run_id) is not None:
                continue
            found.append(info.run_id)
        return found

    async def take(self, run_id: str) -> RunLock | None:
        """The run's lock if it was free and the run still needs recovering (the caller
        resumes it and releases the lock); ``None`` if someone else has it."""
        lock = RunLock(self.runtime, run_id, purpose=f"run {run_id!r} (recovered)")
        if not await lock.try_acquire():
            return None
        try:
            state = await read_state(self.runtime.events, run_id)
            queue = self.runtime.store.queue
            if state.finished or (queue is not None and await queue.get(run_id) is not None):
                await lock.release()
                return None
        except BaseException:
            await lock.release()
            raise
        return lock

    async def resume(self, run_id: str, lock: RunLock) -> str | None:
        """Resume ``run_id`` under ``lock`` (released here); its outcome (``waiting`` if it
        parked at a wait), or ``None`` if it could not be resumed (the failure is
        recorded, and retried after a backoff)."""
        runtime = self.runtime
        try:
            try:
                state = await read_state(runtime.events, run_id)
                await runtime.resume_held(state, reason="recover")
            except Exception as exc:  # the run's own failure ends it: told apart below
                error: Exception | None = exc
            else:
                error = None
            state = await read_state(runtime.events, run_id)
            if state.finished:
                with contextlib.suppress(LittleWorkflowError):
                    await clear_failure(runtime, run_id)
                return state.status.value
            if isinstance(error, RunWaitingError):
                # Woken or recovered to a wait that cannot end yet: it parked again
                # (docs/waits.md), which is no failure.
                with contextlib.suppress(LittleWorkflowError):
                    await clear_failure(runtime, run_id)
                return "waiting"
            if error is None:  # pragma: no cover - a drive returns only at an end
                return None
            await self._record(run_id, error)
            return None
        finally:
            await lock.release()

    async def _record(self, run_id: str, error: Exception) -> None:
        previous = (await recovery_failures(self.runtime)).get(run_id)
        attempts = 1 if previous is None else previous.attempts + 1
        wait = min(2 * max(self.interval, 1.0) * 2 ** (attempts - 1), MAX_BACKOFF)
        now = time.time()
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        code = error.code if isinstance(error, LittleWorkflowError) else type(error).__name__
        failure = RecoveryFailure(
            run_id=run_id,
            attempts=attempts,
            code=code,
            message=message,
            failed_at=now,
            retry_at=now + wait,
            worker_id=self.worker_id,
        )
        await self.runtime.kv.set(_key(run_id), failure.to_json())
        _log.warning(
            "worker %s: cannot recover run %s (attempt %d, %s): %s; next try in %.0f s",
            self.worker_id,
            run_id,
            attempts,
            code,
            message,
            wait,
        )
