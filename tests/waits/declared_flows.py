"""Code-first workflows that declare the events they wait for (``@workflow(events=...)``)."""

from __future__ import annotations

from little_workflow import workflow
from little_workflow.errors import ConfigError
from tests.waits.flows import Approval, double


@workflow(events={"approval": Approval, "note": None})
async def declared(ctx, n: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Doubles n, then waits for a typed approval and a free-form note."""
    doubled = await ctx.step(double, n)
    answer = await ctx.wait_for("approval", schema=Approval)
    note = await ctx.wait_for("note")  # the declared schema (any JSON)
    assert isinstance(answer, Approval)
    return {"n": doubled, "by": answer.by, "note": note}


@workflow(events={"approval": Approval})
async def misdeclared(ctx) -> list[str]:  # type: ignore[no-untyped-def]
    """Waits for an event it does not declare, and with another schema: both refused at the
    call, before anything is claimed or written."""
    codes = []
    for event, schema in (("payment", None), ("approval", {"type": "object"})):
        try:
            ctx.wait_for(event, schema=schema)
        except ConfigError as exc:
            codes.append(exc.code)
    return codes


@workflow(events={"approval": Approval})
async def unguarded(ctx) -> object:  # type: ignore[no-untyped-def]
    """Waits for an undeclared event without catching the error: the run fails."""
    return await ctx.wait_for("payment")
