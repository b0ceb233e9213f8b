"""``ctx.agent`` in a code-first workflow keeps Layer C: each model and tool call is
committed, and a resume replays them instead of calling again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from little_workflow import StepFailedError, WorkflowContext, workflow
from little_workflow.events import HarnessModelCalled, StepCompleted
from little_workflow.harness.models import ModelRequest, scripted
from tests.runtime.session_support import make
from tests.runtime.support import Crash


@workflow
async def judged(ctx: WorkflowContext, who: str) -> str:
    answer = await ctx.agent(
        "worker", prompt=f"Score {who}", tools=["lookup", "score"], instructions="Score."
    )
    assert isinstance(answer, str)
    return answer


async def test_an_agent_answers_and_its_calls_are_in_the_log(tmp_path: Path) -> None:
    rt, _provider, tools = make(tmp_path)
    async with rt:
        result = await rt.run(judged, {"who": "Ada"}, run_id="run_agent")
        records = await rt.events.read("run_agent")
    assert result.output == "Ada scores 70"
    assert [name for name, _ in tools.calls] == ["lookup", "score"]
    assert sum(isinstance(r.event, HarnessModelCalled) for r in records) == 3
    completed = [r.event for r in records if isinstance(r.event, StepCompleted)]
    assert [(e.step_path, e.kind) for e in completed] == [("worker", "agent")]


async def test_a_resumed_agent_replays_its_committed_calls(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path)
    tools.crash_at = "score"
    async with rt:
        with pytest.raises(Crash):
            await rt.run(judged, {"who": "Ada"}, run_id="run_agent")
    model_calls = provider.calls
    assert model_calls == 2
    rt, provider, tools = make(tmp_path)  # as after a restart: fresh counters
    async with rt:
        result = await rt.resume("run_agent")
    assert result.output == "Ada scores 70"
    # lookup's result and the two model answers were committed: only score and the
    # last model turn run now.
    assert [name for name, _ in tools.calls] == ["score"]
    assert provider.calls == 1
    assert result.replayed_calls == 3


def _decider(request: ModelRequest) -> str:
    prompt = next(m.content or "" for m in request.messages if m.role == "user")
    system = next((m.content or "" for m in request.messages if m.role == "system"), "")
    # The routes are listed for the model, as for an LWIR decision's agent.
    assert "- ship\n- hold" in system
    if prompt == "nonsense":
        return "maybe"
    return json.dumps({"route": "ship" if "green" in prompt else "hold", "output": prompt})


@workflow
async def gated(ctx: WorkflowContext, signal: str) -> dict[str, object]:
    try:
        decision = await ctx.decide(
            "worker", prompt=signal, routes=["ship", "hold"], instructions="Gate.", max_visits=2
        )
    except StepFailedError as error:
        return {"failed": error.path, "cause": error.cause_code}
    return {"route": decision.route, "output": decision.output}


async def test_decide_commits_a_decision_and_replays_it(tmp_path: Path) -> None:
    provider = scripted(_decider)
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        result = await rt.run(gated, {"signal": "all green"}, run_id="run_gate")
        records = await rt.events.read("run_gate")
        calls = provider.calls
        again = await rt.resume("run_gate")
        bad = await rt.run(gated, {"signal": "nonsense"}, run_id="run_bad")
    assert result.output == {"route": "ship", "output": "all green"}
    completed = [r.event for r in records if isinstance(r.event, StepCompleted)]
    assert [(e.step_path, e.kind, e.route, e.output) for e in completed] == [
        ("worker.visit[0]", "decision", "ship", "all green")
    ]
    assert again.output == result.output
    assert provider.calls == calls + 1  # only the second run asked the model
    assert bad.output == {"failed": "worker.visit[0]", "cause": "unknown_route"}
