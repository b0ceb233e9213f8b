"""Step functions of ``loop_forever.yaml``: a decision that never leaves its loop."""

from __future__ import annotations

from little_workflow.runtime import StepContext


def again(ctx: StepContext) -> dict[str, object]:
    """Always choose the route back into the loop."""
    return {"route": "again", "output": {"visit": ctx.visit}}


def work(ctx: StepContext) -> int | None:
    """One lap of work; returns its visit."""
    return ctx.visit
