"""``FileLock``: one holder at a time, across real processes; dead holders never block.

The lock is an ``flock`` on a file under ``locks/``, so the kernel frees it when its
holder dies, however it dies. The file records the holder's pid and process start time
for the waiting caller's message; a recorded pid that is dead or reused means nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow.durable import FileLock
from little_workflow.errors import LockTimeoutError
from little_workflow.platform._proc import ProcessIdentity, current_process, process_start_time

REPO = Path(__file__).resolve().parents[2]

HOLDER = """
import asyncio, sys
from pathlib import Path
from little_workflow.durable import FileLock

async def main() -> None:
    lock = FileLock(Path(sys.argv[1]), purpose="the holder")
    await lock.acquire(timeout=10)
    print("locked", flush=True)
    sys.stdin.readline()
    lock.release()
    print("released", flush=True)

asyncio.run(main())
"""


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    locks = tmp_path / "locks"
    locks.mkdir(mode=0o700)
    return locks / "run-run_1.lock"


@pytest.fixture
def holder(lock_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that holds the lock until its stdin gets a line (or it is killed)."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(lock_path)],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "locked\n"
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)  # waits, and closes the pipes


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def read_record(path: Path) -> Any:
    return json.loads(path.read_text())


def write_text(path: Path, text: str) -> None:
    path.write_text(text)


def is_held(lock: FileLock) -> bool:
    return lock.held


def exists(path: Path) -> bool:
    return path.exists()


def write_owner(path: Path, owner: dict[str, object]) -> None:
    record = {"owner": owner, "purpose": "run 'run_1'", "acquiredAt": time.time()}
    path.write_text(json.dumps(record))


async def test_the_lock_file_records_pid_and_process_start_time(lock_path: Path) -> None:
    lock = FileLock(lock_path, purpose="run 'run_1'")
    await lock.acquire(timeout=0)
    try:
        assert lock.held
        record = read_record(lock_path)
        assert record["owner"] == {"pid": os.getpid(), "startTime": process_start_time(os.getpid())}
        assert isinstance(record["owner"]["startTime"], int)
        assert record["purpose"] == "run 'run_1'"
        owner = lock.owner()
        assert owner is not None
        assert owner.process == current_process()
        assert owner.describe().startswith(f"pid {os.getpid()} (alive")
    finally:
        lock.release()
    assert not is_held(lock)
    assert not exists(lock_path)  # released locks leave nothing behind
    lock.release()  # idempotent


async def test_one_holder_at_a_time_and_not_reentrant(lock_path: Path) -> None:
    first = FileLock(lock_path, purpose="first")
    second = FileLock(lock_path, purpose="second")
    assert first.try_acquire()
    with pytest.raises(RuntimeError):
        first.try_acquire()
    assert not second.try_acquire()
    with pytest.raises(LockTimeoutError) as caught:
        await second.acquire(timeout=0.05)
    assert caught.value.code == "lock_timeout"
    assert f"pid {os.getpid()} (alive" in str(caught.value)
    assert str(caught.value).startswith("second is held by")  # what it waited for
    first.release()
    assert second.try_acquire()
    second.release()


async def test_a_waiter_gets_the_lock_when_the_holder_releases_it(lock_path: Path) -> None:
    first = FileLock(lock_path, purpose="first")
    await first.acquire()
    second = FileLock(lock_path, purpose="second")
    waiting = asyncio.create_task(second.acquire(timeout=30))
    await asyncio.sleep(0)
    assert not waiting.done()
    first.release()
    await waiting
    assert second.held
    assert read_record(lock_path)["purpose"] == "second"
    second.release()


async def test_cancelling_a_waiter_leaves_the_lock_alone(lock_path: Path) -> None:
    first = FileLock(lock_path, purpose="first")
    await first.acquire()
    second = FileLock(lock_path, purpose="second")
    waiting = asyncio.create_task(second.acquire())
    await asyncio.sleep(0)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not second.held
    assert first.held
    assert read_record(lock_path)["purpose"] == "first"
    first.release()


async def test_async_with_holds_and_releases(lock_path: Path) -> None:
    async with FileLock(lock_path, purpose="ctx") as lock:
        assert lock.held
        assert exists(lock_path)
    assert not is_held(lock)
    assert not exists(lock_path)


async def test_another_live_process_holds_the_lock_until_it_releases(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    waiter = FileLock(lock_path, purpose="run 'run_1'")
    with pytest.raises(LockTimeoutError) as caught:
        await waiter.acquire(timeout=0.1)
    assert f"pid {holder.pid} (alive" in str(caught.value)
    owner = waiter.owner()
    assert owner is not None
    assert owner.process == ProcessIdentity(
        pid=holder.pid, start_time=process_start_time(holder.pid)
    )

    assert holder.stdin is not None
    assert holder.stdout is not None
    holder.stdin.write("\n")
    holder.stdin.flush()
    assert holder.stdout.readline() == "released\n"
    await waiter.acquire(timeout=0)
    waiter.release()


async def test_a_lock_whose_holder_was_killed_is_recovered_at_once(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    waiter = FileLock(lock_path, purpose="run 'run_1'")
    assert not waiter.try_acquire()
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait(timeout=10)
    # The dead holder could not remove its file; it says who held it, and that it is dead.
    owner = waiter.owner()
    assert owner is not None
    assert owner.process.pid == holder.pid
    assert "(dead" in owner.describe()
    await waiter.acquire(timeout=0)
    assert waiter.owner() is not None
    assert waiter.owner().process == current_process()  # type: ignore[union-attr]
    waiter.release()


async def test_a_lock_file_of_a_dead_pid_is_acquired(lock_path: Path) -> None:
    gone_pid = dead_pid()
    write_owner(lock_path, {"pid": gone_pid, "startTime": 1})
    lock = FileLock(lock_path, purpose="run 'run_1'")
    owner = lock.owner()
    assert owner is not None
    assert "(dead" in owner.describe()
    await lock.acquire(timeout=0)
    assert read_record(lock_path)["owner"]["pid"] == os.getpid()
    lock.release()


async def test_a_lock_file_of_a_reused_pid_is_acquired(lock_path: Path) -> None:
    """The recorded pid is alive (it is this very process) but started at another time."""
    start = process_start_time(os.getpid())
    assert start is not None
    write_owner(lock_path, {"pid": os.getpid(), "startTime": start + 1})
    lock = FileLock(lock_path, purpose="run 'run_1'")
    owner = lock.owner()
    assert owner is not None
    assert "(dead" in owner.describe()  # the process it names is gone; the pid was reused
    await lock.acquire(timeout=0)
    record = read_record(lock_path)
    assert record["owner"] == {"pid": os.getpid(), "startTime": start}
    lock.release()


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"owner": {"pid": "x"}}'])
async def test_an_unreadable_lock_file_does_not_block(lock_path: Path, content: str) -> None:
    write_text(lock_path, content)
    lock = FileLock(lock_path, purpose="run 'run_1'")
    assert lock.owner() is None
    await lock.acquire(timeout=0)
    assert lock.owner() is not None
    lock.release()


# --- in_use: whether anybody holds a lock, asked by someone who does not want it -----------

SILENT_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
"""


def test_in_use_follows_a_live_holder_and_its_sigkill(
    lock_path: Path, holder: subprocess.Popen[str]
) -> None:
    looker = FileLock(lock_path, purpose="run 'run_1'")
    assert looker.in_use()
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=10)
    assert exists(lock_path)  # a killed holder leaves its file behind
    assert not looker.in_use()
    assert looker.try_acquire()  # the look took nothing
    looker.release()
    assert not looker.in_use()  # released: no file at all


def test_in_use_is_not_fooled_by_a_reused_pid(lock_path: Path) -> None:
    # The record names this very (live) pid, with another start time: the process that
    # wrote it is dead and its pid went to someone else. Nobody holds the flock.
    start = process_start_time(os.getpid())
    assert start is not None
    write_owner(lock_path, {"pid": os.getpid(), "startTime": start - 1})
    assert not FileLock(lock_path, purpose="run 'run_1'").in_use()
    write_owner(lock_path, {"pid": dead_pid(), "startTime": 5})
    assert not FileLock(lock_path, purpose="run 'run_1'").in_use()


def test_in_use_asks_the_kernel_when_the_record_names_nobody(lock_path: Path) -> None:
    # A holder that has the flock but has not written its record (or wrote garbage).
    process = subprocess.Popen(
        [sys.executable, "-c", SILENT_HOLDER, str(lock_path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "locked\n"
        write_text(lock_path, "not json")
        assert FileLock(lock_path, purpose="run 'run_1'").in_use()
        process.kill()
        process.wait(timeout=10)
        assert not FileLock(lock_path, purpose="run 'run_1'").in_use()
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)
