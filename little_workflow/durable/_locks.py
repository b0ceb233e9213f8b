"""Exclusive locks held by live processes: one runner per run, one caller per outer loop.

A lock is a file under ``locks/`` locked with ``flock``. The kernel releases an ``flock``
when its holder dies, however it dies, so a lock left by a killed process is recovered
by the next ``acquire`` and a reused pid can never keep a lock alive: the lock belongs
to an open file, not to a pid. The file also records the holder's pid and process start
time, for the message a waiting caller gets and for people looking at ``locks/``.

Rejected: ``O_EXCL`` lock files judged by their recorded pid. Recovering one needs
"read the owner, see it dead, remove the file" and two recoverers can interleave those
steps so that both end up holding the lock.

Lock files are removed on release. A waiter may have opened the file just before it was
removed, so after locking, ``acquire`` checks that the path still names the inode it
locked, and starts over if not.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import time
from pathlib import Path
from types import TracebackType

from little_workflow.errors import LockTimeoutError, StorageError
from little_workflow.platform._proc import ProcessIdentity, current_process, is_alive

__all__ = ["FileLock", "LockOwner"]


class LockOwner:
    """What a lock file says about its holder."""

    __slots__ = ("acquired_at", "process", "purpose")

    def __init__(self, process: ProcessIdentity, purpose: str, acquired_at: float) -> None:
        self.process = process
        self.purpose = purpose
        self.acquired_at = acquired_at

    def describe(self) -> str:
        """A short phrase such as ``pid 4242 (alive, since 12:01:33)``."""
        state = "alive" if is_alive(self.process) else "dead"
        since = time.strftime("%H:%M:%S", time.localtime(self.acquired_at))
        return f"pid {self.process.pid} ({state}, since {since})"


class FileLock:
    """An exclusive, process-level lock on ``path``. Not reentrant.

    Use ``await lock.acquire(timeout=...)`` and ``lock.release()``, or
    ``async with lock:`` (which waits without limit).
    """

    def __init__(self, path: Path, *, purpose: str) -> None:
        self.path = path
        self.purpose = purpose
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; never waits."""
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this object")
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise StorageError(f"cannot open the lock file {str(self.path)!r}: {exc}") from exc
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            except OSError as exc:
                os.close(fd)
                raise StorageError(f"cannot lock {str(self.path)!r}: {exc}") from exc
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released and removed between our open and our flock
                os.close(fd)
                continue
            self._fd = fd
            self._write_owner(fd)
            return True

    def _write_owner(self, fd: int) -> None:
        record = {
            "owner": current_process().to_json(),
            "purpose": self.purpose,
            "acquiredAt": time.time(),
        }
        data = json.dumps(record).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)

    async def acquire(self, *, timeout: float | None = None, poll: float = 0.02) -> None:
        """Wait until the lock is free and take it; ``LockTimeoutError`` after ``timeout`` s.

        Cancelling the waiting task stops the wait and leaves the lock untouched.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while not self.try_acquire():
            if deadline is not None and time.monotonic() >= deadline:
                owner = self.owner()
                holder = owner.describe() if owner is not None else "another process"
                raise LockTimeoutError(
                    f"{self.purpose} is held by {holder}; gave up after waiting {timeout:g} s"
                )
            pause = delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0))
            await asyncio.sleep(pause)
            delay = min(delay * 1.5, 0.25)

    def release(self) -> None:
        """Release the lock and remove its file. Idempotent."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(fd)

    def in_use(self) -> bool:
        """Whether some process holds this lock now (a look that takes nothing for long).

        A holder recorded alive (its pid with its start time, so a reused pid does not
        count) holds it. Otherwise the kernel is asked: a shared ``flock`` that is
        refused means a holder the record does not name (one that has not written it
        yet, or a child it forked); one that is granted, released at once, means nobody.
        For that instant an ``acquire`` elsewhere waits one more poll, and a
        ``try_acquire`` says no.
        """
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False  # released (release removes the file) or never taken
        except OSError as exc:
            raise StorageError(f"cannot open the lock file {str(self.path)!r}: {exc}") from exc
        try:
            owner = _parse_owner(os.read(fd, _RECORD_LIMIT))
            if owner is not None and is_alive(owner.process):
                return True
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError as exc:
                raise StorageError(f"cannot look at the lock {str(self.path)!r}: {exc}") from exc
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def owner(self) -> LockOwner | None:
        """The holder recorded in the lock file, if it can be read."""
        try:
            return _parse_owner(self.path.read_bytes())
        except OSError:
            return None

    async def __aenter__(self) -> FileLock:
        await self.acquire()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


#: Far more than a record takes (about 100 bytes).
_RECORD_LIMIT = 4096


def _parse_owner(data: bytes) -> LockOwner | None:
    """The holder a lock file's bytes record, or ``None`` if they record none."""
    try:
        record = json.loads(data or b"null")
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict):
        return None
    process = ProcessIdentity.from_json(record.get("owner"))
    acquired = record.get("acquiredAt")
    # Bounded: describe() formats it, and localtime() of 1e18 raises.
    if process is None or not isinstance(acquired, int | float) or not 0 <= acquired <= 1e11:
        return None
    return LockOwner(process, str(record.get("purpose", "")), float(acquired))
