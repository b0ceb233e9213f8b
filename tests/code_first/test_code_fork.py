"""``fork --at`` a path inside a code-first branch (``ctx.branches``, ``ctx.map``), next to
an LWIR fork of the same workflow at the same path.

The step functions append their path to ``CALLS`` (the test's process runs them all), so a
test sees what a fork called and, as much, what it kept.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_workflow import (
    InvalidForkPointError,
    RunFailedError,
    Runtime,
    StepContext,
    WorkflowContext,
    current_step,
    parse_workflow,
    step,
    workflow,
)
from little_workflow.events import StepCompleted
from tests.runtime.support import Crash, FakeSleep

CALLS: list[str] = []
MODE: dict[str, Any] = {}
DOCS = [{"id": "d1", "text": "a b"}, {"id": "d2", "text": "c d e"}, {"id": "d3", "text": "f"}]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    MODE.clear()


def _fetch(path: str) -> list[dict[str, Any]]:
    CALLS.append(path)
    return DOCS


def _read(doc: dict[str, Any], path: str) -> str:
    CALLS.append(path)
    return str(doc["text"]).upper()


def _check(text: str, path: str) -> str:
    CALLS.append(path)
    if MODE.get("crash_at") == path:
        raise Crash()
    if MODE.get("fail_at") == path:
        raise ValueError(f"cannot check {text}")
    return f"{text} ok{MODE.get('version', '')}"


def _total(checks: list[str], path: str) -> str:
    CALLS.append(path)
    return " | ".join(checks)


# --- the code form ----------------------------------------------------------------------


@step
def fetch() -> list[dict[str, Any]]:
    return _fetch(current_step().step_path)


@step
def read(doc: dict[str, Any]) -> str:
    return _read(doc, current_step().step_path)


@step
def check(text: str) -> str:
    return _check(text, current_step().step_path)


@step
def total(checks: list[str]) -> str:
    return _total(checks, current_step().step_path)


@step
def count(word: str) -> int:
    CALLS.append(current_step().step_path)
    return len(word) + int(MODE.get("bonus", 0))


async def review(ctx: WorkflowContext, doc: dict[str, Any]) -> str:
    return await ctx.step(check, await ctx.step(read, doc))


@workflow
async def pipeline(ctx: WorkflowContext, concurrency: int = 3) -> str:
    docs = await ctx.step(fetch)
    checks = await ctx.branches(review, docs, key=lambda d: str(d["id"]), concurrency=concurrency)
    return await ctx.step(total, checks)


async def counted(ctx: WorkflowContext, doc: dict[str, Any]) -> str:
    text = await ctx.step(read, doc)
    sizes = await ctx.map(count, text.split(), key=lambda word: word, concurrency=2)
    return await ctx.step(check, f"{text} {sum(sizes)}")


@workflow
async def nested(ctx: WorkflowContext) -> str:
    docs = await ctx.step(fetch)
    checks = await ctx.branches(
        counted, docs, key=lambda d: str(d["id"]), concurrency=3, name="review"
    )
    return await ctx.step(total, checks)


# --- the LWIR form: the same steps at the same paths ------------------------------------


def lwir_fetch(ctx: StepContext) -> list[dict[str, Any]]:
    return _fetch(ctx.step_path)


def lwir_read(doc: dict[str, Any], ctx: StepContext) -> str:
    return _read(doc, ctx.step_path)


def lwir_check(text: str, ctx: StepContext) -> str:
    return _check(text, ctx.step_path)


def lwir_total(checks: list[str], ctx: StepContext) -> str:
    return _total(checks, ctx.step_path)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "t:fetch": lwir_fetch,
    "t:read": lwir_read,
    "t:check": lwir_check,
    "t:total": lwir_total,
}
DOCUMENT = parse_workflow(
    {
        "lwir": 1,
        "name": "pipeline",
        "steps": [
            {"id": "fetch", "kind": "execute", "fn": "t:fetch"},
            {
                "id": "review",
                "kind": "map",
                "items": "${steps.fetch.output}",
                "key": "id",
                "concurrency": 3,
                "body": [
                    {"id": "read", "kind": "execute", "fn": "t:read", "with": {"doc": "${item}"}},
                    {
                        "id": "check",
                        "kind": "execute",
                        "fn": "t:check",
                        "with": {"text": "${steps.read.output}"},
                    },
                ],
            },
            {
                "id": "total",
                "kind": "execute",
                "fn": "t:total",
                "with": {"checks": "${steps.review.output}"},
            },
            {"id": "done", "kind": "output", "value": "${steps.total.output}"},
        ],
    }
)
ALL = [
    "fetch",
    "review[d1].read",
    "review[d1].check",
    "review[d2].read",
    "review[d2].check",
    "review[d3].read",
    "review[d3].check",
    "total",
]


def make_runtime(tmp_path: Path) -> Runtime:
    return Runtime(tmp_path / "data", sleep=FakeSleep(), functions=FUNCTIONS)


async def _completed(rt: Runtime, run_id: str) -> list[str]:
    return sorted(
        r.event.step_path
        for r in await rt.events.read(run_id)
        if isinstance(r.event, StepCompleted)
    )


async def test_a_fork_inside_a_branch_keeps_what_came_before_it_as_lwir_does(
    tmp_path: Path,
) -> None:
    async with make_runtime(tmp_path) as rt:
        lwir_source = await rt.run(DOCUMENT, None, run_id="lwir_src")
        code_source = await rt.run(pipeline, None, run_id="code_src")
        assert lwir_source.output == code_source.output == "A B ok | C D E ok | F ok"
        assert sorted(CALLS) == sorted(ALL * 2)
        assert await _completed(rt, "code_src") == await _completed(rt, "lwir_src")

        MODE["version"] = " v2"
        CALLS.clear()
        lwir = await rt.fork("lwir_src", at="review[d2].check", run_id="lwir_fork")
        lwir_calls = sorted(CALLS)
        CALLS.clear()
        code = await rt.fork("code_src", at="review[d2].check", run_id="code_fork")
        code_calls = sorted(CALLS)
        assert await _completed(rt, "code_fork") == await _completed(rt, "lwir_fork")

    # The same in both: fetch, the branch before d2 and d2's own read are kept (not
    # called); d2's check runs anew, with the change, and so does everything after the
    # map.
    for kept in ("fetch", "review[d1].read", "review[d1].check", "review[d2].read"):
        assert kept not in lwir_calls
        assert kept not in code_calls
    for anew in ("review[d2].check", "total"):
        assert anew in lwir_calls
        assert anew in code_calls
    # The one difference (docs/code-first.md, "Fork"): LWIR walks the branches in item
    # order and runs the ones after d2 again; a code-first fork keeps the other branches.
    assert lwir_calls == ["review[d2].check", "review[d3].check", "review[d3].read", "total"]
    assert code_calls == ["review[d2].check", "total"]
    assert lwir.output == "A B ok | C D E ok v2 | F ok v2"
    assert code.output == "A B ok | C D E ok v2 | F ok"
    # Kept: fetch, d1's two calls, d2's read; and in the code form d3's two calls too.
    assert (lwir.replayed_steps, code.replayed_steps) == (4, 6)


async def test_a_fork_at_a_failed_branch_runs_that_branch_again(tmp_path: Path) -> None:
    MODE["fail_at"] = "review[d2].check"
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(RunFailedError):
            await rt.run(pipeline, {"concurrency": 1}, run_id="failed")
        assert ["fetch", *ALL[1:5]] == CALLS
        # The failed call is not a fork point; its branch is, and the error says so.
        with pytest.raises(InvalidForkPointError) as refused:
            await rt.fork("failed", at="review[d2].check")
        assert refused.value.code == "fork_point_not_reached"
        assert refused.value.fork_at == "review[d2]"
        MODE.clear()
        CALLS.clear()
        fork = await rt.fork("failed", at="review[d2]", run_id="fixed")
    assert fork.output == "A B ok | C D E ok | F ok"
    # d1 was kept; d2 ran again from its start; d3 had never run.
    assert ALL[3:] == CALLS


async def test_a_fork_deep_in_nested_maps_keeps_the_sibling_branches(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        source = await rt.run(nested, None, run_id="deep")
        assert source.output == "A B 2 ok | C D E 3 ok | F 1 ok"
        MODE["bonus"] = 10
        CALLS.clear()
        # A crash in the fork's first new call after the fork point: the fork is a run
        # like any other, and a resume finishes it without calling a kept call.
        MODE["crash_at"] = "review[d2].check"
        with pytest.raises(Crash):
            await rt.fork("deep", at="review[d2].count[D]", run_id="deep_fork")
        assert CALLS == ["review[d2].count[D]", "review[d2].check"]
        del MODE["crash_at"]
        CALLS.clear()
        resumed = await rt.resume("deep_fork")
    assert resumed.output == "A B 2 ok | C D E 13 ok | F 1 ok"
    assert CALLS == ["review[d2].check", "total"]
    # The fork called only D's count and what follows it in d2: fetch, d1 and d3 whole,
    # d2's read and the counts of C and E were kept.
    assert resumed.state.forked_from is not None
    assert resumed.state.steps["review[d2].count[C]"].status == "completed"
    assert resumed.state.steps["review[d2].count[D]"].output == 11


async def test_a_path_that_is_not_a_call_of_the_run_is_refused(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        await rt.run(pipeline, None, run_id="src")
        for at, code in (
            ("review[d9].check", "fork_unknown_step"),
            ("review[d1].nothing", "fork_unknown_step"),
            ("review[", "fork_unknown_step"),
        ):
            with pytest.raises(InvalidForkPointError) as refused:
                await rt.fork("src", at=at)
            assert refused.value.code == code
        assert len(await rt.events.list_runs()) == 1
