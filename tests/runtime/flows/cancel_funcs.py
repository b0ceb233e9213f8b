"""Step functions of the cancellation flows.

``wait_for_release`` is async, as a model call is: it announces itself in the file
named by ``LW_TEST_ENTERED`` (one line per branch) and then waits for the file named by
``LW_TEST_RELEASE``. ``count`` appends ``<run id> <step path> <attempt>`` to
``LW_TEST_CALLS``, outside the process.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from little_workflow.runtime import StepContext


def count(ctx: StepContext, value: object = None) -> object:
    """Record the call; return ``value``."""
    with open(os.environ["LW_TEST_CALLS"], "a", encoding="utf-8") as handle:
        handle.write(f"{ctx.run_id} {ctx.step_path} {ctx.attempt}\n")
    return value


def _announce(ctx: StepContext) -> None:
    with open(os.environ["LW_TEST_ENTERED"], "a", encoding="utf-8") as handle:
        handle.write(f"{ctx.run_id} {ctx.step_path}\n")


def _released() -> bool:
    return Path(os.environ["LW_TEST_RELEASE"]).exists()


async def wait_for_release(ctx: StepContext, item: object = None) -> object:
    """Announce the call, then wait (at most a minute) for the release file."""
    _announce(ctx)
    deadline = time.monotonic() + 60
    while not _released():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the step")
        await asyncio.sleep(0.01)
    count(ctx)
    return item


async def nap(seconds: float) -> None:
    """An async pause: where a cancellation requested during a blocking step lands."""
    await asyncio.sleep(seconds)
