"""The run queue: submitted runs, claimed by workers under leases with fencing tokens.

A run is submitted once (``submit``); a worker ``claim``s ready runs, each under a lease
that ends ``lease_seconds`` after the claim unless ``renew``ed, with a token larger
than every token issued before it. The claimed run's appends carry that token
(``storage/_fence.py``) and are refused once the lease has expired or another worker
holds a newer one, so a worker that was paused (GC, SIGSTOP, a cut network) past its
lease cannot write after the run moved on. A run whose lease expired is claimable again:
its next holder resumes it from the log by replay. ``finish`` records the outcome, only
for the current holder.

Clocks: lease times are the database server's, the one clock every worker shares; on SQLite,
whose workers all run on one machine, that machine's, and a lease also ends with the process
that claimed it (``_queue_sqlite.py``). ``testing/runqueue_conformance.py`` is the contract.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, runtime_checkable

from little_workflow.storage._fence import Fence
from little_workflow.storage._limits import DEFAULT_QUEUE, Limit, LimitKind, Permit

__all__ = ["Claim", "QueueEntry", "RunQueue", "WorkerInfo"]

QueueState = Literal["queued", "leased", "done"]


@dataclass(frozen=True, slots=True)
class Claim:
    """A run a worker now holds: its fence, and how many times it was claimed so far."""

    fence: Fence
    attempts: int
    #: When the lease ends unless renewed (server clock, seconds since the epoch).
    expires_at: float

    @property
    def run_id(self) -> str:
        """The claimed run."""
        return self.fence.run_id


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """A submitted run's row in the queue."""

    run_id: str
    state: QueueState
    submitted_at: float
    worker_id: str | None
    lease_token: int | None
    lease_expires_at: float | None
    attempts: int
    finished_at: float | None
    #: The run's status when it finished (``completed``, ``failed``, ``cancelled``).
    outcome: str | None
    #: The queue it was submitted to (``storage/_limits.py``).
    queue: str = DEFAULT_QUEUE

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> QueueEntry:
        """An entry from a ``run_queue`` row in field order (every backend's ``SELECT``)."""
        run_id, state, submitted, worker, token, expires, attempts, finished, outcome = row[:9]
        queue = str(row[9]) if len(row) > 9 else DEFAULT_QUEUE
        return cls(
            run_id=run_id,
            state=cast(QueueState, state),
            submitted_at=float(submitted),
            worker_id=worker,
            lease_token=None if token is None else int(token),
            lease_expires_at=None if expires is None else float(expires),
            attempts=int(attempts),
            finished_at=None if finished is None else float(finished),
            outcome=outcome,
            queue=queue,
        )


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A registered worker and the runs it holds now."""

    worker_id: str
    host: str
    pid: int
    concurrency: int
    started_at: float
    heartbeat_at: float
    stopped_at: float | None
    #: ``(run id, lease token, lease expires at)`` of each run it holds.
    runs: tuple[tuple[str, int, float], ...]


@runtime_checkable
class RunQueue(Protocol):
    """Where submitted runs wait for a worker. See the module docstring."""

    async def submit(
        self, run_id: str, *, parent_run_id: str | None = None, queue: str = DEFAULT_QUEUE
    ) -> bool:
        """Queue ``run_id`` on ``queue``; ``False`` if it was submitted before (nothing
        changes).

        A sub-run handed to the queue by a worker's run names its parent: such runs are
        claimed before the backlog, since a parent is waiting for them, and take no
        place in any queue's limit (the parent holds one already).
        """
        ...

    async def claim_run(self, run_id: str, worker_id: str, *, lease_seconds: float) -> Claim | None:
        """Claim ``run_id`` itself if nobody holds it; ``None`` if someone does or it is done."""
        ...

    async def claim(self, worker_id: str, *, limit: int, lease_seconds: float) -> list[Claim]:
        """Up to ``limit`` ready runs (queued, or leased and expired), oldest first.

        A run of a queue with a stored limit is claimable only while the queue has fewer
        than ``concurrency`` runs under live leases and fewer than ``rate.count`` claims
        in the last ``rate.per`` seconds, counted and taken in one transaction. A run
        that cannot be claimed for its queue's limit does not hold up other queues' runs.
        """
        ...

    async def renew(
        self, worker_id: str, fences: Sequence[Fence], *, lease_seconds: float
    ) -> set[str]:
        """Extend the leases still held; the run ids whose lease was renewed.

        A lease that expired is lost even if nobody claimed the run yet.
        """
        ...

    async def finish(self, fence: Fence, outcome: str) -> bool:
        """Mark the run done with ``outcome``; ``False`` if ``fence`` no longer holds it."""
        ...

    async def release(self, fence: Fence, *, not_before: float | None = None) -> bool:
        """Give the run back (queued again); ``False`` if not held.

        Claimable at once, or with ``not_before`` (seconds since the epoch, the queue's
        clock) from then on: a run that waits for a timer or an event (docs/waits.md).
        ``claim_run`` takes a named run whatever its ``not_before``.
        """
        ...

    async def holder(self, run_id: str) -> str | None:
        """The worker whose unexpired lease holds ``run_id`` now, by the server's clock."""
        ...

    async def attended(self, run_ids: Sequence[str]) -> set[str]:
        """Which of ``run_ids`` the queue looks after now: queued for a worker, or held
        under an unexpired lease (server clock). One query for all of them."""
        ...

    async def settle(self, run_id: str, outcome: str) -> bool:
        """Mark a run nobody holds (queued, or its lease expired) done with ``outcome``.

        ``False`` if a worker holds it, it is done already, or it was never submitted:
        then whoever holds it decides. Used to cancel a run no worker is driving.
        """
        ...

    async def get(self, run_id: str) -> QueueEntry | None:
        """The run's queue row, or ``None`` if it was never submitted."""
        ...

    async def forget(self, run_ids: Sequence[str]) -> int:
        """Delete the rows of these runs that are done (``gc``); how many were deleted.

        A queued or leased row is never deleted: its run is not finished.
        """
        ...

    async def register_worker(
        self, worker_id: str, *, host: str, pid: int, concurrency: int
    ) -> None:
        """Record a starting worker (``workers`` lists it)."""
        ...

    async def heartbeat_worker(self, worker_id: str) -> None:
        """Record that the worker is alive."""
        ...

    async def stop_worker(self, worker_id: str) -> None:
        """Record that the worker stopped."""
        ...

    async def workers(self, *, include_stopped: bool = False) -> list[WorkerInfo]:
        """Registered workers, newest first, with the runs each holds."""
        ...

    async def expired(self) -> list[QueueEntry]:
        """Leased runs whose lease has expired (nobody is driving them)."""
        ...

    async def set_limit(self, kind: LimitKind, name: str, limit: Limit) -> None:
        """Store the limit of queue (``kind="queue"``) or model slot (``"model"``)
        ``name``, replacing any before; every worker enforces it from its next claim."""
        ...

    async def limits(self, kind: LimitKind) -> dict[str, Limit]:
        """The stored limits of ``kind``, by name (a name absent is unlimited)."""
        ...

    async def remove_limit(self, kind: LimitKind, name: str) -> bool:
        """Delete the limit of ``name``; whether there was one."""
        ...

    async def acquire_permit(
        self, kind: LimitKind, name: str, *, lease_seconds: float
    ) -> Permit | float | None:
        """Take a permit of ``name`` under its limit, in one transaction.

        The ``Permit`` (hold it, renew it within ``lease_seconds``, release it); ``None``
        if ``name`` has no stored limit (nothing to take or release); or, when the limit
        is reached, the seconds worth waiting before asking again. A permit whose holder
        stops renewing it (or, on SQLite, whose process died) no longer counts.
        """
        ...

    async def renew_permits(self, permits: Sequence[Permit], *, lease_seconds: float) -> set[str]:
        """Extend the permits still held; the permit ids renewed."""
        ...

    async def release_permit(self, permit: Permit) -> bool:
        """Give ``permit`` back; whether it was still held."""
        ...
