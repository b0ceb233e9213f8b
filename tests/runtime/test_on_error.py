"""LWIR ``onError``: a step that fails for good routes to a step of its list, which reads
the failure as ``${steps.<id>.error}``; the failure is in the log, so a resume takes the
same route without running the failed step again; bad routes are refused up front."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_workflow import LwirValidationError, RunFailedError, parse_workflow
from little_workflow.events import StepCompleted, StepFailed
from little_workflow.runtime import StepContext
from tests.runtime.support import Crash, runtime

CALLS: list[str] = []


def charge(amount: int) -> str:
    CALLS.append("charge")
    raise ValueError(f"card declined for {amount}")


def apologise(error: dict[str, Any], crash: bool = False) -> str:
    CALLS.append("apologise")
    if crash and CALLS.count("apologise") == 1:
        raise Crash()
    return f"sorry: {error['code']} at {error['path']}"


def document(**changes: Any) -> dict[str, Any]:
    charge_step: dict[str, Any] = {
        "id": "charge",
        "kind": "execute",
        "fn": "t:charge",
        "with": {"amount": "${input.amount}"},
        "onError": "apologise",
    }
    charge_step.update(changes)
    return {
        "lwir": 1,
        "name": "pay",
        "steps": [
            charge_step,
            {"id": "paid", "kind": "output", "value": "${steps.charge.output}"},
            {
                "id": "apologise",
                "kind": "execute",
                "fn": "t:apologise",
                "with": {"error": "${steps.charge.error}", "crash": "${input.crash}"},
            },
            {"id": "declined", "kind": "output", "value": "${steps.apologise.output}"},
        ],
    }


FUNCTIONS: dict[str, Callable[..., Any]] = {"t:charge": charge, "t:apologise": apologise}


async def test_a_failure_takes_the_on_error_route_and_a_resume_replays_it(tmp_path: Path) -> None:
    CALLS.clear()
    workflow = parse_workflow(document())
    async with runtime(tmp_path / "data", functions=FUNCTIONS) as rt:
        with pytest.raises(Crash):
            await rt.run(workflow, {"amount": 3, "crash": True}, run_id="run_pay")
        result = await rt.resume("run_pay")
        records = await rt.events.read("run_pay")
    assert result.output == "sorry: step_failed at charge"
    # charge ran once: its recorded failure routed the resume without calling it again.
    assert CALLS == ["charge", "apologise", "apologise"]
    failed = [r.event for r in records if isinstance(r.event, StepFailed)]
    assert [(f.step_path, f.cause_code) for f in failed] == [("charge", "step_failed")]
    assert "card declined for 3" in failed[0].message
    assert result.state.status.value == "completed"


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"onError": "apologize"}, 'steps[0].onError: unknown step "apologize"'),
        ({"onError": None}, 'step "charge" has no onError, so it has no error'),
    ],
)
def test_bad_on_error_routes_are_refused(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(document(**changes))
    assert problem in str(caught.value)


# --- onError on a step that loops (maxVisits above 1) ------------------------------------


FIXED: list[bool] = []


def flaky(ctx: StepContext, fails: int) -> str:
    """Fails at its first ``fails`` visits, then answers."""
    CALLS.append(f"flaky {ctx.step_path}")
    assert ctx.visit is not None
    if ctx.visit < fails and not FIXED:
        raise ValueError(f"busy at visit {ctx.visit}")
    return f"done at {ctx.step_path}"


def note(error: dict[str, Any], crash_at: int) -> str:
    CALLS.append(f"note {error['path']}")
    if CALLS.count(f"note {error['path']}") == 1 and error["path"] == f"charge.visit[{crash_at}]":
        raise Crash()
    return f"{error['code']} at {error['path']}: {error['message'].rsplit(': ', 1)[-1]}"


def looping(fails: int, crash_at: int = -1) -> dict[str, Any]:
    """charge (up to 3 visits) fails ``fails`` times; each failure is noted, then it goes
    back to charge."""
    return {
        "lwir": 1,
        "name": "retrying-pay",
        "steps": [
            {
                "id": "charge",
                "kind": "execute",
                "fn": "t:flaky",
                "with": {"fails": fails},
                "maxVisits": 3,
                "onError": "note",
            },
            {"id": "paid", "kind": "output", "value": "${steps.charge.output}"},
            {
                "id": "note",
                "kind": "execute",
                "fn": "t:note",
                "with": {"error": "${steps.charge.error}", "crash_at": crash_at},
                "maxVisits": 3,
                "next": "charge",
            },
        ],
    }


LOOP_FUNCTIONS: dict[str, Callable[..., Any]] = {"t:flaky": flaky, "t:note": note}


async def test_on_error_on_a_looping_step_routes_each_failed_visit(tmp_path: Path) -> None:
    CALLS.clear()
    workflow = parse_workflow(looping(fails=2, crash_at=1))
    async with runtime(tmp_path / "data", functions=LOOP_FUNCTIONS) as rt:
        with pytest.raises(Crash):
            await rt.run(workflow, None, run_id="run_loop")
        result = await rt.resume("run_loop")
        records = await rt.events.read("run_loop")
    assert result.output == "done at charge.visit[2]"
    # Each visit of charge ran once; the note of visit 1 was cut by the crash and ran
    # again, with the error of that visit, not of the first.
    assert CALLS == [
        "flaky charge.visit[0]",
        "note charge.visit[0]",
        "flaky charge.visit[1]",
        "note charge.visit[1]",
        "note charge.visit[1]",
        "flaky charge.visit[2]",
    ]
    failed = [
        (r.event.step_path, r.event.cause_code) for r in records if isinstance(r.event, StepFailed)
    ]
    assert failed == [("charge.visit[0]", "step_failed"), ("charge.visit[1]", "step_failed")]
    completed = {
        r.event.step_path: r.event.output for r in records if isinstance(r.event, StepCompleted)
    }
    assert completed == {
        "note.visit[0]": "step_failed at charge.visit[0]: busy at visit 0",
        "note.visit[1]": "step_failed at charge.visit[1]: busy at visit 1",
        "charge.visit[2]": "done at charge.visit[2]",
    }
    assert result.state.status.value == "completed"


async def test_a_looping_step_that_fails_every_visit_ends_at_max_visits(tmp_path: Path) -> None:
    CALLS.clear()
    workflow = parse_workflow(looping(fails=3))
    async with runtime(tmp_path / "data", functions=LOOP_FUNCTIONS) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, None, run_id="run_spent")
        state = (await rt.replay("run_spent")).state
    assert caught.value.cause_code == "max_visits_exceeded"
    assert [c for c in CALLS if c.startswith("flaky")] == [
        "flaky charge.visit[0]",
        "flaky charge.visit[1]",
        "flaky charge.visit[2]",
    ]
    assert state.visits("charge") == 3
    assert state.visits("note") == 3
    # A retry runs the failed visits again (from the first); the far end is fixed now.
    FIXED.append(True)
    try:
        async with runtime(tmp_path / "data", functions=LOOP_FUNCTIONS) as rt:
            retried = await rt.retry("run_spent")
    finally:
        FIXED.clear()
    assert retried.output == "done at charge.visit[0]"


async def test_a_with_that_does_not_render_is_routed_at_its_visit(tmp_path: Path) -> None:
    CALLS.clear()
    document = looping(fails=0)
    document["steps"][0]["with"] = {"fails": "${input.missing}"}
    document["steps"][2]["maxVisits"] = 1
    document["steps"][2]["next"] = "declined"
    document["steps"].append({"id": "declined", "kind": "output", "value": "${steps.note.output}"})
    async with runtime(tmp_path / "data", functions=LOOP_FUNCTIONS) as rt:
        result = await rt.run(parse_workflow(document), {}, run_id="run_template")
        again = await rt.resume("run_template")
    assert result.output == again.output
    assert str(result.output).startswith("template_error at charge.visit[0]")
    assert CALLS == ["note charge.visit[0]"]
