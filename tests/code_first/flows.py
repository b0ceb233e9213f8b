"""Code-first workflows for the process tests (crash at every event, SIGKILL, saga).

Every step appends ``<run id> <path>`` to the file ``LW_TEST_CALLS`` names, a count kept
outside the process. The far ends of the side effects (``LW_TEST_LEDGER``) record each
request they are asked, one line per request: ``<far end> <key> <answer>``; a reconcile
hook asks the far end for the answer it gave. A far end
deduplicates nothing, so a request asked twice shows as two lines.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from little_workflow import (
    Happened,
    RetryPolicy,
    StepContext,
    StepFailedError,
    WorkflowContext,
    current_step,
    side_effect,
    step,
    workflow,
)


def _append(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def _count() -> None:
    here = current_step()
    _append("LW_TEST_CALLS", f"{here.run_id} {here.step_path}")


def _ledger() -> list[tuple[str, str]]:
    path = os.environ.get("LW_TEST_LEDGER")
    if not path or not Path(path).exists():
        return []
    return [tuple(line.split()[:2]) for line in Path(path).read_text().splitlines()]  # type: ignore[misc]


@step
def fetch(query: str) -> list[dict[str, Any]]:
    _count()
    return [{"id": f"c{n}", "years": n + len(query)} for n in range(1, 4)]


@step
async def score(candidate: dict[str, Any]) -> int:
    _count()
    await asyncio.sleep(0.01)
    return int(candidate["years"]) * 10


@step
def revise(total: int) -> int:
    _count()
    return total + 1


@step
async def left(total: int) -> str:
    _count()
    return f"left {total}"


@step
def right(total: int) -> str:
    _count()
    return f"right {total}"


def _slow() -> None:
    # The saga's kill test: time for a SIGKILL to land inside a step.
    delay = float(os.environ.get("LW_TEST_SLOW", "0"))
    if delay:
        time.sleep(delay)


def _reconcile(far_end: str) -> Any:
    def reconcile(key: str) -> Happened | None:
        # The far end's own record: asked whether this request reached it, and its answer.
        path = os.environ.get("LW_TEST_LEDGER")
        if not path or not Path(path).exists():
            return None
        for line in Path(path).read_text().splitlines():
            name, request, *answer = line.split(" ", 2)
            if (name, request) == (far_end, key):
                return Happened(answer[0] if answer else None)
        return None

    return reconcile


@step(side_effect=True)
@side_effect(reconcile=_reconcile("notify"))
def notify(total: int) -> str:
    _count()
    key = current_step().idempotency_key
    _append("LW_TEST_LEDGER", f"notify {key} notify {key}")
    return f"notify {key}"


@workflow
async def report(ctx: WorkflowContext, total: int) -> dict[str, Any]:
    return {"report": await ctx.step(revise, total)}


@workflow
async def review(ctx: WorkflowContext, query: str) -> dict[str, Any]:
    """A step, a map, a loop, a gather, a tool, an agent with tools, a sub-workflow, a side
    effect."""
    candidates = await ctx.step(fetch, query)
    scores = await ctx.map(score, candidates, key=lambda c: str(c["id"]), concurrency=3)
    total = sum(scores)
    for _ in range(3):
        total = await ctx.step(revise, total)
    pair = await asyncio.gather(ctx.step(left, total), ctx.step(right, total))
    directory = await ctx.tool("lookup", {"name": "Grace"}, name="directory")
    verdict = await ctx.agent(
        "worker", prompt="Score Ada", tools=["lookup", "score"], instructions="Score."
    )
    written = await ctx.workflow(report, {"total": total})
    sent = await ctx.step(notify, total)
    return {
        "scores": scores,
        "total": total,
        "pair": pair,
        "directory": directory,
        "verdict": verdict,
        "report": written,
        "sent": sent,
    }


# --- the saga ----------------------------------------------------------------------------


@step(side_effect=True)
@side_effect(reconcile=_reconcile("withdraw"))
def withdraw(amount: int) -> str:
    _slow()
    key = current_step().idempotency_key
    _append("LW_TEST_LEDGER", f"withdraw {key} withdrew {amount}")
    return f"withdrew {amount}"


def _deposit_refused(key: str) -> None:
    # The far end refused a deposit it was asked for: asked again, it would refuse again.
    if ("deposit", key) in _ledger():
        raise RuntimeError(f"the far end refused deposit {key}: the account is closed")


@step(side_effect=True, retry=RetryPolicy(attempts=1))
@side_effect(reconcile=_deposit_refused)
def deposit(amount: int) -> str:
    _slow()
    key = current_step().idempotency_key
    _append("LW_TEST_LEDGER", f"deposit {key}")
    raise RuntimeError("the account is closed")


@step(side_effect=True)
@side_effect(reconcile=_reconcile("refund"))
def refund(amount: int) -> str:
    _slow()
    key = current_step().idempotency_key
    _append("LW_TEST_LEDGER", f"refund {key} refunded {amount}")
    return f"refunded {amount}"


@workflow
async def transfer(ctx: WorkflowContext, amount: int) -> dict[str, str]:
    taken = await ctx.step(withdraw, amount)
    try:
        done = await ctx.step(deposit, amount)
    except StepFailedError as error:
        return {"withdraw": taken, "failed": error.path, "refund": await ctx.step(refund, amount)}
    return {"withdraw": taken, "deposit": done}


# --- the same saga's far ends for the LWIR form (tests/code_first/saga.yaml) --------------


@side_effect(reconcile=_reconcile("withdraw"))
def lwir_withdraw(amount: int, ctx: StepContext) -> str:
    _slow()
    _append("LW_TEST_LEDGER", f"withdraw {ctx.idempotency_key} withdrew {amount}")
    return f"withdrew {amount}"


@side_effect(reconcile=_deposit_refused)
def lwir_deposit(amount: int, ctx: StepContext) -> str:
    _slow()
    _append("LW_TEST_LEDGER", f"deposit {ctx.idempotency_key}")
    raise RuntimeError("the account is closed")


@side_effect(reconcile=_reconcile("refund"))
def lwir_refund(amount: int, ctx: StepContext) -> str:
    _slow()
    _append("LW_TEST_LEDGER", f"refund {ctx.idempotency_key} refunded {amount}")
    return f"refunded {amount}"


# --- for the workers' test: a map, a sum, a payment -------------------------------------


@step
async def square(n: int) -> int:
    _count()
    await asyncio.sleep(float(os.environ.get("LW_TEST_STEP_SECONDS", "0")))
    return n * n


@step
def add(numbers: list[int]) -> int:
    _count()
    return sum(numbers)


@step(side_effect=True)
@side_effect(reconcile=_reconcile("pay"))
def pay(total: int) -> str:
    _count()
    key = current_step().idempotency_key
    _append("LW_TEST_LEDGER", f"pay {key} paid {total}")
    return f"paid {total}"


@workflow
async def fan_pay(ctx: WorkflowContext, items: list[int]) -> int:
    squares = await ctx.map(square, items, concurrency=4)
    total = await ctx.step(add, squares)
    await ctx.step(pay, total)
    return total
