"""Step functions and a code-first workflow for the wait tests; every call counted in a file.

``LW_TEST_CALLS`` names a file; each call appends ``<run id>/<step path>`` in one ``write``
of an ``O_APPEND`` file, so processes never interleave lines.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

from pydantic import BaseModel

from little_workflow import step, workflow
from little_workflow.runtime import StepContext


def _count(ctx: StepContext) -> None:
    path = os.environ.get("LW_TEST_CALLS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{ctx.run_id}/{ctx.step_path}\n".encode())
        finally:
            os.close(fd)


async def prepare(ctx: StepContext, n: int) -> int:
    """2n, after a pause (``LW_TEST_STEP_SECONDS``) during which a send or a kill lands."""
    _count(ctx)
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0")))
    return 2 * n


def finish(ctx: StepContext, n: int, answer: object) -> dict[str, object]:
    """What the run ends with: the prepared number and the answer (or the timeout)."""
    _count(ctx)
    return {"n": n, "answer": answer}


class Approval(BaseModel):
    """The payload of a code-first approval."""

    ok: bool
    by: str


@step
def double(n: int) -> int:
    """2n."""
    return 2 * n


@workflow
async def approve(ctx, n: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Doubles n, waits for a typed approval (30 s), sleeps a second, says who approved."""
    doubled = await ctx.step(double, n)
    answer = await ctx.wait_for("approval", schema=Approval, timeout=timedelta(seconds=30))
    await ctx.sleep(timedelta(seconds=1))
    if answer is None:
        return {"n": doubled, "by": None}
    assert isinstance(answer, Approval)
    return {"n": doubled, "by": answer.by, "ok": answer.ok}


@workflow
async def short_fuse(ctx) -> object:  # type: ignore[no-untyped-def]
    """A wait whose timeout passes at once: ``None``."""
    return await ctx.wait_for("never", timeout=0)
