"""Sync user code runs in worker threads, never on the event loop (issue 17, point 2).

Each callable records the thread it ran in (and, for the map, when it started and
ended); the tests compare with the loop's own thread and check that the sleeping
branches of a map overlap rather than follow one another. No test asserts a duration.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from little_workflow.events import StepCompleted
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import (
    AgentStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    Workflow,
)
from little_workflow.runtime import (
    Continue,
    Cycle,
    Done,
    Happened,
    Runtime,
    StepContext,
    side_effect,
)
from tests.runtime.support import runtime

pytestmark = pytest.mark.timeout(90)


def one_step(fn: str) -> Workflow:
    return Workflow(
        name=f"one-{fn.replace(':', '-').replace('.', '-')}",
        steps=[ExecuteStep(id="s", fn=fn), OutputStep(id="out", value="${steps.s.output}")],
    )


async def test_a_map_of_blocking_sync_steps_runs_its_branches_at_once(tmp_path: Path) -> None:
    intervals: dict[int, tuple[float, float, int]] = {}

    def nap(index: int) -> int:
        start = time.monotonic()
        time.sleep(1.0)
        intervals[index] = (start, time.monotonic(), threading.get_ident())
        return index

    workflow = Workflow(
        name="naps",
        steps=[
            MapStep(
                id="m",
                items=list(range(8)),
                concurrency=8,
                body=[ExecuteStep(id="w", fn="t.m:nap", with_={"index": "${item}"})],
            ),
            OutputStep(id="out", value="${steps.m.output}"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.m:nap": nap}) as rt:
        result = await rt.run(workflow, None, run_id="run_naps")
    assert result.output == list(range(8))
    assert sorted(intervals) == list(range(8))
    # All eight were asleep at one instant: the last to start started before the first
    # to end had ended. Inline on the loop they would follow one another.
    latest_start = max(start for start, _, _ in intervals.values())
    earliest_end = min(end for _, end, _ in intervals.values())
    assert latest_start < earliest_end, intervals
    assert threading.get_ident() not in {ident for _, _, ident in intervals.values()}


async def test_the_runtime_runs_at_most_sync_threads_sync_steps_at_once(tmp_path: Path) -> None:
    lock = threading.Lock()
    inside, most = 0, 0

    def nap(index: int) -> int:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        time.sleep(0.2)
        with lock:
            inside -= 1
        return index

    workflow = Workflow(
        name="bounded-naps",
        steps=[
            MapStep(
                id="m",
                items=list(range(6)),
                concurrency=6,
                body=[ExecuteStep(id="w", fn="t.m:nap", with_={"index": "${item}"})],
            ),
            OutputStep(id="out", value="${steps.m.output}"),
        ],
    )
    async with runtime(tmp_path / "data", functions={"t.m:nap": nap}, sync_threads=2) as rt:
        result = await rt.run(workflow, None, run_id="run_bounded")
    assert result.output == list(range(6))
    assert most == 2


async def test_sync_step_and_decision_functions_run_off_the_loop(tmp_path: Path) -> None:
    seen: list[tuple[str, int]] = []

    def step() -> str:
        seen.append(("step", threading.get_ident()))
        return "go"

    def decide() -> str:
        seen.append(("decide", threading.get_ident()))
        return "done"

    workflow = Workflow.model_validate(
        {
            "name": "decided",
            "steps": [
                {"id": "s", "kind": "execute", "fn": "t.m:step"},
                {"id": "d", "kind": "decision", "fn": "t.m:decide", "routes": {"done": "out"}},
                {"id": "out", "kind": "output", "value": "${steps.s.output}"},
            ],
        }
    )
    functions = {"t.m:step": step, "t.m:decide": decide}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        result = await rt.run(workflow, None, run_id="run_decided")
    assert result.output == "go"
    assert [name for name, _ in seen] == ["step", "decide"]
    assert threading.get_ident() not in {ident for _, ident in seen}


async def test_an_agents_sync_tool_runs_off_the_loop(tmp_path: Path) -> None:
    threads: list[int] = []

    def probe(word: str) -> str:
        """Echo a word.

        Args:
            word: The word.
        """
        threads.append(threading.get_ident())
        return word.upper()

    def model(request: ModelRequest) -> Any:
        if not any(message.role == "assistant" for message in request.messages):
            return {"tool_calls": [{"id": "c1", "name": "probe", "arguments": {"word": "hi"}}]}
        return f"said {request.messages[-1].content}"

    workflow = Workflow(
        name="probing",
        steps=[
            AgentStep(id="agent", slot="s", prompt="Probe", tools=["probe"]),
            OutputStep(id="out", value="${steps.agent.output}"),
        ],
    )
    slots = {"s": ModelSlot(provider=scripted(model), model="m")}
    async with runtime(tmp_path / "data", model_slots=slots, tools=[tool(probe)]) as rt:
        result = await rt.run(workflow, None, run_id="run_probe")
    assert result.output == "said HI"
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_sync_supervise_runs_off_the_loop(tmp_path: Path) -> None:
    threads: list[int] = []

    async def answer() -> str:
        return "answer"

    def supervise(cycle: Cycle) -> Done | Continue:
        threads.append(threading.get_ident())
        return Done(final_output=cycle.output)

    async with runtime(tmp_path / "data", functions={"t.m:answer": answer}) as rt:
        outcome = await rt.run_outer_loop(
            one_step("t.m:answer"), None, max_outer_cycles=2, supervise=supervise
        )
    assert outcome.final_output == "answer"
    assert len(threads) == 1
    assert threads[0] != threading.get_ident()


async def test_a_sync_reconcile_hook_runs_off_the_loop(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()
    hook_threads: list[int] = []
    calls: list[str] = []

    def reconcile(key: str) -> Happened | None:
        hook_threads.append(threading.get_ident())
        return Happened({"charged": key})

    @side_effect(reconcile=reconcile)
    def charge(ctx: StepContext) -> dict[str, str]:
        calls.append(ctx.run_id)
        entered.set()
        release.wait(60)  # blocks until the test ends: the run is cancelled meanwhile
        return {"charged": "late"}

    functions = {"t.m:charge": charge}
    workflow = one_step("t.m:charge")
    data = tmp_path / "data"
    try:
        async with runtime(data, functions=functions) as rt:
            task = asyncio.create_task(rt.run(workflow, None, run_id="run_pay"))
            assert await asyncio.to_thread(entered.wait, 30)
            # The loop is free while the step blocks: its task can be cancelled, and the
            # intent without outcome stays for the resume to reconcile.
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        async with runtime(data, functions=functions) as rt:
            result = await rt.resume("run_pay")
            completed = [
                record.event
                for record in await rt.events.read("run_pay")
                if isinstance(record.event, StepCompleted)
            ]
    finally:
        release.set()
    assert result.output == {"charged": "run_pay/s"}
    assert calls == ["run_pay"]  # not called again: the hook said it happened
    assert [event.step_path for event in completed] == ["s"]
    assert len(hook_threads) == 1
    assert hook_threads[0] != threading.get_ident()


REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="unset")


def read_request() -> str:
    return REQUEST.get()


async def test_a_sync_step_sees_the_callers_context_variables(tmp_path: Path) -> None:
    REQUEST.set("req-42")
    async with runtime(tmp_path / "data", functions={"t.m:read": read_request}) as rt:
        result = await rt.run(one_step("t.m:read"), None, run_id="run_ctx")
    assert result.output == "req-42"


async def test_a_sync_function_that_returns_an_awaitable_has_it_awaited(tmp_path: Path) -> None:
    async def later() -> str:
        return "awaited"

    def wrapper() -> Any:
        return later()

    async with runtime(tmp_path / "data", functions={"t.m:wrapper": wrapper}) as rt:
        result = await rt.run(one_step("t.m:wrapper"), None, run_id="run_wrapped")
    assert result.output == "awaited"


@pytest.mark.parametrize("size", [0, -1, True, 1.5])
def test_sync_threads_must_be_a_positive_integer(tmp_path: Path, size: Any) -> None:
    from little_workflow.errors import ConfigError

    with pytest.raises(ConfigError, match="sync_threads must be a positive integer"):
        Runtime(tmp_path / "data", sync_threads=size)
    assert not (tmp_path / "data").exists()
