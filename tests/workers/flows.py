"""Step functions for the worker tests: each call is counted outside the process.

``LW_TEST_CALLS`` names a file; every call appends ``<run id>/<step path>`` to it in one
``write`` of an ``O_APPEND`` file, so concurrent processes never interleave lines, and a
test reads afterwards how many times each step ran, whichever worker ran it.
"""

from __future__ import annotations

import asyncio
import os

from little_workflow.runtime import StepContext


def _count(ctx: StepContext) -> None:
    path = os.environ.get("LW_TEST_CALLS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{ctx.run_id}/{ctx.step_path}\n".encode())
        finally:
            os.close(fd)


async def square(ctx: StepContext, index: int) -> int:
    """index², after a pause long enough that runs overlap a kill or a stop."""
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0.05")))
    _count(ctx)
    return index * index


def total(ctx: StepContext, values: list[int]) -> int:
    """The sum of the map's outputs."""
    _count(ctx)
    return sum(values)
