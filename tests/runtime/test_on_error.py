"""LWIR ``onError``: a step that fails for good routes to a step of its list, which reads
the failure as ``${steps.<id>.error}``; the failure is in the log, so a resume takes the
same route without running the failed step again; bad routes are refused up front."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow import LwirValidationError, parse_workflow
from little_workflow.events import StepFailed
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


FUNCTIONS = {"t:charge": charge, "t:apologise": apologise}


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
        ({"maxVisits": 2}, "onError is for a step that runs once"),
        ({"onError": None}, 'step "charge" has no onError, so it has no error'),
    ],
)
def test_bad_on_error_routes_are_refused(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(document(**changes))
    assert problem in str(caught.value)
