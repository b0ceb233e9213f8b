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
from typing import TYPE_CHECKING

from little_workflow.codec import JsonValue
from little_workflow.errors import ConflictError, RunFailedError
from little_workflow.runtime._worker import Worker
from little_workflow.storage import RunQueue, fenced

if TYPE_CHECKING:
    from little_workflow.runtime._runtime import Runtime
    from little_workflow.runtime._workflows import WorkflowVersion

__all__ = ["run_child_on_queue"]

#: Seconds between looks at a queued sub-run's log.
POLL_INTERVAL = 0.05


async def run_child_on_queue(
    runtime: Runtime,
    worker: Worker,
    queue: RunQueue,
    version: WorkflowVersion,
    input: JsonValue,
    *,
    run_id: str,
    parent_run_id: str,
    parent_step_path: str,
) -> JsonValue:
    """Queue the sub-run ``run_id`` (if not yet), wait for its end; its output."""
    if not await runtime.events.read(run_id, limit=1):
        # A previous holder of the parent may have committed it first: the same run.
        with contextlib.suppress(ConflictError):
            started = version.run_started(
                input, parent_run_id=parent_run_id, parent_step_path=parent_step_path
            )
            await runtime.events.append(run_id, [started], expected_seq=0)
    await queue.submit(run_id, parent_run_id=parent_run_id)
    loop = asyncio.get_running_loop()
    # Other workers first: an idle one claims within its poll interval. Only a sub-run
    # still unclaimed after that is driven here (no free worker, or none but this one).
    drive_after = loop.time() + 2 * worker.poll_interval
    while True:
        state = await runtime.get_state(run_id)
        if state.finished:
            return runtime.result_of(state).output
        claim = None
        if loop.time() >= drive_after:
            claim = await queue.claim_run(
                run_id, worker.worker_id, lease_seconds=worker.lease_seconds
            )
        if claim is not None:
            worker.hold(claim.fence)
            try:
                with fenced(claim.fence):
                    result = await runtime.execute_claim(claim)
            except RunFailedError as exc:
                outcome = "cancelled" if exc.cause_code == "cancelled" else "failed"
                await queue.finish(claim.fence, outcome)
                raise
            finally:
                worker.drop(claim.fence)
            await queue.finish(claim.fence, result.status.value)
            return result.output
        await asyncio.sleep(POLL_INTERVAL)
