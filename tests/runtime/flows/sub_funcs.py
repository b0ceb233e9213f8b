"""Step functions of ``sub_parent.yaml`` and ``sub_child.yaml``.

Each call appends ``<run id> <step path> <attempt>`` to the file named by
``LW_TEST_CALLS``: a count kept outside the process, so it survives a crash.
"""

from __future__ import annotations

import os

from little_workflow.runtime import StepContext


def _count(ctx: StepContext) -> None:
    path = os.environ.get("LW_TEST_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{ctx.run_id} {ctx.step_path} {ctx.attempt}\n")
            handle.flush()
            os.fsync(handle.fileno())


def prepare(n: int, ctx: StepContext) -> int:
    """The parent's first step."""
    _count(ctx)
    return n + 1


def child_v1(n: int, ctx: StepContext) -> dict[str, object]:
    """What the pinned child calls."""
    _count(ctx)
    return {"version": 1, "n": n * 10}


def child_v2(n: int, ctx: StepContext) -> dict[str, object]:
    """What an edited child would call instead."""
    _count(ctx)
    return {"version": 2, "n": n * 100}


def finish(result: dict[str, object], ctx: StepContext) -> dict[str, object]:
    """The parent's step after the sub-run."""
    _count(ctx)
    return {"final": result}
