"""Whether anybody drives an unfinished run now: what makes a killed run *interrupted*.

A run's log says what happened; that the process driving it died is a fact about now, so
it is derived here when asked, never written to the log. An unfinished run (``running``
in its log) is driven when

* a live process holds its run lock on this machine (``FileLock.in_use``: the holder's
  pid and start time, so a reused pid is not taken for it, else the kernel's ``flock``);
* on a PostgreSQL store, a session holds its advisory lock (``run``/``resume`` on any
  machine sharing the store: the lock ends with its connection, however its process ends);
* the run queue looks after it: queued for a worker, or held under an unexpired lease;
* or any of these holds one of its ancestors: an inline sub-run is driven under its
  root's locks (its own lock is a file lock only) or its root's lease.

Otherwise it is *interrupted*: nobody carries it on until someone resumes it, or a worker
recovers it (``runtime/_recovery.py`` asks here which runs those are).

The cost is a few system calls per unfinished run (a lock file opened and read), plus on
PostgreSQL two queries for any number of runs (``pg_locks``, the queue) and one look per
ancestor of a sub-run that nothing holds: cheap enough for every ``runs`` listing and for
every poll of the UI's live stream. Measured on SQLite (a loaded 2-core machine): 50
unfinished runs, half with a dead holder's lock file left behind, 2.5-3 ms in all, some
50 µs a run; the warm ``runs`` page of those 50 went from about 1 ms to 4 ms.

Rejected: recording the interruption as an event (by whom? the dead process cannot, and
an observer writing into a run it does not hold would race its next holder), and judging
by the time of the last event (a step may rightly take an hour).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from little_workflow.codec import JsonValue
from little_workflow.durable import FileLock
from little_workflow.events import RunStatus
from little_workflow.runtime._waits import waiting_key
from little_workflow.storage import RunInfo, read_many

if TYPE_CHECKING:
    from little_workflow.runtime._host import StoreHost

__all__ = ["interrupted_runs", "waiting_runs"]

# Sub-runs nest at most 32 deep (_workflows._MAX_DEPTH); a longer chain is a corrupt index.
_MAX_ANCESTORS = 64


async def interrupted_runs(runtime: StoreHost, runs: Sequence[RunInfo]) -> dict[str, str]:
    """Of ``runs``, the unfinished ones nobody drives: run id -> one line saying why."""
    unfinished = [info for info in runs if info.status is RunStatus.RUNNING]
    if not unfinished:
        return {}
    checker = _Checker(runtime)
    await checker.look_at([info.run_id for info in unfinished])
    found: dict[str, str] = {}
    waiting = await waiting_runs(runtime, unfinished, checker)
    for info in unfinished:
        if info.run_id not in waiting and not await checker.driven(info):
            found[info.run_id] = checker.why(info.run_id)
    return found


async def waiting_runs(
    runtime: StoreHost, runs: Sequence[RunInfo], checker: _Checker | None = None
) -> dict[str, dict[str, JsonValue]]:
    """Of ``runs``, the unfinished ones parked at a wait that no process or lease holds now:
    run id -> what it waits for (its ``run:waiting:`` record, docs/waits.md).

    A waiting run's queue row may be queued (for a worker to wake it): it still waits.
    """
    unfinished = [info for info in runs if info.status is RunStatus.RUNNING]
    if not unfinished:
        return {}
    records = await read_many(runtime.kv, [waiting_key(info.run_id) for info in unfinished])
    if not records:
        return {}
    checker = checker or _Checker(runtime)
    queue = runtime.store.queue
    found: dict[str, dict[str, JsonValue]] = {}
    for info in unfinished:
        record = records.get(waiting_key(info.run_id))
        if not isinstance(record, dict):
            continue
        await checker.look_at([info.run_id])
        if info.run_id in checker.shared_held or checker.lock(info.run_id).in_use():
            continue  # a process drives it now (a resume, a send delivering)
        if queue is not None and await queue.holder(info.run_id) is not None:
            continue  # a worker drives it now
        found[info.run_id] = record
    return found


class _Checker:
    """The answers for one batch, so that runs sharing an ancestor look at it once."""

    def __init__(self, runtime: StoreHost) -> None:
        self._runtime = runtime
        self._store = runtime.store
        self.shared_held: set[str] = set()
        self._attended: set[str] = set()
        self._looked: set[str] = set()
        self._driven: dict[str, bool] = {}
        self._locks: dict[str, FileLock] = {}

    async def look_at(self, run_ids: Sequence[str]) -> None:
        """Ask the store about ``run_ids`` at once (PostgreSQL: the locks, the queue)."""
        wanted = [run_id for run_id in run_ids if run_id not in self._looked]
        if not wanted:
            return
        self._looked.update(wanted)
        if self._store.spec.kind == "postgres":
            from little_workflow.storage._pg_lock import held_run_locks
            from little_workflow.storage._postgres import PostgresEventLog

            if isinstance(self._store.events, PostgresEventLog):
                held = await held_run_locks(self._store.events.database, wanted)
                self.shared_held.update(held)
        if self._store.queue is not None:
            self._attended.update(await self._store.queue.attended(wanted))

    def lock(self, run_id: str) -> FileLock:
        lock = self._locks.get(run_id)
        if lock is None:
            path = self._runtime.data_dir.lock_path("run", run_id)
            lock = self._locks[run_id] = FileLock(path, purpose=f"run {run_id!r}")
        return lock

    async def driven(self, info: RunInfo) -> bool:
        """Whether a lock or a lease holds ``info``'s run or one of its ancestors."""
        chain: list[str] = []
        current: RunInfo | None = info
        driven = False
        while current is not None and len(chain) < _MAX_ANCESTORS:
            run_id = current.run_id
            if run_id in self._driven:
                driven = self._driven[run_id]
                break
            chain.append(run_id)
            await self.look_at([run_id])
            if run_id in self.shared_held or run_id in self._attended or self.lock(run_id).in_use():
                driven = True
                break
            parent = current.parent_run_id
            current = None if parent is None else await self._runtime.events.get_run(parent)
        for run_id in chain:
            self._driven[run_id] = driven
        return driven

    def why(self, run_id: str) -> str:
        """One line on a run found interrupted."""
        owner = self.lock(run_id).owner()
        if owner is None:
            return "nobody holds its lock or a lease on it"
        since = time.strftime("%H:%M:%S", time.localtime(owner.acquired_at))
        return f"its process (pid {owner.process.pid}, holding it since {since}) is gone"
