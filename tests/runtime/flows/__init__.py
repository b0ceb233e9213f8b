"""Step functions for the runtime tests.

Each call appends one line ``<run id> <step path> <attempt>`` to the file named by the
``LW_TEST_CALLS`` environment variable (when set): a count kept outside the process, so
it survives the crashes the tests inflict.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from little_workflow.runtime import StepContext


def _count(ctx: StepContext) -> None:
    path = os.environ.get("LW_TEST_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{ctx.run_id} {ctx.step_path} {ctx.attempt}\n")
            handle.flush()
            os.fsync(handle.fileno())


def fetch(query: str, ctx: StepContext) -> dict[str, Any]:
    _count(ctx)
    return {
        "query": query,
        "candidates": [
            {"id": "cand_1", "name": "Ada", "years": 7},
            {"id": "cand_2", "name": "Grace", "years": 12},
            {"id": "cand_3", "name": "Linus", "years": 3},
        ],
    }


async def score(candidate: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    _count(ctx)
    await asyncio.sleep(0)
    return {"id": candidate["id"], "score": candidate["years"] * 10 + len(candidate["name"])}


def total(scores: list[dict[str, Any]], ctx: StepContext) -> int:
    _count(ctx)
    return sum(entry["score"] for entry in scores)


def judge(summary: dict[str, Any], ctx: StepContext) -> dict[str, Any]:
    _count(ctx)
    visit = ctx.visit or 0
    if visit == 0:
        return {"route": "revise", "output": {"verdict": "revise", "visit": visit}}
    return {"route": "accept", "output": {"verdict": "accept", "visit": visit, **summary}}


def revise(ctx: StepContext) -> str:
    _count(ctx)
    return f"draft revised at visit {ctx.visit}"
