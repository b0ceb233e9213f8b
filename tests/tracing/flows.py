"""Code-first workflows for the tracing tests, importable by a resumed child process.

``held`` blocks (forever) when ``LW_TEST_HOLD`` names a file: it writes its pid there
first, so a test can SIGKILL the process mid-step and resume the run in another.
"""

from __future__ import annotations

import os
import time

from little_workflow import WorkflowContext, step, workflow

HOLD_ENV = "LW_TEST_HOLD"


@step
def double(n: int) -> int:
    """2n."""
    return 2 * n


@step
def held(n: int) -> int:
    """n + 1, after blocking for ever if ``LW_TEST_HOLD`` is set (the kill lands there)."""
    marker = os.environ.get(HOLD_ENV)
    if marker:
        with open(marker, "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
        time.sleep(3600)
    return n + 1


@workflow
async def child(ctx: WorkflowContext, n: int) -> int:
    """A sub-run: one step."""
    return await ctx.step(double, n)


@workflow
async def parent(ctx: WorkflowContext, n: int) -> dict[str, object]:
    """Two steps, a sub-run and a wait for ``go``."""
    doubled = await ctx.step(double, n)
    sub = await ctx.workflow(child, {"n": doubled})
    answer = await ctx.wait_for("go")
    return {"sub": sub, "answer": answer}


@workflow
async def chain(ctx: WorkflowContext, n: int) -> int:
    """A step, a step the kill lands in, and one more."""
    first = await ctx.step(double, n)
    second = await ctx.step(held, first)
    return await ctx.step(double, second)
