"""What the worker tests share: the workflow, the call counts, polling."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from pathlib import Path

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
