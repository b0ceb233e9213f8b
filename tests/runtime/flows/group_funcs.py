"""Step functions of the group-commit flow (``group_map.yaml``).

``stagger`` records its call in the file named by ``LW_TEST_CALLS`` (outside the
process), then naps ``index`` milliseconds, so the branches of a map complete a few at a
time and their commits form several batches. The branch whose index is in
``LW_TEST_KILL_AT`` sends SIGKILL to its own process instead of returning, while other
branches are queued for, or inside, a group commit.
"""

from __future__ import annotations

import asyncio
import os
import signal

from little_workflow.runtime import StepContext


async def stagger(ctx: StepContext, index: int) -> int:
    """Record the call, nap ``index`` ms; die instead if this is the branch to kill."""
    # A line of a local file, written synchronously: the record must be there before
    # any kill, and the nap below is what lets the other branches run.
    with open(os.environ["LW_TEST_CALLS"], "a", encoding="utf-8") as handle:  # noqa: ASYNC230
        handle.write(f"{ctx.run_id} {ctx.step_path} {ctx.attempt}\n")
    await asyncio.sleep(index / 1000)
    if str(index) == os.environ.get("LW_TEST_KILL_AT"):
        os.kill(os.getpid(), signal.SIGKILL)
    return index * index
