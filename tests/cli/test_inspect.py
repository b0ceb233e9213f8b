"""``runs`` and ``events`` on a real data directory, through the real command line."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

from little_workflow.lwir import OutputStep, Workflow
from little_workflow.runtime import Runtime
from tests.runtime.support import cli

FLOWS = Path(__file__).resolve().parents[1] / "runtime" / "flows"


def _run(data: Path, run_id: str) -> None:
    done = cli(
        data,
        "run",
        str(FLOWS / "review.yaml"),
        "--input",
        json.dumps({"query": "staff engineers"}),
        "--run-id",
        run_id,
    )
    assert done.returncode == 0, done.stderr


def test_runs_lists_the_runs_as_a_table_and_as_json(tmp_path: Path) -> None:
    data = tmp_path / "data"
    assert cli(data, "runs").stdout.strip() == "no runs"
    _run(data, "run_first")
    _run(data, "run_second")
    listed = cli(data, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [row["runId"] for row in rows] == ["run_second", "run_first"]
    assert {row["status"] for row in rows} == {"completed"}
    assert all(row["events"] > 0 for row in rows)
    # fetch, the map, its three workers, the sub-run step, two judge visits, one revise
    assert [row["stepsDone"] for row in rows] == [9, 9]
    everything = json.loads(cli(data, "runs", "--json", "--sub-runs").stdout)
    assert len(everything) > len(rows)  # the review flow's sub-runs
    assert {row["parentRunId"] for row in everything} >= {"run_first", "run_second"}
    table = cli(data, "runs", env={"COLUMNS": "200"})
    assert "run_first" in table.stdout
    assert "completed" in table.stdout
    header, first = table.stdout.splitlines()[:2]
    assert "steps done" in header
    assert first.split()[:4] == ["run_second", "review", "completed", "9"]
    filtered = json.loads(cli(data, "runs", "--json", "--status", "failed").stdout)
    assert filtered == []
    bad = cli(data, "runs", "--status", "sideways")
    assert bad.returncode == 2


def test_events_prints_the_log_and_filters_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "run_ev")
    lines = cli(data, "events", "run_ev", "--json").stdout.splitlines()
    records = [json.loads(line) for line in lines]
    assert [record["seq"] for record in records] == list(range(1, len(records) + 1))
    assert records[0]["type"] == "RunStarted"
    assert records[-1]["type"] == "RunCompleted"
    only = cli(data, "events", "run_ev", "--json", "--type", "StepCompleted").stdout
    completed = [json.loads(line) for line in only.splitlines()]
    assert completed
    assert {record["type"] for record in completed} == {"StepCompleted"}
    assert len(completed) == sum(1 for record in records if record["type"] == "StepCompleted")
    after = cli(data, "events", "run_ev", "--json", "--after", str(len(records) - 1)).stdout
    assert [json.loads(line)["seq"] for line in after.splitlines()] == [len(records)]
    human = cli(data, "events", "run_ev").stdout
    assert "RunCompleted" in human
    followed = cli(data, "events", "run_ev", "--follow", "--json", timeout=30)
    assert len(followed.stdout.splitlines()) == len(records)  # a finished run: no waiting
    missing = cli(data, "events", "run_nope")
    assert missing.returncode == 3
    assert missing.stderr == "error: run_not_found: there is no run 'run_nope' in this store\n"
    # A reader that goes away early is no error of ours.
    piped = subprocess.run(
        f"{shlex.quote(sys.executable)} -m little_workflow --data-dir {shlex.quote(str(data))} "
        "events run_ev --json | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert piped.returncode == 0
    assert json.loads(piped.stdout)["seq"] == 1
    assert "internal error" not in piped.stderr


def test_show_draws_the_step_tree_with_visits_and_branches(tmp_path: Path) -> None:
    data = tmp_path / "data"
    _run(data, "run_tree")
    shown = json.loads(cli(data, "show", "run_tree", "--json").stdout)
    assert (shown["runId"], shown["workflow"], shown["status"]) == (
        "run_tree",
        "review",
        "completed",
    )
    steps = {step["path"]: step for step in shown["steps"]}
    assert shown["stepsDone"] == len(steps) == 9
    assert {"fetch", "review-candidates", "summarize", "judge.visit[0]"} <= set(steps)
    assert all(step["status"] == "completed" for step in steps.values())
    assert steps["judge.visit[0]"]["route"] == "revise"
    assert steps["judge.visit[1]"]["route"] == "accept"
    branches = [path for path in steps if path.startswith("review-candidates[")]
    assert len(branches) == 3
    tree = cli(data, "show", "run_tree").stdout
    for text in ("run_tree", "review-candidates", "worker", "visit[1]", "-> accept"):
        assert text in tree
    missing = cli(data, "show", "run_nope")
    assert missing.returncode == 3
    assert "no run 'run_nope'" in missing.stderr


def test_runs_pages_with_before_the_last_run_shown(tmp_path: Path) -> None:
    data = tmp_path / "data"
    plain = Workflow(name="plain", steps=(OutputStep(id="out", value="${input.n}"),))

    async def make() -> None:
        async with Runtime(data) as runtime:
            for n in range(7):
                await runtime.run(plain, {"n": n}, run_id=f"run_{n}")

    asyncio.run(make())
    seen: list[str] = []
    before: list[str] = []
    while True:
        page = cli(data, "runs", "--json", "--limit", "3", *before)
        assert page.returncode == 0, page.stderr
        ids = [row["runId"] for row in json.loads(page.stdout)]
        if not ids:
            break
        seen += ids
        before = ["--before", ids[-1]]
    # Every run once, newest first, across pages of 3, 3 and 1.
    assert seen == [f"run_{n}" for n in reversed(range(7))]
    missing = cli(data, "runs", "--before", "run_nobody")
    assert missing.returncode != 0
    assert "there is no run 'run_nobody'" in missing.stderr
    hostile = cli(data, "runs", "--before", "../etc")
    assert hostile.returncode != 0
    assert "run id" in hostile.stderr


def test_show_summarizes_a_long_tree_but_draws_what_failed_and_all_with_all(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    wide = Path(__file__).resolve().parent / "flows" / "wide.yaml"
    items = json.dumps({"items": list(range(70)), "fail": 60})
    done = cli(data, "run", str(wide), "--input", items, "--run-id", "run_wide")
    assert done.returncode != 0
    steps = json.loads(cli(data, "show", "run_wide", "--json").stdout)["steps"]
    branches = [step for step in steps if step["path"].startswith("fan[")]
    completed = [step for step in branches if step["status"] == "completed"]
    assert len(completed) > 50  # more than show draws under one node
    assert {step["status"] for step in branches} - {"completed"} == {"failed"}
    shown = cli(data, "show", "run_wide").stdout
    assert "├── [49]" in shown
    assert "[50]\n" not in shown
    assert "[60]\n" in shown  # failed: drawn past the limit
    assert "branch 60 fails" in shown
    hidden = len(completed) - 50
    more = f"… {hidden} more ({hidden} steps), all completed: show --all lists every step"
    assert more in shown
    every = cli(data, "show", "run_wide", "--all").stdout
    assert "more (" not in every
    assert every.count("  execute  ") == len(branches)
    assert shown.count("  execute  ") == 51
