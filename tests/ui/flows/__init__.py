"""Workflows and step functions for the UI tests.

``live.yaml`` holds its run at ``hold`` (it waits for the file ``LW_TEST_RELEASE``
names) so a test can watch the run's page while the run is in progress, then let it
finish. Its first step returns markup, as a hostile tool or model might: the page must
show it as text.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from little_workflow.runtime import StepContext

HERE = Path(__file__).resolve().parent
LIVE = HERE / "live.yaml"
SHORTLIST = HERE / "shortlist.yaml"

HOSTILE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


def hostile(ctx: StepContext) -> dict[str, str]:
    """An output made of markup."""
    return {"note": HOSTILE, "run": ctx.run_id}


async def hold() -> str:
    """Wait (a minute at most) for the release file; say so in ``LW_TEST_ENTERED`` first.

    Asynchronous on purpose: the runtime commits a step's ``StepAttemptStarted`` from a
    timer on its event loop, which a blocking function would hold up until it returned,
    so the page would not see the step running.
    """
    with open(os.environ["LW_TEST_ENTERED"], "w", encoding="utf-8") as entered:  # noqa: ASYNC230 - a tiny local write, once
        entered.write(f"{os.getpid()}\n")
    release = os.environ["LW_TEST_RELEASE"]
    deadline = time.monotonic() + 60
    while not os.path.exists(release):  # noqa: ASYNC240 - one stat, then the loop is free
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the step")
        await asyncio.sleep(0.01)
    return "released"


def finish(note: dict[str, str], held: str) -> str:
    """The step after the hold."""
    return f"finished after {held!r} ({len(note['note'])} characters of markup)"
