"""Outer loops (Layer B): cancellation, ``timeout``, and one caller at a time per loop.

A cancelled or timed-out call leaves the loop resumable: the next call reuses the
pending cycle's run id and does not run its committed steps again. A second caller
waits (or gives up with ``LockTimeoutError`` after its ``timeout``, or stops when it is
cancelled) and then gets the result the first committed; ``supervise()`` runs once per
cycle (counted in a file outside the process).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import LockTimeoutError, SupervisorError
from little_workflow.runtime import Continue, Cycle, Done, Runtime, StepContext
from tests.runtime.outer_support import (
    ANSWER_ENV,
    CALLS_ENV,
    DONE_AT_ENV,
    ENTERED_ENV,
    FLOW,
    KILL_ENV,
    RELEASE_ENV,
    events,
    manifest,
    record,
    steps,
    supervise,
    supervised,
)
from tests.runtime.support import runtime

INPUT = {"topic": "tea"}
POLISH = "tests.runtime.outer_support:polish"


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The calls file, named in the environment; the other switches cleared."""
    path = tmp_path / "calls"
    monkeypatch.setenv(CALLS_ENV, str(path))
    for name in (KILL_ENV, DONE_AT_ENV, ANSWER_ENV, ENTERED_ENV, RELEASE_ENV):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def polished(topic: str, cycle: int) -> dict[str, JsonValue]:
    """What a cycle of ``outer_cycle.yaml`` outputs."""
    return {"text": f"{topic} v{cycle} (polished)", "cycle": cycle}


class Gate:
    """An async ``polish`` that holds cycle ``cycle`` until ``release`` is set."""

    def __init__(self, cycle: int) -> None:
        self.cycle = cycle
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def polish(
        self, ctx: StepContext, draft: dict[str, JsonValue], cycle: int
    ) -> dict[str, JsonValue]:
        record("step", ctx.run_id, ctx.step_path)
        if cycle == self.cycle and not self.release.is_set():
            self.entered.set()
            await self.release.wait()
        return {"text": f"{draft['text']} (polished)", "cycle": cycle}


# --- cancellation, timeout, a second caller --------------------------------------------


async def test_a_cancelled_loop_resumes_its_cycle_under_the_same_run_id(
    data: Path, calls: Path
) -> None:
    gate = Gate(cycle=2)
    async with runtime(data, functions={POLISH: gate.polish}) as rt:
        task = asyncio.create_task(
            rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_cancel"
            )
        )
        await gate.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        doc = manifest(data, "ol_cancel")
        pending = doc["pendingCycleRunId"]
        assert len(doc["cycles"]) == 1
        assert pending is not None
        assert list((data / "locks").iterdir()) == []  # both locks released
        assert supervised(calls) == [1]

        gate.release.set()
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_cancel"
        )
    assert outcome.kind == "exhausted"
    assert outcome.final_output == polished("tea", 3)
    assert outcome.cycles[1].run_id == pending
    assert "RunResumed" in [type_name for type_name, _ in events(data, pending)]
    # draft of cycle 2 was committed before the cancellation: it did not run again.
    assert steps(calls).count((pending, "draft")) == 1
    assert steps(calls).count((pending, "polish")) == 2
    assert supervised(calls) == [1, 2, 3]


async def test_a_timeout_during_a_cycle_leaves_the_loop_resumable(data: Path, calls: Path) -> None:
    gate = Gate(cycle=1)
    async with runtime(data, functions={POLISH: gate.polish}) as rt:
        with pytest.raises(TimeoutError):
            await rt.run_outer_loop(
                FLOW,
                INPUT,
                max_outer_cycles=1,
                supervise=supervise,
                outer_loop_id="ol_slow",
                timeout=0.5,
            )
        assert gate.entered.is_set()  # it ran out inside the cycle
        pending = manifest(data, "ol_slow")["pendingCycleRunId"]
        assert pending is not None
        gate.release.set()
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=1, supervise=supervise, outer_loop_id="ol_slow"
        )
    assert outcome.cycles[0].run_id == pending
    assert supervised(calls) == [1]


async def test_a_second_caller_waits_then_gets_the_same_result(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DONE_AT_ENV, "2")
    gate = Gate(cycle=1)
    options: dict[str, Any] = {
        "max_outer_cycles": 3,
        "supervise": supervise,
        "outer_loop_id": "ol_shared",
    }
    async with runtime(data, functions={POLISH: gate.polish}) as first_rt:
        first = asyncio.create_task(first_rt.run_outer_loop(FLOW, INPUT, **options))
        await gate.entered.wait()
        lock = data / "locks" / "outer-loop-ol_shared.lock"
        assert json.loads(lock.read_text())["purpose"] == "outer loop 'ol_shared'"

        # Another runtime on the same data directory: the loop is held.
        async with runtime(data, functions={POLISH: gate.polish}) as second_rt:
            with pytest.raises(LockTimeoutError) as timed_out:
                await second_rt.run_outer_loop(FLOW, INPUT, **options, timeout=0.05)
            assert "outer loop 'ol_shared'" in str(timed_out.value)
            assert f"pid {os.getpid()} (alive" in str(timed_out.value)

            # A waiter that is cancelled leaves the lock and the loop alone.
            cancelled = asyncio.create_task(second_rt.run_outer_loop(FLOW, INPUT, **options))
            waiting = asyncio.create_task(second_rt.run_outer_loop(FLOW, INPUT, **options))
            for _ in range(20):
                await asyncio.sleep(0)
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert not first.done()
            assert not waiting.done()
            assert supervised(calls) == []

            gate.release.set()
            one, two = await first, await waiting
    assert one == two
    assert one.final_output == {"answer": "first", "last": polished("tea", 2)}
    assert supervised(calls) == [1, 2]
    assert len(steps(calls)) == 4


async def test_a_new_runtime_object_resumes_what_another_committed(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The manifest, not memory, carries the loop: a fresh ``Runtime`` resumes it."""

    def stop_after_one(cycle: Cycle) -> Done | Continue:
        if cycle.cycle_number == 2:
            raise RuntimeError("the supervisor broke")
        return supervise(cycle)

    async with Runtime(data) as rt:
        with pytest.raises(SupervisorError):
            await rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=2, supervise=stop_after_one, outer_loop_id="ol_fresh"
            )
    pending = manifest(data, "ol_fresh")["pendingCycleRunId"]
    async with Runtime(data) as rt:
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=2, supervise=supervise, outer_loop_id="ol_fresh"
        )
    assert outcome.cycles[1].run_id == pending
    assert supervised(calls) == [1, 2]
    assert len(steps(calls)) == 4
