"""A run page's step tree a page at a time: the first page in the run's view, the next
ones through ``/api/runs/{id}/steps?after=``, on a real store with a real wide run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import RunFailedError
from little_workflow.lwir import ExecuteStep, MapStep, OutputStep, Workflow
from little_workflow.views import STEPS_PAGE, RunReader, step_tree
from tests.runtime.support import runtime
from tests.ui.support import client

#: Branches of the map: with a node per branch and one per step, two pages and some.
BRANCHES = 600
FAILS = 599  # the branch that fails: the last, on the last page


def _wide() -> Workflow:
    body = (
        ExecuteStep(
            id="s", fn="tests.cli.flows.funcs:fail_at", with_={"index": "${item}", "fail": FAILS}
        ),
    )
    return Workflow(
        name="wide",
        steps=(
            MapStep(id="m", items=list(range(BRANCHES)), body=body, concurrency=16),
            OutputStep(id="out", value="done"),
        ),
    )


async def _populate(data: Path) -> list[dict[str, Any]]:
    async with runtime(data) as rt:
        with pytest.raises(RunFailedError):
            await rt.run(_wide(), {}, run_id="run_wide")
        view = await RunReader(rt.events).view("run_wide")
        assert view is not None
        return [
            {"path": node.path, "step": node.step is not None} for node in step_tree(view.steps)
        ]


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("pages") / "data"
    return root, asyncio.run(_populate(root))


async def test_the_view_holds_the_first_page_and_the_pages_after_it_hold_the_rest(
    wide: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, whole = wide
    assert len(whole) > 2 * STEPS_PAGE
    async with client(root) as http:
        view = (await http.get("/api/runs/run_wide")).json()
        assert "steps" not in view
        assert len(view["tree"]) == STEPS_PAGE
        assert view["treeNext"] == view["tree"][-1]["path"]
        nodes = list(view["tree"])
        after, pages = view["treeNext"], 0
        while after is not None:
            page = (await http.get("/api/runs/run_wide/steps", params={"after": after})).json()
            assert 0 < len(page["tree"]) <= STEPS_PAGE
            nodes += page["tree"]
            after, pages = page["next"], pages + 1
        small = (await http.get("/api/runs/run_wide/steps", params={"limit": 3})).json()
    assert pages == 2
    assert [{"path": n["path"], "step": n["step"] is not None} for n in nodes] == whole
    assert [n["path"] for n in small["tree"]] == [n["path"] for n in nodes[:3]]
    assert small["next"] == nodes[2]["path"]
    counts = view["stepCounts"]
    assert counts["failed"] >= 1
    assert sum(counts.values()) == sum(1 for n in nodes if n["step"] is not None)


async def test_a_branch_node_carries_the_worst_status_below_it(
    wide: tuple[Path, list[dict[str, Any]]],
) -> None:
    root, _ = wide
    async with client(root) as http:
        nodes = (await http.get("/api/runs/run_wide/steps", params={"limit": 5000})).json()["tree"]
    by_path = {node["path"]: node for node in nodes}
    failed = by_path[f"m[{FAILS}]"]
    assert failed["step"] is None  # a branch: no step of its own
    assert failed["status"] == "failed"
    assert by_path[f"m[{FAILS}].s"]["step"]["status"] == "failed"
    assert by_path["m[0]"]["status"] == "completed"
    # A node with a step of its own carries that step's status.
    assert by_path["m"]["status"] == by_path["m"]["step"]["status"]


@pytest.mark.parametrize(
    ("query", "status", "code"),
    [
        ({"after": "m[9999].s"}, 400, "unknown_step_path"),
        ({"after": "x" * 20_000}, 400, "unknown_step_path"),
        ({"after": "../../etc/passwd"}, 400, "unknown_step_path"),
        ({"limit": "0"}, 400, "bad_request"),
        ({"limit": "5001"}, 400, "bad_request"),
        ({"limit": "-1"}, 400, "bad_request"),
    ],
)
async def test_a_cursor_or_limit_that_is_not_one_is_a_typed_error(
    wide: tuple[Path, list[dict[str, Any]]], query: dict[str, str], status: int, code: str
) -> None:
    root, _ = wide
    async with client(root) as http:
        answer = await http.get("/api/runs/run_wide/steps", params=query)
        missing = await http.get("/api/runs/run_nope/steps")
    assert (answer.status_code, answer.json()["error"]) == (status, code)
    assert missing.status_code == 404
