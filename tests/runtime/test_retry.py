"""The per-step retry policy, and ``Runtime.retry`` of a failed run.

Backoff goes through the runtime's injected ``sleep``, which records its delays, so the
schedule is asserted exactly and no test waits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import RunResumed, RunStarted, StepAttemptStarted
from little_workflow.lwir import ExecuteStep, OutputStep, RetryPolicy, Workflow
from little_workflow.runtime import StepContext
from tests.runtime.support import FakeSleep, ev, of_type, runtime, summary, types


class RateLimited(Exception):
    """An error with a stable code, as a provider client would raise."""

    code = "rate_limited"


class BadRequest(Exception):
    code = "bad_request"


class SlowUpstream(TimeoutError):
    """Matched by ``retryOn: [TimeoutError]`` through its base class."""


class Flaky:
    """A step function that raises the given errors in turn, then succeeds."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.attempts: list[int] = []

    def __call__(self, ctx: StepContext) -> dict[str, Any]:
        self.attempts.append(ctx.attempt)
        assert ctx.step_path == "call"
        assert ctx.idempotency_key == f"{ctx.run_id}/call"
        if self.errors:
            raise self.errors.pop(0)
        return {"ok": True, "attempt": ctx.attempt}


def flow(retry: RetryPolicy | None = None) -> Workflow:
    step = ExecuteStep(id="call", fn="t.retry:call", retry=retry or RetryPolicy())
    return Workflow(
        name="retrying", steps=[step, OutputStep(id="out", value="${steps.call.output}")]
    )


async def test_backoff_schedule_attempt_numbers_and_events(tmp_path: Path) -> None:
    flaky = Flaky(RateLimited("slow down"), RateLimited("slow down"), RateLimited("slow down"))
    sleep = FakeSleep()
    policy = RetryPolicy(attempts=4, backoff=0.5, multiplier=3, max_backoff=2)
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}, sleep=sleep) as rt:
        result = await rt.run(flow(policy), None, run_id="run_backoff")
        records = await rt.events.read("run_backoff")

    assert result.output == {"ok": True, "attempt": 4}
    assert flaky.attempts == [1, 2, 3, 4]
    # 0.5, 0.5*3, then 0.5*9 capped at 2.
    assert sleep.delays == [0.5, 1.5, 2.0]
    assert summary(records) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "call"),
        ("StepAttemptFailed", "call"),
        ("StepAttemptStarted", "call"),
        ("StepAttemptFailed", "call"),
        ("StepAttemptStarted", "call"),
        ("StepAttemptFailed", "call"),
        ("StepAttemptStarted", "call"),
        ("StepCompleted", "call"),
        ("RunCompleted", None),
    ]
    assert [e.attempt for e in of_type(records, "StepAttemptStarted")] == [1, 2, 3, 4]
    failed = of_type(records, "StepAttemptFailed")
    assert [(e.attempt, e.error_code, e.will_retry) for e in failed] == [
        (1, "rate_limited", True),
        (2, "rate_limited", True),
        (3, "rate_limited", True),
    ]
    assert failed[0].message == "slow down"
    assert result.state.steps["call"].attempts == 4
    assert result.state.steps["call"].failures == 3


async def test_exhausted_attempts_fail_the_step_and_the_run(tmp_path: Path) -> None:
    flaky = Flaky(*(ValueError(f"bad {n}") for n in range(5)))
    sleep = FakeSleep()
    policy = RetryPolicy(attempts=3, backoff=1, multiplier=2)
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}, sleep=sleep) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(flow(policy), None, run_id="run_exhausted")
        records = await rt.events.read("run_exhausted")

    assert caught.value.cause_code == "step_failed"
    assert caught.value.run_id == "run_exhausted"
    assert "'call'" in str(caught.value)
    assert "bad 2" in str(caught.value)
    assert flaky.attempts == [1, 2, 3]
    assert sleep.delays == [1.0, 2.0]
    assert types(records)[-4:] == [
        "StepAttemptStarted",
        "StepAttemptFailed",
        "StepFailed",
        "RunFailed",
    ]
    failed = of_type(records, "StepAttemptFailed")
    assert [(e.error_code, e.will_retry) for e in failed] == [
        ("ValueError", True),
        ("ValueError", True),
        ("ValueError", False),
    ]
    (step_failed,) = of_type(records, "StepFailed")
    assert (step_failed.step_path, step_failed.cause_code) == ("call", "step_failed")
    (run_failed,) = of_type(records, "RunFailed")
    assert (run_failed.cause_code, run_failed.step_path) == ("step_failed", "call")


@pytest.mark.parametrize(
    ("retry_on", "errors", "retried"),
    [
        # by error code
        (["rate_limited"], [RateLimited("429")], True),
        (["rate_limited"], [BadRequest("400")], False),
        # by exception class name, the class's own or a base class's, bare or qualified
        (["TimeoutError"], [TimeoutError("t/o")], True),
        (["TimeoutError"], [SlowUpstream("t/o")], True),
        (["builtins.TimeoutError"], [TimeoutError("t/o")], True),
        (["TimeoutError"], [ValueError("no")], False),
        (["SlowUpstream"], [TimeoutError("plain")], False),
    ],
)
async def test_retry_on_filters_by_code_and_class_name(
    tmp_path: Path, retry_on: list[str], errors: list[BaseException], retried: bool
) -> None:
    flaky = Flaky(*errors)
    sleep = FakeSleep()
    policy = RetryPolicy(attempts=3, backoff=0.25, retry_on=tuple(retry_on))
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}, sleep=sleep) as rt:
        if retried:
            result = await rt.run(flow(policy), None, run_id="run_filter")
            assert result.output == {"ok": True, "attempt": 2}
        else:
            with pytest.raises(RunFailedError) as caught:
                await rt.run(flow(policy), None, run_id="run_filter")
            assert caught.value.cause_code == "step_failed"
        records = await rt.events.read("run_filter")

    failed = of_type(records, "StepAttemptFailed")
    assert [e.will_retry for e in failed] == [retried]
    assert flaky.attempts == ([1, 2] if retried else [1])  # a non-listed error fails at once
    assert sleep.delays == ([0.25] if retried else [])


async def test_an_error_with_a_config_error_code_is_never_retried(tmp_path: Path) -> None:
    flaky = Flaky(ConfigError("the step is misconfigured"))
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}) as rt:
        with pytest.raises(RunFailedError):
            await rt.run(flow(RetryPolicy(attempts=5)), None, run_id="run_config")
        failed = of_type(await rt.events.read("run_config"), "StepAttemptFailed")
    assert [(e.error_code, e.will_retry) for e in failed] == [("config_error", False)]
    assert flaky.attempts == [1]


async def test_an_attempt_cut_by_a_crash_does_not_consume_the_retry_budget(
    tmp_path: Path,
) -> None:
    """The log of a process that died inside attempt 1: it started and never ended.

    With ``attempts: 2`` the resumed run still has two failing attempts to spend: the
    one that failed (attempt 2) is retried, and attempt 3 succeeds.
    """
    flaky = Flaky(RateLimited("once"))
    sleep = FakeSleep()
    workflow = flow(RetryPolicy(attempts=2, backoff=3))
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}, sleep=sleep) as rt:
        version = await rt.catalog.pin(workflow)
        await rt.events.append(
            "run_cut",
            [
                RunStarted(
                    workflow_name=version.name,
                    definition_hash=version.definition_hash,
                    workflow_version_id=version.version_id,
                ),
                StepAttemptStarted(step_path="call", step_id="call", kind="execute", attempt=1),
            ],
        )
        result = await rt.resume("run_cut")
        records = await rt.events.read("run_cut")

    assert result.output == {"ok": True, "attempt": 3}
    assert flaky.attempts == [2, 3]
    assert sleep.delays == [3.0]
    assert summary(records)[2:] == [
        ("RunResumed", None),
        ("StepAttemptStarted", "call"),
        ("StepAttemptFailed", "call"),
        ("StepAttemptStarted", "call"),
        ("StepCompleted", "call"),
        ("RunCompleted", None),
    ]
    assert [e.attempt for e in of_type(records, "StepAttemptStarted")] == [1, 2, 3]
    assert [(e.attempt, e.will_retry) for e in of_type(records, "StepAttemptFailed")] == [(2, True)]


# --- Runtime.retry ----------------------------------------------------------------------


def two_steps() -> Workflow:
    return Workflow(
        name="retry-run",
        steps=[
            ExecuteStep(id="first", fn="t.retry:first", with_={"x": "${input.x}"}),
            ExecuteStep(id="second", fn="t.retry:second", with_={"y": "${steps.first.output}"}),
            OutputStep(
                id="out",
                value={"first": "${steps.first.output}", "second": "${steps.second.output}"},
            ),
        ],
    )


async def test_retry_reruns_only_the_failed_step_with_the_same_version_and_input(
    tmp_path: Path,
) -> None:
    flag = tmp_path / "fixed"
    calls: list[str] = []

    def first(x: int) -> int:
        calls.append("first")
        return x + 1

    def second(y: int, ctx: StepContext) -> str:
        calls.append(f"second@{ctx.attempt}")
        if not flag.exists():
            raise RuntimeError("the upstream is down")
        return f"y={y}"

    functions: dict[str, Any] = {"t.retry:first": first, "t.retry:second": second}
    async with runtime(tmp_path / "data", functions=functions) as rt:
        with pytest.raises(RunFailedError) as failure:
            await rt.run(two_steps(), {"x": 1}, run_id="run_retry")
        assert failure.value.cause_code == "step_failed"

        # resume does not retry: it reports the recorded failure.
        with pytest.raises(RunFailedError) as resumed:
            await rt.resume("run_retry")
        assert resumed.value.cause_code == "step_failed"
        assert "the upstream is down" in str(resumed.value)
        seen = len(await rt.events.read("run_retry"))
        assert calls == ["first", "second@1"]

        replayed = await rt.replay("run_retry")
        assert replayed.frontier == ("second",)
        assert replayed.unreached == ()

    flag.touch()
    async with runtime(tmp_path / "data", functions=functions) as rt:
        result = await rt.retry("run_retry")
        records = await rt.events.read("run_retry")

        assert result.output == {"first": 2, "second": "y=2"}
        assert (result.executed_steps, result.replayed_steps) == (1, 1)
        assert calls == ["first", "second@1", "second@2"]
        assert ev(records[seen]) == RunResumed(reason="retry", pid=ev(records[seen]).pid)
        assert summary(records[seen:]) == [
            ("RunResumed", None),
            ("StepAttemptStarted", "second"),
            ("StepCompleted", "second"),
            ("RunCompleted", None),
        ]
        (started,) = of_type(records[:1], "RunStarted")
        assert started.input == {"x": 1}
        assert result.state.workflow_version_id == started.workflow_version_id

        with pytest.raises(ConfigError) as not_failed:
            await rt.retry("run_retry")
        assert not_failed.value.code == "run_not_failed"
        assert len(await rt.events.read("run_retry")) == len(records)


async def test_retry_after_exhausted_attempts_gets_a_fresh_budget(tmp_path: Path) -> None:
    flaky = Flaky(*(ValueError(str(n)) for n in range(1, 6)))
    sleep = FakeSleep()
    policy = RetryPolicy(attempts=2, backoff=1)
    async with runtime(tmp_path / "data", functions={"t.retry:call": flaky}, sleep=sleep) as rt:
        with pytest.raises(RunFailedError):
            await rt.run(flow(policy), None, run_id="run_budget")
        assert flaky.attempts == [1, 2]
        with pytest.raises(RunFailedError):
            await rt.retry("run_budget")
        assert flaky.attempts == [1, 2, 3, 4]
        result = await rt.retry("run_budget")
    # Each retry spends a budget of its own: two attempts, one backoff between them.
    assert result.output == {"ok": True, "attempt": 6}
    assert flaky.attempts == [1, 2, 3, 4, 5, 6]
    assert sleep.delays == [1.0, 1.0, 1.0]
