"""Layer C through the runtime: a session's events, the four resume rules, sub-runs.

The resume rules are shown on logs that stop at a chosen point: the events of an
uncrashed run, cut after the N-th (and, where a rule needs it, edited), are written as
the log of another run id in the same store, which is then resumed. Every cut is a
state a crash can leave: write-behind events reach the log on their own when the flush
timer fires. Calls are counted by the scripted provider and by the tools.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import MemoMismatchError, RunFailedError
from little_workflow.events import Event, RunStatus
from little_workflow.harness._execution import ToolContext
from little_workflow.harness._graph import call_model, run_tool_calls, step_identity
from little_workflow.harness._manifest import manifest_hash
from little_workflow.harness._tools import tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import RetryPolicy
from little_workflow.runtime import CRASH_EXIT_CODE, Runtime
from tests.runtime.agent_flows import (
    ORCHESTRATE,
    WORKER_MODEL,
    orchestrator_workflow,
    slots,
    worker_workflow,
)
from tests.runtime.session_support import (
    ADA,
    LOOKUP,
    SCORE,
    TURN0,
    TURN1,
    TURN2,
    Outage,
    calls_to,
    cut_log,
    make,
    same_id_twice,
    seq_of,
)
from tests.runtime.support import Crash, FakeSleep, cli, ev, of_type, types

# --- the events of a session ----------------------------------------------------------


async def test_the_events_of_a_worker_session_in_order(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        result = await rt.run(worker_workflow(), ADA, run_id="run_w")
        log = await rt.events.read("run_w")

    assert result.output == "Ada scores 70"
    assert provider.calls == 3
    assert tools.calls == [("lookup", "Ada"), ("score", 7)]
    assert [(record.type, getattr(record.event, "call_id", None)) for record in log] == [
        ("RunStarted", None),
        ("StepAttemptStarted", None),
        ("harness.session.started", None),
        ("harness.model.called", TURN0),
        ("harness.model.responded", TURN0),
        ("harness.tool_call.started", LOOKUP),
        ("harness.tool_call.succeeded", LOOKUP),
        ("harness.model.called", TURN1),
        ("harness.model.responded", TURN1),
        ("harness.tool_call.started", SCORE),
        ("harness.tool_call.succeeded", SCORE),
        ("harness.model.called", TURN2),
        ("harness.model.responded", TURN2),
        ("harness.session.completed", None),
        ("StepCompleted", None),
        ("RunCompleted", None),
    ]

    started = ev(log[2])
    manifest: dict[str, JsonValue] = {
        "role": "worker",
        "workerModelSlotId": WORKER_MODEL,
        "tools": [
            {"name": "lookup", "schemaHash": tools.lookup.schema_hash},
            {"name": "score", "schemaHash": tools.score.schema_hash},
        ],
    }
    assert (started.session_id, started.role, started.step_path) == ("worker", "worker", "worker")
    assert started.manifest == manifest
    assert started.manifest_hash == manifest_hash(manifest)

    called = ev(log[3])
    assert called.session_id == "worker"
    assert called.slot == "worker"
    assert called.identity == step_identity(call_model("worker", tools=["lookup", "score"]))
    request = ModelRequest.model_validate(called.request)
    assert request == provider.requests[0]
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "You score candidates."),
        ("user", "Score Ada"),
    ]
    assert [spec.name for spec in request.tools] == ["lookup", "score"]
    responded = ev(log[4])
    assert responded.response["message"]["toolCalls"] == [
        {"id": "call_lookup", "name": "lookup", "arguments": {"name": "Ada"}}
    ]

    tool_started, tool_succeeded = ev(log[5]), ev(log[6])
    assert (tool_started.tool_name, tool_started.arguments) == ("lookup", {"name": "Ada"})
    assert tool_started.identity == step_identity(run_tool_calls())
    assert tool_succeeded.result == {"name": "Ada", "years": 7}
    assert ev(log[10]).result == 70
    assert ev(log[12]).response["message"]["content"] == "Ada scores 70"
    assert ev(log[13]).output == "Ada scores 70"
    completed = ev(log[14])
    assert (completed.step_path, completed.kind, completed.output) == (
        "worker",
        "agent",
        "Ada scores 70",
    )


async def test_a_completed_session_is_not_run_again(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_w")
        count = len(await rt.events.read("run_w"))
        again = await rt.resume("run_w")
        assert len(await rt.events.read("run_w")) == count
    assert again.output == "Ada scores 70"
    assert provider.calls == 3
    assert len(tools.calls) == 2


async def test_the_session_scratch_directory_is_owner_only(tmp_path: Path) -> None:
    seen: list[str | None] = []

    @tool
    def lookup(name: str, ctx: ToolContext) -> dict[str, Any]:
        """Look a candidate up by name.

        Args:
            name: The candidate's name.
        """
        seen.append(ctx.context.cwd)
        return {"name": name, "years": 7}

    @tool
    def score(years: int) -> int:
        """Score.

        Args:
            years: Years.
        """
        return years * 10

    data_dir = tmp_path / "data"
    async with Runtime(data_dir, model_slots=slots(), tools=[lookup, score]) as rt:
        await rt.run(worker_workflow(), ADA, run_id="run_w")

    run_dir = data_dir / "runs" / "run_w"
    harness_dir = run_dir / "harness"
    (session_dir,) = harness_dir.iterdir()
    assert session_dir.name.startswith("worker-")
    assert seen == [str(session_dir)]
    for folder in (run_dir, harness_dir, session_dir):
        assert folder.is_dir()
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder


# --- the four resume rules ------------------------------------------------------------


async def test_a_model_call_with_its_response_is_replayed(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    cut = seq_of(full, "harness.model.responded", TURN0)

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == "Ada scores 70"
    assert provider.calls == 2  # turns 1 and 2; turn 0 was replayed
    assert [len(request.messages) for request in provider.requests] == [4, 6]
    assert tools.calls == [("lookup", "Ada"), ("score", 7)]
    # The result says so: one call answered from the log, four made (two models, two tools).
    assert (result.replayed_calls, result.made_calls) == (1, 4)
    assert calls_to(log, "harness.model.called", TURN0) == 1
    assert calls_to(log, "harness.model.responded", TURN0) == 1
    assert types(log).count("harness.session.started") == 1


async def test_a_tool_call_with_its_result_is_replayed(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    cut = seq_of(full, "harness.tool_call.succeeded", LOOKUP)

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == "Ada scores 70"
    assert tools.calls == [("score", 7)]  # lookup's recorded result was used
    assert provider.calls == 2
    assert (result.replayed_calls, result.made_calls) == (2, 3)
    # The replayed result is what the model reads in the next turn.
    assert provider.requests[0].messages[-1].content == '{"name": "Ada", "years": 7}'
    assert calls_to(log, "harness.tool_call.succeeded", LOOKUP) == 1


async def test_a_recorded_tool_failure_is_replayed_as_the_same_error(tmp_path: Path) -> None:
    workflow = worker_workflow(prompt="Check ${input.who}", tools=("check",))
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        reference = await rt.run(workflow, ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    assert tools.calls == [("check", "Ada")]
    (failed,) = of_type(full, "harness.tool_call.failed")
    assert (failed.error_code, failed.message) == (
        "LookupError",
        "LookupError: no references for Ada",
    )
    assert reference.output == "Check: LookupError: no references for Ada"
    first_error = provider.requests[1].messages[-1]
    cut = seq_of(full, "harness.tool_call.failed")

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == reference.output
    assert tools.calls == []
    assert provider.calls == 1  # turn 1 only
    replayed_error = provider.requests[0].messages[-1]
    assert replayed_error == first_error
    assert replayed_error.is_error
    assert replayed_error.tool_call_id == "call_check"
    assert types(log).count("harness.tool_call.started") == 1
    assert types(log).count("harness.tool_call.failed") == 1


async def test_an_in_flight_tool_call_is_made_again_with_its_recorded_arguments(
    tmp_path: Path,
) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    cut = seq_of(full, "harness.tool_call.started", LOOKUP)

    def recorded_for_bo(event: Event) -> Event:
        # What the log says was started wins over what the model's answer says: a
        # start_workflow call, say, records the sub-run id it is about to create.
        if getattr(event, "call_id", None) == LOOKUP:
            return event.model_copy(update={"arguments": {"name": "Bo"}})
        return event

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut, recorded_for_bo)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert tools.calls == [("lookup", "Bo"), ("score", 6)]
    assert result.output == "Ada scores 60"
    assert provider.calls == 2
    assert calls_to(log, "harness.tool_call.started", LOOKUP) == 1  # not recorded twice
    assert calls_to(log, "harness.tool_call.succeeded", LOOKUP) == 1


async def test_an_in_flight_model_call_is_made_again(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    cut = seq_of(full, "harness.model.called", TURN1)

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut)
        result = await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert result.output == "Ada scores 70"
    assert provider.calls == 2  # turn 1 again (it was in flight), then turn 2
    assert len(provider.requests[0].messages) == 4
    assert tools.calls == [("score", 7)]
    # turn 0 and lookup replayed; turn 1 (again), score and turn 2 made
    assert (result.replayed_calls, result.made_calls) == (2, 3)
    assert calls_to(log, "harness.model.called", TURN1) == 1
    assert calls_to(log, "harness.model.responded", TURN1) == 1


@pytest.mark.parametrize(
    ("type_name", "call_id"),
    [("harness.model.called", TURN0), ("harness.tool_call.started", LOOKUP)],
)
async def test_a_recorded_call_of_another_step_identity_is_refused(
    tmp_path: Path, type_name: str, call_id: str
) -> None:
    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    cut = seq_of(full, "harness.model.responded", TURN1)
    other = "sha256:" + "0" * 64

    def other_identity(event: Event) -> Event:
        if type_name == event.TYPE and getattr(event, "call_id", None) == call_id:
            return event.model_copy(update={"identity": other})
        return event

    rt, provider, tools = make(tmp_path / "data")
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut, other_identity)
        with pytest.raises(MemoMismatchError) as caught:
            await rt.resume("run_cut")
        log = await rt.events.read("run_cut")

    assert provider.calls == 0
    assert tools.calls == []
    assert call_id in caught.value.message
    assert other in caught.value.message
    assert [record.type for record in log if record.type.startswith("harness.")] == [
        event_type for event_type in types(full[:cut]) if event_type.startswith("harness.")
    ]


async def test_calls_that_share_an_id_are_recorded_and_replayed_apart(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path / "data", provider=scripted(same_id_twice))
    async with rt:
        result = await rt.run(worker_workflow(), ADA, run_id="run_ref")
        full = await rt.events.read("run_ref")
    expected = [{"name": "Ada", "years": 7}, {"name": "Bo", "years": 6}]
    assert json.loads(str(result.output)) == expected
    assert tools.calls == [("lookup", "Ada"), ("lookup", "Bo")]
    assert [e.call_id for e in of_type(full, "harness.tool_call.succeeded")] == [
        "agent.turns[0].tools[c1]",
        'agent.turns[0].tools["c1#1"]',
    ]
    cut = seq_of(full, "harness.tool_call.succeeded", 'agent.turns[0].tools["c1#1"]')

    rt, provider, tools = make(tmp_path / "data", provider=scripted(same_id_twice))
    async with rt:
        await cut_log(rt, "run_ref", "run_cut", cut)
        resumed = await rt.resume("run_cut")
    assert resumed.output == result.output
    assert tools.calls == []
    assert provider.calls == 1


# --- answers as JSON ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["JSON", "Raw"])
async def test_a_json_answer_is_parsed(tmp_path: Path, kind: str) -> None:
    workflow = worker_workflow(prompt=f"{kind} ${{input.who}}", output="json")
    rt, _, _ = make(tmp_path / "data")
    async with rt:
        result = await rt.run(workflow, ADA, run_id="run_j")
        log = await rt.events.read("run_j")
    assert result.output == {"who": "Ada", "score": 70}
    assert of_type(log, "StepCompleted")[0].output == {"who": "Ada", "score": 70}


async def test_an_answer_that_is_not_json_fails_the_step_as_invalid_output(
    tmp_path: Path,
) -> None:
    workflow = worker_workflow(
        prompt="Garbled ${input.who}", output="json", retry=RetryPolicy(attempts=3)
    )
    rt, provider, _ = make(tmp_path / "data")
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, ADA, run_id="run_j")
        state = await rt.get_state("run_j")
        log = await rt.events.read("run_j")
    assert caught.value.cause_code == "invalid_output"
    assert state.status is RunStatus.FAILED
    assert state.failure_cause == "invalid_output"
    assert "Ada scores 70, more or less" in (state.failure_message or "")
    (step_failed,) = of_type(log, "StepFailed")
    assert step_failed.cause_code == "invalid_output"
    assert provider.calls == 3  # a wrong answer is not retried
    assert types(log).count("StepAttemptStarted") == 1


# --- a provider that keeps failing ----------------------------------------------------


async def test_a_provider_that_stays_down_fails_the_step_per_its_retry_policy(
    tmp_path: Path,
) -> None:
    sleep = FakeSleep()
    workflow = worker_workflow(retry=RetryPolicy(attempts=3, backoff=1.0, multiplier=2.0))
    provider = scripted(Outage(failures=100, turn=0))
    rt, _, tools = make(tmp_path / "data", provider=provider, sleep=sleep)
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, ADA, run_id="run_down")
        log = await rt.events.read("run_down")

    assert caught.value.cause_code == "step_failed"
    assert "service unavailable" in caught.value.message
    assert provider.calls == 3
    assert sleep.delays == [1.0, 2.0]
    assert [(e.attempt, e.error_code, e.will_retry) for e in of_type(log, "StepAttemptFailed")] == [
        (1, "model_provider_error", True),
        (2, "model_provider_error", True),
        (3, "model_provider_error", False),
    ]
    assert tools.calls == []
    assert types(log)[-2:] == ["StepFailed", "RunFailed"]
    assert "harness.model.responded" not in types(log)


async def test_a_retried_attempt_replays_the_calls_already_recorded(tmp_path: Path) -> None:
    workflow = worker_workflow(retry=RetryPolicy(attempts=3, backoff=0.5))
    provider = scripted(Outage(failures=2, turn=1))
    rt, _, tools = make(tmp_path / "data", provider=provider)
    async with rt:
        result = await rt.run(workflow, ADA, run_id="run_flaky")
        log = await rt.events.read("run_flaky")

    assert result.output == "Ada scores 70"
    # turn 0 once, turn 1 three times (two failures), turn 2 once.
    assert provider.calls == 5
    assert [sum(m.role == "assistant" for m in r.messages) for r in provider.requests] == [
        0,
        1,
        1,
        1,
        2,
    ]
    assert tools.calls == [("lookup", "Ada"), ("score", 7)]
    assert types(log).count("StepAttemptStarted") == 3
    assert types(log).count("harness.session.started") == 1
    assert calls_to(log, "harness.model.called", TURN0) == 1
    assert calls_to(log, "harness.model.called", TURN1) == 1  # in flight, then answered
    assert calls_to(log, "harness.model.responded", TURN1) == 1


async def test_retrying_a_failed_run_replays_its_recorded_calls(tmp_path: Path) -> None:
    outage = Outage(failures=1, turn=1)
    provider = scripted(outage)
    rt, _, tools = make(tmp_path / "data", provider=provider)
    async with rt:
        with pytest.raises(RunFailedError):
            await rt.run(worker_workflow(), ADA, run_id="run_r")
        assert provider.calls == 2
        assert tools.calls == [("lookup", "Ada")]
        result = await rt.retry("run_r")

    assert result.status is RunStatus.COMPLETED
    assert result.output == "Ada scores 70"
    assert provider.calls == 4  # turns 1 and 2; turn 0 was replayed
    assert tools.calls == [("lookup", "Ada"), ("score", 7)]


# --- the orchestrator and its sub-runs ------------------------------------------------


async def test_start_workflow_records_the_sub_run_id_before_the_sub_run_exists(
    tmp_path: Path,
) -> None:
    # The reference run, uncrashed: where the start of start_workflow is committed.
    rt, _, _ = make(tmp_path / "reference")
    async with rt:
        reference = await rt.run(ORCHESTRATE, ADA, run_id="run_orch")
        full = await rt.events.read("run_orch")
    start = "agent.turns[0].tools[call_start]"
    cut = seq_of(full, "harness.tool_call.started", start)

    data_dir = tmp_path / "data"
    model_calls, tool_calls = tmp_path / "model-calls", tmp_path / "tool-calls"
    env = {"LW_TEST_MODEL_CALLS": str(model_calls), "LW_TEST_TOOL_CALLS": str(tool_calls)}
    args = ("--setup", "tests.runtime.agent_flows:setup", "run", str(ORCHESTRATE))
    crashed = cli(
        data_dir, *args, "--input", json.dumps(ADA), "--run-id", "run_orch", env=env, crash=cut
    )
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    assert model_calls.read_text().splitlines() == ["orchestrator-model 0"]
    assert not tool_calls.exists()

    rt, provider, tools = make(data_dir)
    async with rt:
        log = await rt.events.read("run_orch")
        assert log[-1].type == "harness.tool_call.started"
        started = ev(log[-1])
        assert started.tool_name == "start_workflow"
        sub_run_id = started.arguments["subRunId"]
        assert started.arguments == {
            "workflow": "score-one",
            "input": {"who": "Ada"},
            "subRunId": sub_run_id,
        }
        # Durable before the sub-run began: no RunStarted of it anywhere.
        assert await rt.events.read(sub_run_id) == []
        assert await rt.events.list_runs(parent_run_id="run_orch") == []

        result = await rt.resume("run_orch")
        children = await rt.events.list_runs(parent_run_id="run_orch")
        sub_log = await rt.events.read(sub_run_id)

    assert result.output == reference.output == 'Shortlist ready: {"verdict": "Ada scores 70"}'
    assert [child.run_id for child in children] == [sub_run_id]
    assert ev(sub_log[0]).parent_run_id == "run_orch"
    assert provider.calls == 4  # the orchestrator's turn 0 was replayed
    assert tools.calls == [("lookup", "Ada"), ("score", 7)]


async def test_a_parent_resumes_its_unfinished_sub_run_not_a_new_one(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    rt, provider, tools = make(data_dir, workflows=(worker_workflow(),))
    tools.crash_at = "score"  # inside the sub-run's worker session
    async with rt:
        with pytest.raises(Crash):
            await rt.run(orchestrator_workflow(), ADA, run_id="run_orch")
        (child,) = await rt.events.list_runs(parent_run_id="run_orch")
        parent_log = await rt.events.read("run_orch")
    assert provider.calls == 3  # orchestrator turn 0, worker turns 0 and 1
    started = of_type(parent_log, "harness.tool_call.started")[-1]
    assert started.arguments["subRunId"] == child.run_id
    assert child.status is RunStatus.RUNNING

    rt, provider, tools = make(data_dir, workflows=(worker_workflow(),))
    async with rt:
        result = await rt.resume("run_orch")
        children = await rt.events.list_runs(parent_run_id="run_orch")
        sub_log = await rt.events.read(child.run_id)

    assert result.output == "Shortlist ready: Ada scores 70"
    assert [(c.run_id, c.status) for c in children] == [(child.run_id, RunStatus.COMPLETED)]
    assert types(sub_log).count("RunStarted") == 1
    assert types(sub_log).count("RunResumed") == 1
    assert tools.calls == [("score", 7)]
    assert provider.calls == 2  # the worker's turn 2, the orchestrator's turn 1
