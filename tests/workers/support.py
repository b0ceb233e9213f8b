"""What the worker tests share: the workflow, the call counts, polling."""

from __future__ import annotations

import asyncio
import collections
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from little_workflow.runtime import Runtime

#: A map over ``input.items`` (four at a time) then a sum; every call counted in a file.
FLOW = Path(__file__).with_name("fanout.yaml")
REPO = Path(__file__).resolve().parents[2]


def calls(path: Path) -> collections.Counter[str]:
    """How many times each ``<run id>/<step path>`` was called (``flows._count``)."""
    if not path.exists():
        return collections.Counter()
    return collections.Counter(path.read_text().splitlines())


async def until(condition: Callable[[], bool], timeout: float = 30) -> None:
    """Poll ``condition`` (a file another task or process writes) until it holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def worker_command(
    store: str, data_dir: Path, worker_id: str, *, concurrency: int, lease: float
) -> list[str]:
    """The command line of one ``little-workflow worker`` process (polling every 50 ms)."""
    return [
        sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir),
        "worker", "--store", store, "--worker-id", worker_id,
        "--concurrency", str(concurrency), "--lease-seconds", str(lease),
        "--poll-interval", "0.05",
    ]  # fmt: skip


async def held_by(runtime: Runtime, worker_id: str) -> list[str]:
    """The runs ``worker_id`` holds a lease on now, as the queue says."""
    for info in await runtime.queue.workers():
        if info.worker_id == worker_id:
            return [run for run, _, _ in info.runs]
    return []


async def wait_for(condition: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Poll until ``condition()`` holds; the ``time.monotonic()`` at which it did."""
    deadline = time.monotonic() + timeout
    while not await condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)
    return time.monotonic()
