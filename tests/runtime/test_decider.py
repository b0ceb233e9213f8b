"""The decider role: a ``decision`` step whose route a model chooses (``agent:``).

The model (``judge-model`` in ``role_support``) answers a route name, or ``{"route",
"output"}``; each visit of the decision is its own durable session, recorded and
replayed on resume like any other, and refused at resume if its slot drifted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from little_workflow.errors import CapabilityDriftError, RunFailedError
from little_workflow.events import RunStatus
from little_workflow.lwir import (
    DecisionAgent,
    DecisionStep,
    ExecuteStep,
    OutputStep,
    Workflow,
)
from little_workflow.runtime._agents import DECIDER_PREAMBLE
from tests.runtime.role_support import JUDGE_MODEL, make
from tests.runtime.session_support import cut_log
from tests.runtime.support import ev, of_type, types

ROUTES = {"accept": "accepted", "reject": "rejected"}


def deciding(prompt: str, *, instructions: str | None = None) -> Workflow:
    """A decision the ``judge`` slot makes on ``prompt``; each route ends the run."""
    return Workflow(
        name="deciding",
        steps=(
            DecisionStep(
                id="judge",
                agent=DecisionAgent(slot="judge", prompt=prompt, instructions=instructions),
                routes=ROUTES,
            ),
            OutputStep(
                id="accepted",
                value={"route": "${steps.judge.route}", "output": "${steps.judge.output}"},
            ),
            OutputStep(id="rejected", value="rejected"),
        ),
    )


def loop() -> Workflow:
    """write → judge → (revise) write → judge → (accept) done; both at most 3 visits."""
    return Workflow(
        name="drafting",
        steps=(
            ExecuteStep(id="write", fn="roles:write", max_visits=3),
            DecisionStep(
                id="judge",
                agent=DecisionAgent(slot="judge", prompt="Judge: ${steps.write.output}"),
                max_visits=3,
                routes={"revise": "write", "accept": "done"},
            ),
            OutputStep(id="done", value="${steps.write.output}"),
        ),
    )


async def test_a_route_name_answer_routes_the_decision(tmp_path: Path) -> None:
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(
            deciding("${input.question}"), {"question": "Route plain"}, run_id="r"
        )
        log = await rt.events.read("r")

    assert provider.calls == 1
    assert result.output == {"route": "accept", "output": "accept"}  # the answer, stripped
    assert [record.type for record in log if record.type != "harness.model.called"] == [
        "RunStarted",
        "StepAttemptStarted",
        "harness.session.started",
        "harness.model.responded",
        "harness.session.completed",
        "StepCompleted",
        "RunCompleted",
    ]
    (started,) = of_type(log, "harness.session.started")
    assert (started.session_id, started.role, started.step_path) == ("judge", "decider", "judge")
    assert started.manifest == {"role": "decider", "deciderModelSlotId": JUDGE_MODEL, "tools": []}
    assert of_type(log, "harness.session.completed")[0].output == "accept"
    completed = of_type(log, "StepCompleted")[0]
    assert (completed.kind, completed.route, completed.output) == ("decision", "accept", "accept")
    assert provider.requests[0].messages[-1].content == "Route plain"


async def test_a_route_with_an_output_gives_the_step_that_output(tmp_path: Path) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(deciding("Route scored"), run_id="r")
        log = await rt.events.read("r")

    assert result.output == {"route": "accept", "output": {"score": 9}}
    completed = of_type(log, "StepCompleted")[0]
    assert (completed.route, completed.output) == ("accept", {"score": 9})
    assert of_type(log, "harness.session.completed")[0].output == {
        "route": "accept",
        "output": {"score": 9},
    }


async def test_an_unknown_route_fails_the_run(tmp_path: Path) -> None:
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(deciding("Route bogus"), run_id="r")
        state = await rt.get_state("r")
        log = await rt.events.read("r")

    assert caught.value.cause_code == "unknown_route"
    assert state.status is RunStatus.FAILED
    assert state.failure_message == (
        "decision 'judge' chose route 'maybe later', which is not one of ['accept', 'reject']"
    )
    (failed,) = of_type(log, "StepFailed")
    assert (failed.step_path, failed.cause_code) == ("judge", "unknown_route")
    assert provider.calls == 1


async def test_the_decider_system_prompt_lists_the_routes(tmp_path: Path) -> None:
    workflow = deciding("Route plain", instructions="You judge ${input.what}.")
    rt, provider, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(workflow, {"what": "drafts"}, run_id="r")

    system = provider.requests[0].messages[0]
    assert system.role == "system"
    preamble = DECIDER_PREAMBLE.format(routes="- accept\n- reject")
    assert system.content == f"You judge drafts.\n\n{preamble}"
    assert system.content.endswith(
        "Answer with exactly one of these route names:\n- accept\n- reject\n"
        'or with {"route": "<route name>", "output": <anything worth passing on>}.'
    )


async def test_each_visit_of_a_decision_in_a_loop_is_its_own_session(tmp_path: Path) -> None:
    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.run(loop(), run_id="r")
        log = await rt.events.read("r")

    assert result.output == "draft v1"
    assert provider.calls == 2
    assert [request.messages[-1].content for request in provider.requests] == [
        "Judge: draft v0",
        "Judge: draft v1",
    ]
    assert [path for path, _ in calls.calls] == ["write.visit[0]", "write.visit[1]"]
    assert [(e.session_id, e.step_path) for e in of_type(log, "harness.session.started")] == [
        ("judge.visit[0]", "judge.visit[0]"),
        ("judge.visit[1]", "judge.visit[1]"),
    ]
    assert [(e.session_id, e.output) for e in of_type(log, "harness.session.completed")] == [
        ("judge.visit[0]", "revise"),
        ("judge.visit[1]", "accept"),
    ]
    judged = [e for e in of_type(log, "StepCompleted") if e.step_id == "judge"]
    assert [(e.visit, e.route) for e in judged] == [(0, "revise"), (1, "accept")]


@pytest.mark.parametrize(
    ("cut_after", "model_calls"),
    [
        pytest.param("judge.visit[1]", 0, id="both-decided"),
        pytest.param("write.visit[1]", 1, id="one-decided"),
    ],
)
async def test_a_resume_replays_the_recorded_decisions(
    tmp_path: Path, cut_after: str, model_calls: int
) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(loop(), run_id="ref")
        full = await rt.events.read("ref")
    cut = next(
        record.seq
        for record in full
        if record.type == "StepCompleted" and ev(record).step_path == cut_after
    )

    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == "draft v1"
    assert provider.calls == model_calls
    assert calls.calls == []  # both drafts were recorded
    assert result.replayed_steps == 4 - model_calls
    assert types(log).count("harness.session.started") == 2
    assert types(log).count("harness.session.completed") == 2


async def test_a_decider_whose_slot_drifted_is_refused_at_resume(tmp_path: Path) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        await rt.run(loop(), run_id="ref")
        full = await rt.events.read("ref")
    # Inside judge.visit[1]'s session: started, its model call in flight.
    cut = [record.seq for record in full if record.type == "harness.model.called"][1]

    rt, provider, _, calls = make(tmp_path / "data", judge="judge-model-2")
    async with rt:
        await cut_log(rt, "ref", "run_cut", cut)
        with pytest.raises(CapabilityDriftError) as caught:
            await rt.resume("run_cut")
        assert len(await rt.events.read("run_cut")) == cut
    assert caught.value.message == "\n".join(
        [
            "Run 'run_cut' was started with a different decider config.",
            "",
            "Changes detected:",
            '- deciderModelSlotId: "judge-model" → "judge-model-2"',
            "",
            "To resume cleanly, restore the prior state.",
            "To start fresh, run with a new runId.",
            "To keep the work done before the first changed step, fork at 'judge.visit[1]':",
            "  little-workflow fork run_cut --at 'judge.visit[1]'",
        ]
    )
    assert caught.value.fork_at == "judge.visit[1]"
    assert caught.value.changes == [("deciderModelSlotId", JUDGE_MODEL, "judge-model-2")]
    assert (provider.calls, calls.calls) == (0, [])

    rt, provider, _, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.resume("run_cut")
    assert result.output == "draft v1"
    assert provider.calls == 1  # the call in flight, made again
    assert calls.calls == []
