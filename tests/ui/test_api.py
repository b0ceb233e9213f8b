"""The UI's JSON API on a real data directory with real runs, through httpx and ASGI."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from little_workflow.artifacts import ArtifactStore
from tests.runtime.agent_flows import Tools, slots, worker_workflow
from tests.runtime.outer_support import FLOW as CYCLE_FLOW
from tests.runtime.outer_support import supervise
from tests.runtime.support import FLOWS, runtime
from tests.ui.flows import SHORTLIST
from tests.ui.support import client, sse


async def _populate(data: Path) -> dict[str, Any]:
    async with runtime(data, model_slots=slots(), tools=Tools().all()) as rt:
        review = await rt.run(FLOWS / "review.yaml", {"query": "staff"}, run_id="run_review")
        await rt.run(SHORTLIST, {"query": "staff"}, run_id="run_short")
        await rt.run(
            worker_workflow(prompt="Check ${input.who}", tools=("check",)),
            {"who": "Ada"},
            run_id="run_check",
        )
        loop = await rt.run_outer_loop(
            CYCLE_FLOW,
            {"topic": "ui"},
            max_outer_cycles=2,
            supervise=supervise,
            outer_loop_id="loop_ui",
        )
        return {"review_output": review.output, "cycles": [c.run_id for c in loop.cycles]}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("ui") / "data"
    return root, asyncio.run(_populate(root))


async def test_runs_lists_top_level_runs_with_steps_done_and_filters(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, facts = data
    async with client(root) as http:
        runs = (await http.get("/api/runs")).json()["runs"]
        by_id = {run["runId"]: run for run in runs}
        assert {"run_review", "run_short", "run_check", *facts["cycles"]} == set(by_id)
        assert by_id["run_review"]["stepsDone"] == 9
        assert by_id["run_short"]["stepsDone"] == 8  # fetch, map, 3 workers, 2 judges, revise
        assert by_id["run_review"]["status"] == "completed"
        assert runs[0]["createdAt"] >= runs[-1]["createdAt"]

        review = (await http.get("/api/runs", params={"workflow": "review"})).json()["runs"]
        assert [run["runId"] for run in review] == ["run_review"]
        failed = (await http.get("/api/runs", params={"status": "failed"})).json()["runs"]
        assert failed == []
        one = (await http.get("/api/runs", params={"limit": "1"})).json()["runs"]
        assert len(one) == 1

        everything = (await http.get("/api/runs", params={"subRuns": "1"})).json()["runs"]
        subs = [run for run in everything if run["parentRunId"] == "run_review"]
        assert [run["workflow"] for run in subs] == ["summarize"]
        children = (await http.get("/api/runs", params={"parent": "run_review"})).json()["runs"]
        assert [run["runId"] for run in children] == [subs[0]["runId"]]

        assert (await http.get("/api/runs", params={"status": "sideways"})).status_code == 400
        assert (await http.get("/api/runs", params={"limit": "0"})).status_code == 400


async def test_runs_pages_by_next(data: tuple[Path, dict[str, Any]]) -> None:
    root, _ = data
    async with client(root) as http:
        whole = (await http.get("/api/runs", params={"subRuns": "1"})).json()
        assert whole["next"] is None  # fewer than a page
        seen: list[str] = []
        params = {"subRuns": "1", "limit": "2"}
        while True:
            page = (await http.get("/api/runs", params=params)).json()
            seen += [run["runId"] for run in page["runs"]]
            if page["next"] is None:
                break
            params["before"] = page["next"]
        assert seen == [run["runId"] for run in whole["runs"]]
        assert len(seen) > 4
        for bad in ("x", "nan:run_a", "1.5:", "1.5:../up"):
            response = await http.get("/api/runs", params={"before": bad})
            assert response.status_code == 400, bad


async def test_a_run_has_its_summary_step_tree_and_sub_runs(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, facts = data
    async with client(root) as http:
        answer = await http.get("/api/runs/run_review")
        assert answer.status_code == 200
        view = answer.json()
    run = view["run"]
    assert (run["runId"], run["workflow"], run["status"]) == ("run_review", "review", "completed")
    assert run["output"] == facts["review_output"]
    assert run["input"] == {"query": "staff"}
    assert run["failure"] is None
    assert "steps" not in view  # each row is sent once: in its node of the tree
    steps = {node["path"]: node["step"] for node in view["tree"] if node["step"] is not None}
    assert view["treeNext"] is None  # the whole tree fits in the first page
    assert view["stepCounts"] == {"completed": len(steps)}
    assert steps["judge.visit[0]"]["route"] == "revise"
    assert steps["fetch"]["output"]["query"] == "staff"
    tree = [(node["depth"], node["label"], node["step"] is None) for node in view["tree"]]
    assert tree[:6] == [
        (0, "fetch", False),
        (0, "review-candidates", False),
        (1, "[cand_1]", True),  # a branch: a node without a step of its own
        (2, "worker", False),
        (1, "[cand_2]", True),
        (2, "worker", False),
    ]
    assert (0, "judge", True) in tree
    assert (1, "visit[1]", False) in tree
    sub_run_id = steps["summarize"]["subRunId"]
    assert [sub["runId"] for sub in view["subRuns"]] == [sub_run_id]
    assert view["subRuns"][0]["status"] == "completed"
    assert view["outerLoop"] is None
    assert view["artifacts"] == {"items": [], "error": None}


async def test_model_calls_show_messages_and_tool_calls_arguments_and_results(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = data
    async with client(root) as http:
        sessions = (await http.get("/api/runs/run_short")).json()["sessions"]
        failing = (await http.get("/api/runs/run_check")).json()["sessions"]
    ada = next(s for s in sessions if s["stepPath"] == "review-candidates[cand_1].worker")
    assert ada["role"] == "worker"
    assert ada["completed"]
    kinds = [call["kind"] for call in ada["calls"]]
    assert kinds == ["model", "tool", "model", "tool", "model"]
    first = ada["calls"][0]
    assert first["slot"] == "worker"
    messages = first["request"]["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"] == "Score Ada"
    asked = first["value"]["message"]["toolCalls"]
    assert asked == [{"id": "call_lookup", "name": "lookup", "arguments": {"name": "Ada"}}]
    lookup = ada["calls"][1]
    assert (lookup["name"], lookup["arguments"]) == ("lookup", {"name": "Ada"})
    assert (lookup["done"], lookup["ok"]) == (True, True)
    assert lookup["value"] == {"name": "Ada", "years": 7}
    assert ada["calls"][-1]["value"]["message"]["content"] == "Ada scores 70"

    check = next(call for call in failing[0]["calls"] if call["kind"] == "tool")
    assert (check["name"], check["ok"], check["value"]) == ("check", False, None)
    assert check["errorCode"]
    assert "no references for Ada" in check["message"]


async def test_events_page_by_after_and_filter_by_type(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = data
    async with client(root) as http:
        everything = (await http.get("/api/runs/run_review/events")).json()
        events = everything["events"]
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert (events[0]["type"], events[-1]["type"]) == ("RunStarted", "RunCompleted")
        assert events[0]["event"]["workflowName"] == "review"
        assert (everything["lastSeq"], everything["more"]) == (len(events), False)

        paged = await http.get("/api/runs/run_review/events", params={"after": 3, "limit": 5})
        page = paged.json()
        assert [e["seq"] for e in page["events"]] == [4, 5, 6, 7, 8]
        assert (page["lastSeq"], page["more"]) == (8, True)

        completed = (
            await http.get("/api/runs/run_review/events", params={"type": "StepCompleted"})
        ).json()["events"]
        assert {e["type"] for e in completed} == {"StepCompleted"}
        assert len(completed) == sum(1 for e in events if e["type"] == "StepCompleted")

        assert (await http.get("/api/runs/run_nope/events")).status_code == 404
        negative = await http.get("/api/runs/run_review/events", params={"after": "-1"})
        assert negative.status_code == 400


async def test_the_stream_sends_the_backlog_with_the_view_then_ends(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, _ = data
    async with client(root) as http:
        total = len((await http.get("/api/runs/run_review/events")).json()["events"])
        answer = await http.get("/api/runs/run_review/stream")
        assert answer.headers["content-type"].startswith("text/event-stream")
        messages = sse(answer.text)
        resumed = sse(
            (await http.get("/api/runs/run_review/stream", headers={"last-event-id": "20"})).text
        )
    (kind, ident, update), (end, _, final) = messages
    assert (kind, ident, end) == ("update", total, "end")
    assert [e["seq"] for e in update["events"]] == list(range(1, total + 1))
    assert update["run"]["run"]["status"] == "completed"
    assert final == {"lastSeq": total, "status": "completed"}
    # A reconnecting EventSource says where it was: only what follows is sent again.
    assert [e["seq"] for e in resumed[0][2]["events"]] == list(range(21, total + 1))


async def test_outer_loops_list_their_cycles_and_a_cycle_links_its_loop(
    data: tuple[Path, dict[str, Any]],
) -> None:
    root, facts = data
    async with client(root) as http:
        loops = (await http.get("/api/loops")).json()["loops"]
        loop = (await http.get("/api/loops/loop_ui")).json()
        cycle_view = (await http.get(f"/api/runs/{facts['cycles'][1]}")).json()
        missing = await http.get("/api/loops/loop_nope")
    assert loops == [
        {
            "outerLoopId": "loop_ui",
            "maxCycles": 2,
            "cycles": 2,
            "pendingCycleRunId": None,
            "result": "exhausted",
            "updatedAt": loops[0]["updatedAt"],
        }
    ]
    assert [cycle["runId"] for cycle in loop["cycles"]] == facts["cycles"]
    assert loop["cycles"][0]["summary"] == "first: cycle 1 reviewed"
    assert {run["status"] for run in loop["runs"].values()} == {"completed"}
    assert cycle_view["run"]["outerLoopId"] == "loop_ui"
    assert cycle_view["run"]["cycleNumber"] == 2
    assert cycle_view["run"]["outerLoopResult"]["kind"] == "continue"
    assert cycle_view["outerLoop"]["outerLoopId"] == "loop_ui"
    assert missing.status_code == 404
    assert missing.json()["error"] == "outer_loop_not_found"


async def test_unknown_and_invalid_ids(data: tuple[Path, dict[str, Any]]) -> None:
    root, _ = data
    async with client(root) as http:
        missing = await http.get("/api/runs/run_nope")
        invalid = await http.get("/api/runs/..hidden")
        stream = await http.get("/api/runs/run_nope/stream")
    assert missing.status_code == 404
    assert missing.json() == {"error": "not_found", "message": "no run 'run_nope' in this store"}
    assert invalid.status_code == 400
    assert invalid.json()["error"] == "invalid_id"
    assert stream.status_code == 404


async def test_artifacts_are_listed_and_downloaded_only_from_their_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with runtime(data) as rt:
        await rt.run(FLOWS / "review.yaml", {"query": "x"}, run_id="run_a")
        await rt.run(FLOWS / "review.yaml", {"query": "y"}, run_id="run_b")
    store = ArtifactStore(data)
    page = b"<html><script>alert(1)</script></html>"
    made = store.put("report.html", page, run_id="run_a", step_path="fetch")
    store.put("other.txt", b"b's", run_id="run_b", step_path="fetch")
    async with client(data) as http:
        listed = (await http.get("/api/runs/run_a/artifacts")).json()
        detail = (await http.get("/api/runs/run_a")).json()["artifacts"]
        download = await http.get(f"/api/runs/run_a/artifacts/{made.artifact_id}")
        elsewhere = await http.get(f"/api/runs/run_b/artifacts/{made.artifact_id}")
    assert listed == detail == {"items": [made.to_json()], "error": None}
    assert download.status_code == 200
    assert download.content == page
    # Served as a download that a browser will not render on this origin.
    assert download.headers["content-type"] == "application/octet-stream"
    assert download.headers["content-disposition"] == "attachment; filename*=UTF-8''report.html"
    assert download.headers["content-security-policy"] == "sandbox"
    assert download.headers["x-content-type-options"] == "nosniff"
    assert elsewhere.status_code == 404
