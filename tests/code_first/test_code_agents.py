"""``ctx.agent`` in a code-first workflow keeps Layer C: each model and tool call is
committed, and a resume replays them instead of calling again."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_workflow import WorkflowContext, workflow
from little_workflow.events import HarnessModelCalled, StepCompleted
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
