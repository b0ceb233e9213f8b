"""A resume refused for capability drift starts nothing first, however many branches run.

Six reviewers run at once in a map (``ctx.branches`` in code, a ``map`` in LWIR); the
process's work stops at the first ``score`` tool call (``Crash``, as a kill), when some
sessions are under way and others have not started. The worker's model changes; the
resume must raise ``CapabilityDriftError`` before any branch runs: no event in the log,
no model or tool call. Checking each session only when its branch reaches it let another
branch start a new session under the changed model first (seen on the code form of the
review pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow import WorkflowContext, workflow
from little_workflow.errors import CapabilityDriftError
from little_workflow.events import RunStatus
from little_workflow.harness.models import ScriptedProvider, scripted
from little_workflow.lwir import Workflow, parse_workflow
from little_workflow.runtime import Runtime
from tests.runtime.agent_flows import WORKER_MODEL, Tools, script, slots
from tests.runtime.support import Crash, runtime

NAMES = ["Ada", "Bo", "Cy", "Di", "Ed", "Flo"]
RUN = "run_panel"


async def review(branch: WorkflowContext, who: str) -> Any:
    return await branch.agent("worker", prompt=f"Score {who}", tools=["lookup", "score"])


@workflow
async def panel(ctx: WorkflowContext, names: list[str]) -> list[Any]:
    return await ctx.branches(review, names, key=lambda name: name, concurrency=3)


@workflow
async def scored(ctx: WorkflowContext, who: str) -> Any:
    return await review(ctx, who)


async def review_in_a_sub_run(branch: WorkflowContext, who: str) -> Any:
    return await branch.workflow(scored, {"who": who})


@workflow
async def panel_of_sub_runs(ctx: WorkflowContext, names: list[str]) -> list[Any]:
    return await ctx.branches(review_in_a_sub_run, names, key=lambda name: name, concurrency=3)


def lwir_panel() -> Workflow:
    return parse_workflow(
        {
            "lwir": 1,
            "name": "panel",
            "steps": [
                {
                    "id": "review",
                    "kind": "map",
                    "items": "${input.names}",
                    "concurrency": 3,
                    "body": [
                        {
                            "id": "judge",
                            "kind": "agent",
                            "slot": "worker",
                            "prompt": "Score ${item}",
                            "tools": ["lookup", "score"],
                        }
                    ],
                },
                {"id": "out", "kind": "output", "value": "${steps.review.output}"},
            ],
        }
    )


def make(data_dir: Path, model: str) -> tuple[Runtime, ScriptedProvider, Tools]:
    provider, tools = scripted(script), Tools()
    rt = runtime(data_dir, model_slots=slots(provider, worker=model), tools=tools.all())
    return rt, provider, tools


async def runs_of(rt: Runtime) -> dict[str, int]:
    """Every run in the store and how many events its log holds."""
    found: dict[str, int] = {}
    for info in await rt.events.list_runs(limit=1000):
        found[info.run_id] = len(await rt.events.read(info.run_id))
    return found


@pytest.mark.parametrize("form", ["code", "code-sub-runs", "lwir"])
async def test_drift_is_refused_before_any_branch_starts_a_session(
    tmp_path: Path, form: str
) -> None:
    flows: dict[str, Any] = {"code": panel, "code-sub-runs": panel_of_sub_runs}
    flow = flows[form] if form in flows else lwir_panel()
    rt, provider, tools = make(tmp_path, WORKER_MODEL)
    tools.crash_at = "score"
    async with rt:
        with pytest.raises(Crash):
            await rt.run(flow, {"names": NAMES}, run_id=RUN)
        before = await runs_of(rt)
        states = [await rt.get_state(run_id) for run_id in before]
    assert all(state.status is RunStatus.RUNNING for state in states)
    sessions = [session for state in states for session in state.sessions.values()]
    assert [session for session in sessions if not session.completed]
    # Some reviewers had not started: a resume must not start them under the new model.
    assert len(sessions) < len(NAMES)

    rt, provider, tools = make(tmp_path, "gpt-4o-mini")
    async with rt:
        with pytest.raises(CapabilityDriftError) as caught:
            await rt.resume(RUN)
        after = await runs_of(rt)
    assert caught.value.code == "capability_drift"
    assert '- workerModelSlotId: "worker-model" → "gpt-4o-mini"' in caught.value.message
    assert after == before  # no new run, no new event
    assert provider.calls == 0
    assert tools.calls == []

    # Restored, it resumes and every reviewer answers.
    rt, provider, tools = make(tmp_path, WORKER_MODEL)
    async with rt:
        result = await rt.resume(RUN)
    assert result.status is RunStatus.COMPLETED
    assert len(result.output) == len(NAMES)  # type: ignore[arg-type]
