"""A worker: claims submitted runs from the store's queue and drives them under leases.

Any number of workers point at one store: on any number of machines sharing a
PostgreSQL store, or on one machine sharing a SQLite file. Each
claims up to ``concurrency`` runs at a time (``RunQueue.claim``), drives each with
``Runtime.execute_claim`` under the claim's fence, and renews its leases every
``lease_seconds / 3``. What can happen to a run it holds:

* it ends (completed, failed, cancelled): the worker records the outcome in the queue,
  if its lease still holds;
* its lease is lost (this worker was paused past it, or cut off from the database): the
  next append raises ``LeaseLostError``, or the renewal finds the lease gone first and
  the worker cancels the run's task; either way the run is dropped here, with nothing
  more written, and the worker holding the newer lease resumes it by replay;
* the worker is asked to stop (``stop()``, SIGTERM/SIGINT from the CLI): it claims no
  more, cancels what it drives (nothing is recorded as cancelled: an interrupted walk
  just stops) and releases those leases, so another worker takes them at once;
* its code-first workflow cannot be imported here (``workflow_not_importable``: the module
  is not installed on this machine): nothing is written to the run, one line goes to the
  log, and the lease is released at once, so the run stays queued for a worker that can.

A worker killed outright releases nothing: its leases expire after ``lease_seconds``
and the runs are claimed again then (on SQLite at once: a lease dies with its process).

It also recovers runs it was never given: at start and then every ``recover_every``
seconds, runs started by ``run`` whose process died are resumed here, each by exactly one
worker, under the run's lock (``runtime/_recovery.py``). They share the ``concurrency``
slots with claimed runs.

And it starts the schedules' runs: every ``schedule_every`` seconds it looks at the
schedules and submits each due tick, under a run id that makes it exactly once across
workers (``runtime/_schedules.py``); the runs are queued and claimed like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Protocol

from little_workflow.errors import (
    LeaseLostError,
    LittleWorkflowError,
    RunFailedError,
    RunWaitingError,
)
from little_workflow.ids import new_id, validate_id
from little_workflow.runtime._distributed import QueueSubRunner, WorkerHost
from little_workflow.runtime._recovery import Recovery, RecoveryHost
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._schedules import ScheduleHost, Scheduler
from little_workflow.runtime._wakeups import due_runs, not_before
from little_workflow.storage import Claim, Fence, RunQueue

__all__ = ["Worker", "WorkerReport"]

_log = logging.getLogger("little_workflow.worker")


class WorkerRuntime(WorkerHost, RecoveryHost, ScheduleHost, Protocol):
    """What a worker uses of the runtime: claims and their sub-runs, recovery, and
    ``submit`` for the schedules' ticks."""


@dataclass(slots=True)
class WorkerReport:
    """What a worker did until it stopped."""

    worker_id: str
    #: Runs it drove to an end, by outcome (``completed``, ``failed``, ``cancelled``).
    finished: dict[str, int] = field(default_factory=dict)
    #: Runs dropped because the lease was lost (a write refused, or a renewal).
    leases_lost: int = 0
    #: Runs given back when it stopped.
    released: int = 0
    #: Claims given back at once because their workflow could not be imported here.
    not_importable: int = 0
    #: Runs that ended in an error other than the run's own failure (storage down...);
    #: their leases lapse and another worker retries them.
    errors: int = 0
    #: Interrupted runs recovered here that reached an end (also counted in ``finished``).
    recovered: int = 0
    #: Attempts at recovering a run that failed before it ended (retried after a backoff).
    recovery_failures: int = 0
    #: Runs of schedules' ticks submitted here.
    scheduled: int = 0
    #: Times a run driven here parked at a wait (its slot freed; docs/waits.md).
    parked: int = 0
    #: Waiting runs without a queue row woken here (a timer due, an event arrived).
    woken: int = 0


class Worker:
    """Claims and drives queued runs of ``runtime``'s store; see the module docstring."""

    def __init__(
        self,
        runtime: WorkerRuntime,
        *,
        worker_id: str | None = None,
        concurrency: int = 4,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.5,
        recover_every: float | None = 5.0,
        schedule_every: float | None = 1.0,
    ) -> None:
        """``recover_every``: seconds between looks for interrupted runs to recover (the
        first at start); ``schedule_every``: seconds between looks for due schedule
        ticks; ``None`` or ``0`` switches either off."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if lease_seconds <= 0:
            raise ValueError(f"lease_seconds must be positive, not {lease_seconds}")
        if recover_every is not None and recover_every < 0:
            raise ValueError(f"recover_every must not be negative, not {recover_every}")
        if schedule_every is not None and schedule_every < 0:
            raise ValueError(f"schedule_every must not be negative, not {schedule_every}")
        self.runtime = runtime
        self.worker_id = (
            new_id("worker") if worker_id is None else validate_id(worker_id, what="worker id")
        )
        self.concurrency = concurrency
        self.lease_seconds = lease_seconds
        self.poll_interval = poll_interval
        self.report = WorkerReport(worker_id=self.worker_id)
        self._recovery = (
            Recovery(runtime, worker_id=self.worker_id, interval=recover_every)
            if recover_every
            else None
        )
        self._scheduler = (
            Scheduler(runtime, worker_id=self.worker_id, interval=schedule_every)
            if schedule_every
            else None
        )
        self._schedule_failures = 0
        #: Takes and resumes due waiting runs the way recovery does (``_wakeups.py``).
        self._waker = Recovery(runtime, worker_id=self.worker_id, interval=poll_interval)
        #: Runs recovered here and being driven, under their run locks.
        self._recovering: dict[str, asyncio.Task[None]] = {}
        self._running: dict[str, tuple[Fence, asyncio.Task[None]]] = {}
        #: Fences whose lease a renewal found gone: their tasks were cancelled once.
        self._lapsed: set[Fence] = set()
        #: Tasks of lapsed leases, cancelled and still unwinding (their slots are free).
        self._draining: dict[Fence, asyncio.Task[None]] = {}
        #: Leases held for sub-runs a run of ours drives itself (``hold``): renewed too.
        self._extra: set[Fence] = set()
        #: Runs whose workflow this worker could not import (logged once each).
        self._unimportable: set[str] = set()
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    def stop(self) -> None:
        """Stop claiming; cancel and release the runs held (``run`` then returns)."""
        self._stopping.set()
        self._wake.set()

    async def run(self, *, max_runs: int | None = None) -> WorkerReport:
        """Work until ``stop()`` (or, with ``max_runs``, until that many runs ended here)."""
        await self.runtime.open()
        queue = self.runtime.queue
        await queue.register_worker(
            self.worker_id, host=socket.gethostname(), pid=os.getpid(), concurrency=self.concurrency
        )
        heartbeat = asyncio.create_task(self._heartbeat(queue), name="worker heartbeat")
        failures = 0
        loop = asyncio.get_running_loop()
        next_recovery = next_schedule = loop.time()
        try:
            while not self._stopping.is_set():
                if max_runs is not None and self._ended() >= max_runs:
                    break
                if self._recovery is not None and loop.time() >= next_recovery:
                    await self._recover(self._recovery)
                    next_recovery = loop.time() + self._recovery.interval
                if self._scheduler is not None and loop.time() >= next_schedule:
                    next_schedule = loop.time() + await self._schedule(self._scheduler)
                await self._wake_due()
                free = self.concurrency - len(self._running) - len(self._recovering)
                pause = self.poll_interval
                if free > 0:
                    try:
                        claims = await queue.claim(
                            self.worker_id, limit=free, lease_seconds=self.lease_seconds
                        )
                    except LittleWorkflowError as exc:
                        # The database is unreachable (a restart, a cut network): keep
                        # the runs we drive, and try again, more slowly, until it is back.
                        failures += 1
                        pause = min(self.poll_interval * 2**failures, 5.0)
                        _log.warning("worker %s: cannot claim runs: %s", self.worker_id, exc)
                        claims = []
                    else:
                        failures = 0
                    for claim in claims:
                        self._start(queue, claim)
                self._wake.clear()
                if self._scheduler is not None:
                    pause = min(pause, max(next_schedule - loop.time(), 0.0))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), pause)
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self._release_all(queue)
            with contextlib.suppress(LittleWorkflowError):
                await queue.stop_worker(self.worker_id)
        return self.report

    async def _recover(self, recovery: Recovery) -> None:
        """Take and start as many interrupted runs as there are free slots."""
        free = self.concurrency - len(self._running) - len(self._recovering)
        if free < 1:
            return
        try:
            candidates = await recovery.candidates()
            for run_id in candidates:
                if free < 1 or self._stopping.is_set():
                    break
                if run_id in self._recovering:
                    continue
                lock = await recovery.take(run_id)
                if lock is None:
                    continue  # another worker (or a ``resume``) drives it
                _log.info("worker %s: recovering interrupted run %s", self.worker_id, run_id)
                task = asyncio.create_task(
                    self._drive_recovered(recovery, run_id, lock), name=f"recover run {run_id}"
                )
                self._recovering[run_id] = task
                free -= 1
        except LittleWorkflowError as exc:
            # The store is unreachable: the next look tries again.
            _log.warning("worker %s: cannot look for runs to recover: %s", self.worker_id, exc)

    async def _wake_due(self) -> None:
        """Resume the waiting runs with no queue row whose timer or event came."""
        free = self.concurrency - len(self._running) - len(self._recovering)
        if free < 1 or self._stopping.is_set():
            return
        try:
            for run_id in await due_runs(self.runtime):
                if free < 1:
                    break
                if run_id in self._recovering:
                    continue
                lock = await self._waker.take(run_id)
                if lock is None:
                    continue  # another worker (or a ``resume``) drives it
                _log.info("worker %s: waking waiting run %s", self.worker_id, run_id)
                self.report.woken += 1
                task = asyncio.create_task(
                    self._drive_recovered(self._waker, run_id, lock), name=f"wake run {run_id}"
                )
                self._recovering[run_id] = task
                free -= 1
        except LittleWorkflowError as exc:
            _log.warning("worker %s: cannot look for waiting runs: %s", self.worker_id, exc)

    async def _schedule(self, scheduler: Scheduler) -> float:
        """Submit the schedules' due ticks (claimed at the next claim, here or elsewhere);
        the seconds until the next look."""
        try:
            self.report.scheduled += len(await scheduler.look())
        except LittleWorkflowError as exc:
            # The store is unreachable, or a schedule record is corrupt: look again, more
            # slowly (one line per failed look), while the worker's runs go on. A tick
            # missed meanwhile is caught up by its schedule's policy.
            self._schedule_failures = min(self._schedule_failures + 1, 16)
            _log.warning("worker %s: cannot look at the schedules: %s", self.worker_id, exc)
            return min(scheduler.interval * 2.0**self._schedule_failures, 30.0)
        self._schedule_failures = 0
        return scheduler.interval

    async def _drive_recovered(self, recovery: Recovery, run_id: str, lock: RunLock) -> None:
        try:
            outcome = await recovery.resume(run_id, lock)
            if outcome is None:
                self.report.recovery_failures += 1
            elif outcome == "waiting":
                self.report.parked += 1
            else:
                self.report.recovered += 1
                self.report.finished[outcome] = self.report.finished.get(outcome, 0) + 1
        except Exception:
            self.report.errors += 1
            _log.exception("worker %s: recovering run %s failed", self.worker_id, run_id)
        finally:
            self._recovering.pop(run_id, None)
            self._wake.set()

    def _ended(self) -> int:
        report = self.report
        return sum(report.finished.values()) + report.leases_lost + report.errors

    def hold(self, fence: Fence) -> None:
        """Keep renewing ``fence`` (a sub-run a run of ours claimed to drive itself)."""
        self._extra.add(fence)

    def drop(self, fence: Fence) -> None:
        """Stop renewing ``fence``."""
        self._extra.discard(fence)

    def _start(self, queue: RunQueue, claim: Claim) -> None:
        task = asyncio.create_task(self._drive(queue, claim), name=f"worker run {claim.run_id}")
        self._running[claim.run_id] = (claim.fence, task)

    async def _drive(self, queue: RunQueue, claim: Claim) -> None:
        fence = claim.fence
        # The run's sub-runs are queued for any worker (``_distributed``).
        sub_runner = QueueSubRunner(self.runtime, self, queue)
        try:
            try:
                result = await self.runtime.execute_claim(claim, sub_runner=sub_runner)
                outcome = result.status.value
            except RunFailedError as exc:
                outcome = "cancelled" if exc.cause_code == "cancelled" else "failed"
            except RunWaitingError as exc:
                # The run parked at a wait: its slot is free, and its row is claimable
                # again when its timer or timeout comes (or at once, after a ``send``).
                await queue.release(fence, not_before=not_before(exc.waits))
                self.report.parked += 1
                return
            if await queue.finish(fence, outcome):
                self.report.finished[outcome] = self.report.finished.get(outcome, 0) + 1
            else:
                # The run ended, but another worker holds it now: its outcome is theirs
                # to record (they will replay to the same end).
                self.report.leases_lost += 1
        except LeaseLostError:
            self.report.leases_lost += 1
            _log.warning("worker %s: lost the lease on run %s", self.worker_id, claim.run_id)
        except asyncio.CancelledError:
            if fence in self._lapsed:
                self.report.leases_lost += 1  # cancelled by the heartbeat: lease gone
            raise
        except Exception as exc:
            if isinstance(exc, LittleWorkflowError) and exc.code == "workflow_not_importable":
                await self._give_back(queue, claim, exc)
            else:
                self.report.errors += 1
                _log.exception("worker %s: run %s ended in an error", self.worker_id, claim.run_id)
        finally:
            entry = self._running.get(claim.run_id)
            if entry is not None and entry[0] == fence:
                del self._running[claim.run_id]
            self._draining.pop(fence, None)
            self._lapsed.discard(fence)
            self._wake.set()

    async def _give_back(self, queue: RunQueue, claim: Claim, error: LittleWorkflowError) -> None:
        """Release a run whose workflow this worker cannot import, for a worker that can."""
        self.report.not_importable += 1
        if claim.run_id not in self._unimportable:
            self._unimportable.add(claim.run_id)
            message = " ".join(str(error).split())
            _log.warning(
                "worker %s: run %s released: %s: %s",
                self.worker_id,
                claim.run_id,
                error.code,
                message,
            )
        entry = self._running.get(claim.run_id)
        if entry is not None and entry[0] == claim.fence:
            del self._running[claim.run_id]  # no more renewals of a lease given back
        with contextlib.suppress(LittleWorkflowError):
            await queue.release(claim.fence)
        # The run is queued again, and a claim here at once would get it back: this
        # worker's next claim waits a poll interval, so that another can take it meanwhile.
        await asyncio.sleep(self.poll_interval)

    async def _heartbeat(self, queue: RunQueue) -> None:
        interval = self.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                held = [fence for fence, _ in self._running.values()] + sorted(
                    self._extra, key=lambda fence: fence.token
                )
                renewed = await queue.renew(self.worker_id, held, lease_seconds=self.lease_seconds)
                await queue.heartbeat_worker(self.worker_id)
            except LittleWorkflowError:
                # The database is unreachable: keep driving; a lease that lapses
                # meanwhile shows at the next append or renewal.
                _log.warning("worker %s: could not renew its leases", self.worker_id)
                continue
            for fence in held:
                if fence.run_id not in renewed and fence not in self._lapsed:
                    entry = self._running.get(fence.run_id)
                    if entry is not None and entry[0] == fence:
                        self._lapsed.add(fence)
                        _log.warning(
                            "worker %s: the lease on run %s lapsed; dropping it",
                            self.worker_id,
                            fence.run_id,
                        )
                        entry[1].cancel()
                        # Its slot is free now: the task may take a while to unwind (a
                        # query on a connection that died with the network), and
                        # nothing it does can be committed any more.
                        del self._running[fence.run_id]
                        self._draining[fence] = entry[1]
                        self._wake.set()

    async def _release_all(self, queue: RunQueue) -> None:
        # A recovered run just stops, interrupted again; its lock is released as its
        # task unwinds, and the next look (here or at another worker) recovers it.
        recovering = list(self._recovering.values())
        for task in recovering:
            task.cancel()
        for task in recovering:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        running = list(self._running.values()) + list(self._draining.items())
        for _, task in running:
            task.cancel()
        for fence, task in running:
            lapsed = fence in self._lapsed
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            if lapsed:
                continue  # counted as lost by its task; nothing to give back
            with contextlib.suppress(LittleWorkflowError):
                if await queue.release(fence):
                    self.report.released += 1
