"""The lock a process holds while it drives a run: one machine's, and the store's.

Always a file lock under ``locks/`` (``durable/_locks.py``): free at once when its holder
dies, and enough when the store is a file on this machine. On a PostgreSQL store, which
processes on other machines share, also the store's own advisory lock
(``storage/_pg_lock.py``), taken after the file lock so that processes of one machine
queue on the cheap one first. Workers hold leases instead (``runtime/_worker.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from little_workflow.durable import FileLock
from little_workflow.storage import current_fence

if TYPE_CHECKING:
    from little_workflow.runtime._host import StoreHost
    from little_workflow.storage._pg_lock import PostgresRunLock

__all__ = ["RunLock", "locked"]


class RunLock:
    """An exclusive lock on one run, for this machine and every machine sharing the store."""

    def __init__(
        self, runtime: StoreHost, run_id: str, *, purpose: str | None = None, shared: bool = True
    ) -> None:
        """``shared=False``: the file lock only (a sub-run, which its parent's lock covers:
        one pooled connection per sub-run in flight would exhaust the pool)."""
        purpose = purpose or f"run {run_id!r}"
        self._file = FileLock(runtime.data_dir.lock_path("run", run_id), purpose=purpose)
        self._shared: PostgresRunLock | None = None
        store = runtime.store
        if shared and store.spec.kind == "postgres":
            from little_workflow.storage._pg_lock import PostgresRunLock
            from little_workflow.storage._postgres import PostgresEventLog

            log = store.events
            if isinstance(log, PostgresEventLog):
                self._shared = PostgresRunLock(log.database, run_id, purpose=purpose)

    async def try_acquire(self) -> bool:
        """Take both locks if both are free; never waits."""
        if not self._file.try_acquire():
            return False
        try:
            if self._shared is not None and not await self._shared.try_acquire():
                self._file.release()
                return False
        except BaseException:
            self._file.release()
            raise
        return True

    async def acquire(self, *, timeout: float | None) -> None:
        """Wait for both (``LockTimeoutError`` after ``timeout`` seconds in all)."""
        import time

        start = time.monotonic()
        await self._file.acquire(timeout=timeout)
        if self._shared is None:
            return
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - start))
        try:
            await self._shared.acquire(timeout=left)
        except BaseException:
            self._file.release()
            raise

    async def release(self) -> None:
        """Release both. Idempotent."""
        try:
            if self._shared is not None:
                await self._shared.release()
        finally:
            self._file.release()


@contextlib.asynccontextmanager
async def locked(host: StoreHost, run_id: str, *, shared: bool = True) -> AsyncIterator[None]:
    """Hold ``run_id``'s run lock for the block (``LockTimeoutError`` after ``lock_timeout``)."""
    if current_fence() is not None:
        # A worker's lease covers the run and its sub-runs, on every machine; a file
        # lock here would only be held on past the lease by a paused worker, and
        # keep the next holder on this machine waiting for nothing.
        yield
        return
    lock = RunLock(host, run_id, shared=shared)
    await lock.acquire(timeout=host.lock_timeout)
    try:
        yield
    finally:
        await lock.release()
