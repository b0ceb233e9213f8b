"""``call_user`` and ``SyncThreads``: where user code runs, what comes back, what is bounded.

The callables record the thread they ran in; the pool's bound is checked by counting the
calls inside at once (never by timing); a process that exits with a call still blocked
is a real child process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from little_workflow.platform._threads import SyncThreads, call_user, is_async_callable

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[2]


async def test_an_async_callable_runs_on_the_loop_and_a_sync_one_in_a_thread() -> None:
    loop_thread = threading.get_ident()

    async def coroutine_function() -> int:
        return threading.get_ident()

    class AsyncCallable:
        async def __call__(self) -> int:
            return threading.get_ident()

    def plain() -> int:
        return threading.get_ident()

    assert await call_user(coroutine_function) == loop_thread
    assert await call_user(AsyncCallable()) == loop_thread
    assert await call_user(plain) != loop_thread
    assert is_async_callable(AsyncCallable().__call__)
    assert not is_async_callable(plain)


@pytest.mark.parametrize(
    "error",
    [SystemExit(3), KeyboardInterrupt(), GeneratorExit(), BaseException("own"), ValueError()],
)
async def test_what_a_sync_callable_raises_comes_back_as_raised(error: BaseException) -> None:
    def raising() -> None:
        raise error

    with pytest.raises(type(error)) as caught:
        await call_user(raising)
    assert caught.value is error


async def test_the_pool_runs_at_most_its_size_at_once() -> None:
    pool = SyncThreads(2, name="bounded")
    inside = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def hold(index: int) -> str:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        release.wait(10)
        with lock:
            inside -= 1
        return threading.current_thread().name

    with pool.bound():
        tasks = [asyncio.create_task(call_user(hold, index)) for index in range(5)]
        while True:
            with lock:
                if inside == 2:
                    break
            await asyncio.sleep(0.01)
        release.set()
        names = await asyncio.gather(*tasks)
    pool.close()
    assert most == 2
    assert set(names) <= {"bounded-1", "bounded-2"}


async def test_a_call_cancelled_while_queued_never_runs() -> None:
    pool = SyncThreads(1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        ran.append("first")
        started.set()
        release.wait(10)

    def second() -> None:
        ran.append("second")

    with pool.bound():
        busy = asyncio.create_task(call_user(first))
        assert await asyncio.to_thread(started.wait, 10)
        queued = asyncio.create_task(call_user(second))
        await asyncio.sleep(0.05)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        await busy
        # One more call through the same thread: by then the cancelled one was skipped.
        await call_user(ran.append, "third")
    pool.close()
    assert ran == ["first", "third"]


def test_a_process_exits_while_a_cancelled_call_still_blocks(tmp_path: Path) -> None:
    # The thread is never released: a pool that joined its threads at exit would hang.
    script = """
import asyncio, time
from little_workflow.platform._threads import call_user

async def main():
    task = asyncio.create_task(call_user(time.sleep, 3600))
    await asyncio.sleep(0.2)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        print("cancelled", flush=True)

asyncio.run(main())
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "cancelled\n"


def test_a_pool_size_must_be_a_positive_integer() -> None:
    for size in (0, -2, True):
        with pytest.raises(ValueError, match="positive integer"):
            SyncThreads(size)


def test_a_closed_pool_still_serves_a_late_call_and_keeps_no_thread() -> None:
    pool = SyncThreads(4, name="closing")

    async def use() -> str:
        with pool.bound():
            await call_user(time.sleep, 0)
            pool.close()
            result: str = await call_user(lambda: "late")
            return result

    assert asyncio.run(use()) == "late"

    def pool_threads() -> list[threading.Thread]:
        return [thread for thread in threading.enumerate() if thread.name.startswith("closing-")]

    deadline = time.monotonic() + 10
    while pool_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert pool_threads() == []
