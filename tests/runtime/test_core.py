"""``DurableRun`` driven without LWIR: a front end of plain Python calls, as code-first is.

A unit here is a ``StepUnit`` whose identity is a function's qualified name and whose
``call`` calls the function: no workflow model, no walk. The core must record, retry,
replay and refuse exactly as it does under the LWIR walk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import MemoMismatchError, RunFailedError
from little_workflow.events import RunStarted
from little_workflow.lwir import RetryPolicy, StepPath
from little_workflow.runtime import RunState, Runtime, Site, fold
from little_workflow.runtime._core import DurableRun, StepUnit
from tests.runtime.support import FakeSleep, of_type, runtime, types


def add(a: int, b: int) -> int:
    return a + b


def double(x: int) -> int:
    return 2 * x


class Calls:
    """Python functions as units: each call is recorded here, then made."""

    def __init__(self, run: DurableRun) -> None:
        self.run = run
        self.made: list[str] = []

    async def step(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: int,
        retry: RetryPolicy | None = None,
        identity: str | None = None,
    ) -> JsonValue:
        site = Site(StepPath.root(name), name, None, identity or fn.__qualname__)
        unit = StepUnit(site, "execute", name, retry or RetryPolicy())

        async def call(attempt: int, arguments: dict[str, JsonValue] | None) -> Any:
            self.made.append(name)
            return fn(*args)

        return await self.run.unit(unit, call)


async def _start(rt: Runtime, run_id: str) -> DurableRun:
    run = DurableRun(rt, RunState(run_id=run_id))
    started = RunStarted(
        workflow_name="code", definition_hash="code", workflow_version_id="code", input=3
    )
    await run.append([started], sync=True)
    return run


async def _resume(rt: Runtime, run_id: str, *, pinned: bool = True) -> DurableRun:
    return DurableRun(rt, fold(run_id, await rt.events.read(run_id)), pinned=pinned)


class Interrupted(Exception):
    """The process stops here (as a kill would) before the run's end is committed."""


def _program(calls: Calls, *, stop: bool = False) -> Callable[[], Awaitable[JsonValue]]:
    async def body() -> JsonValue:
        total = await calls.step("add", add, 1, 2)
        assert isinstance(total, int)
        doubled = await calls.step("double", double, total)
        if stop:
            raise Interrupted
        return doubled

    return body


async def test_python_calls_run_once_are_committed_and_replay_without_running(
    tmp_path: Path,
) -> None:
    async with runtime(tmp_path / "data") as rt:
        first = Calls(await _start(rt, "run_code"))
        with pytest.raises(Interrupted):
            await first.run.execute(_program(first, stop=True))
        assert first.made == ["add", "double"]
        assert (first.run.executed, first.run.replayed) == (2, 0)
        records = await rt.events.read("run_code")
        assert types(records) == [
            "RunStarted",
            "StepAttemptStarted",
            "StepCompleted",
            "StepAttemptStarted",
            "StepCompleted",
        ]
        completed = of_type(records, "StepCompleted")
        assert [(c.step_path, c.output, c.identity) for c in completed] == [
            ("add", 3, "add"),
            ("double", 6, "double"),
        ]

        again = Calls(await _resume(rt, "run_code"))
        assert await again.run.execute(_program(again)) == 6
        assert again.made == []
        assert (again.run.executed, again.run.replayed) == (0, 2)
        assert types(await rt.events.read("run_code"))[-1] == "RunCompleted"


async def test_a_failing_call_is_retried_under_its_policy_then_fails_the_run(
    tmp_path: Path,
) -> None:
    sleep = FakeSleep()
    failures: list[int] = []

    def flaky() -> int:
        failures.append(1)
        if len(failures) < 3:
            raise TimeoutError("slow")
        return 1

    async with runtime(tmp_path / "data", sleep=sleep) as rt:
        calls = Calls(await _start(rt, "run_flaky"))
        policy = RetryPolicy(attempts=3, backoff=0.5)

        async def body() -> JsonValue:
            return await calls.step("flaky", flaky, retry=policy)

        assert await calls.run.execute(body) == 1
        records = await rt.events.read("run_flaky")
        assert [f.attempt for f in of_type(records, "StepAttemptFailed")] == [1, 2]
        assert sleep.delays == [0.5, 1.0]

        failing = Calls(await _start(rt, "run_failing"))

        async def fails() -> JsonValue:
            return await failing.step("broken", lambda: 1 // 0, identity="broken")

        with pytest.raises(RunFailedError) as raised:
            await failing.run.execute(fails)
        assert raised.value.cause_code == "step_failed"
        records = await rt.events.read("run_failing")
        assert types(records)[-2:] == ["StepFailed", "RunFailed"]
        assert of_type(records, "StepFailed")[0].step_path == "broken"


async def test_a_call_whose_identity_changed_is_refused_not_replayed(tmp_path: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        first = Calls(await _start(rt, "run_renamed"))
        with pytest.raises(Interrupted):
            await first.run.execute(_program(first, stop=True))

        # The step at path "add" is now another function: its recorded value is not its.
        renamed = Calls(await _resume(rt, "run_renamed", pinned=False))

        async def body() -> JsonValue:
            return await renamed.step("add", double, 1)

        with pytest.raises(MemoMismatchError, match="add"):
            await renamed.run.execute(body)
        assert renamed.made == []
