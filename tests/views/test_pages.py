"""``TreePages``: a run's step tree a page at a time, kept by the reader per last seq."""

from __future__ import annotations

import pytest

from little_workflow.errors import InvalidInputError
from little_workflow.events import RunStarted, StepAttemptStarted, StepCompleted, StepFailed
from little_workflow.storage._memory import MemoryEventLog
from little_workflow.views import RunReader

STARTED = RunStarted(
    workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
)


def _began(path: str) -> StepAttemptStarted:
    return StepAttemptStarted(step_path=path, step_id=path.rsplit(".", 1)[-1], kind="execute")


def _done(path: str) -> StepCompleted:
    return StepCompleted(step_path=path, step_id=path.rsplit(".", 1)[-1], kind="execute")


async def test_pages_follow_each_other_and_branches_carry_the_worst_status_below() -> None:
    log = MemoryEventLog()
    events = [STARTED, _done("m[a].s"), _began("m[b].s"), _began("m[c].s"), _done("m[c].t")]
    events.append(StepFailed(step_path="m[c].s", step_id="s", cause_code="x", message="y"))
    await log.append("run_p", events)
    tree = await RunReader(log).tree("run_p")
    assert tree is not None
    nodes, following = tree.page(None, 4)
    assert [node["path"] for node in nodes] == ["m", "m[a]", "m[a].s", "m[b]"]
    assert following == "m[b]"
    rest, last = tree.page(following, 100)
    assert [node["path"] for node in rest] == ["m[b].s", "m[c]", "m[c].s", "m[c].t"]
    assert last is None
    status = {node["path"]: node["status"] for node in nodes + rest}
    assert status == {
        "m": "failed",
        "m[a]": "completed",
        "m[a].s": "completed",
        "m[b]": "running",
        "m[b].s": "running",
        "m[c]": "failed",
        "m[c].s": "failed",
        "m[c].t": "completed",
    }
    assert tree.counts == {"completed": 2, "running": 1, "failed": 1}
    with pytest.raises(InvalidInputError, match="no step path 'm\\[z\\]'") as caught:
        tree.page("m[z]", 1)
    assert caught.value.code == "unknown_step_path"


async def test_the_reader_keeps_a_runs_tree_until_the_run_has_new_events() -> None:
    log = MemoryEventLog()
    await log.append("run_k", [STARTED, _done("a")])
    reader = RunReader(log)
    first = await reader.tree("run_k")
    assert first is not None
    assert await reader.tree("run_k") is first  # nothing new: the same rows and tree
    await log.append("run_k", [_done("b")])
    again = await reader.tree("run_k")
    assert again is not first
    assert again is not None
    assert [node.path for node in again.nodes] == ["a", "b"]
    assert await reader.tree("run_nope") is None
