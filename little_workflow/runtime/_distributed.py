"""Sub-runs spread over workers: how a worker's run hands its sub-runs to the queue.

Inline, a ``workflow`` step runs its sub-run in the same process (``Runtime.run_child``).
Under a worker, it queues it instead, so a map whose body is a ``workflow`` step fans out
over every worker:

1. the sub-run's ``RunStarted`` is committed (fenced by the parent's lease), then the
   sub-run is queued, naming its parent (``RunQueue.submit``): queued sub-runs are
   claimed before the backlog, since a parent is waiting;
2. the parent waits for the sub-run's end, reading its log. If no other worker claimed
   the sub-run within two of this worker's poll intervals (an idle worker would have),
   the parent claims it itself (``RunQueue.claim_run``) and drives it in this task,
   under the sub-run's own lease (renewed with the worker's). So a worker whose every
   slot holds a waiting parent still makes progress, and a lone worker runs everything
   itself.

Every append stays fenced: the sub-run's by its own lease, wherever it runs. A parent
that loses its lease while waiting stops at its next append; the sub-run carries on
wherever it is, and the parent's next holder finds it by the id its ``SubRunStarted``
recorded, and waits for it again.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

from little_workflow._tracing import queued
from little_workflow.codec import JsonValue
from little_workflow.errors import ConflictError, RunFailedError
from little_workflow.runtime._launch import result_of
from little_workflow.runtime._state import read_state
from little_workflow.storage import Claim, Fence, RunQueue, fenced

if TYPE_CHECKING:
    from little_workflow.runtime._host import SubRunner
    from little_workflow.runtime._launch import RunResult
    from little_workflow.runtime._workflows import WorkflowVersion
    from little_workflow.storage import PayloadLog

__all__ = ["ClaimHost", "QueueSubRunner", "WorkerHost", "run_child_on_queue"]

#: Seconds between looks at a queued sub-run's log.
POLL_INTERVAL = 0.05


class ClaimHost(Protocol):
    """What queueing a sub-run uses of the runtime (a ``Runtime``)."""

    @property
    def events(self) -> PayloadLog:
        """The run log."""
        ...

    async def execute_claim(
        self, claim: Claim, *, sub_runner: SubRunner | None = None
    ) -> RunResult:
        """Drive a claimed run under its lease."""
        ...

    def check_callables(self, version: WorkflowVersion, *, trusted: bool | None = None) -> None:
        """Fail if ``version`` names a function or tool this runtime lacks."""
        ...

    async def run_child(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool = False,
        sub_runner: SubRunner | None = None,
    ) -> JsonValue:
        """Start or continue a sub-run in this process."""
        ...


class WorkerHost(ClaimHost, Protocol):
    """What a ``Worker`` uses of its runtime (a ``Runtime``)."""

    @property
    def queue(self) -> RunQueue:
        """The store's run queue."""
        ...

    async def open(self) -> object:
        """Open the store (idempotent)."""
        ...


class Leases(Protocol):
    """The worker whose run queues the sub-run: its id, lease and renewals."""

    @property
    def worker_id(self) -> str:
        """Who claims."""
        ...

    @property
    def poll_interval(self) -> float:
        """Seconds an idle worker waits between claims."""
        ...

    @property
    def lease_seconds(self) -> float:
        """How long a claim's lease lasts unless renewed."""
        ...

    def hold(self, fence: Fence) -> None:
        """Keep renewing ``fence``."""
        ...

    def drop(self, fence: Fence) -> None:
        """Stop renewing ``fence``."""
        ...


class QueueSubRunner:
    """The sub-runner of a worker's runs: each sub-run is queued for any worker.

    Built by ``Worker`` and passed to ``Runtime.execute_claim``. A retry of a failed
    run runs its sub-runs here instead, their own sub-runs still queued.
    """

    def __init__(self, runtime: ClaimHost, worker: Leases, queue: RunQueue) -> None:
        self.runtime = runtime
        self.worker = worker
        self.queue = queue

    async def run_child(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool = False,
    ) -> JsonValue:
        """Queue the sub-run and wait for its output (inline for a retry)."""
        # As inline: a sub-workflow naming what this runtime lacks fails here, in the
        # parent, before anything is queued.
        self.runtime.check_callables(version)
        if retry_failed:
            return await self.runtime.run_child(
                version,
                input,
                run_id=run_id,
                parent_run_id=parent_run_id,
                parent_step_path=parent_step_path,
                retry_failed=True,
                sub_runner=self,
            )
        return await run_child_on_queue(
            self,
            version,
            input,
            run_id=run_id,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
        )


async def run_child_on_queue(
    runner: QueueSubRunner,
    version: WorkflowVersion,
    input: JsonValue,
    *,
    run_id: str,
    parent_run_id: str,
    parent_step_path: str,
) -> JsonValue:
    """Queue the sub-run ``run_id`` (if not yet), wait for its end; its output."""
    runtime, worker, queue = runner.runtime, runner.worker, runner.queue
    if not await runtime.events.read(run_id, limit=1):
        # A previous holder of the parent may have committed it first: the same run.
        with contextlib.suppress(ConflictError):
            started = version.run_started(
                input, parent_run_id=parent_run_id, parent_step_path=parent_step_path
            )
            await runtime.events.append(run_id, [queued(started, run_id)], expected_seq=0)
    await queue.submit(run_id, parent_run_id=parent_run_id)
    loop = asyncio.get_running_loop()
    # Other workers first: an idle one claims within its poll interval. Only a sub-run
    # still unclaimed after that is driven here (no free worker, or none but this one).
    drive_after = loop.time() + 2 * worker.poll_interval
    while True:
        state = await read_state(runtime.events, run_id)
        if state.finished:
            return result_of(state).output
        claim = None
        if loop.time() >= drive_after:
            claim = await queue.claim_run(
                run_id, worker.worker_id, lease_seconds=worker.lease_seconds
            )
        if claim is not None:
            worker.hold(claim.fence)
            try:
                with fenced(claim.fence):
                    result = await runtime.execute_claim(claim, sub_runner=runner)
            except RunFailedError as exc:
                outcome = "cancelled" if exc.cause_code == "cancelled" else "failed"
                await queue.finish(claim.fence, outcome)
                raise
            finally:
                worker.drop(claim.fence)
            await queue.finish(claim.fence, result.status.value)
            return result.output
        await asyncio.sleep(POLL_INTERVAL)
