"""Each example written twice, as LWIR (``workflow.yaml``) and as code (``workflow.py``):
both forms, run through the command line on the same input and the same scripted models,
give the same output, complete the same step paths and call the same tools and step
functions."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from little_workflow.events import RecordedEvent, StepCompleted
from tests.examples.support import REPO, Example, normalized, sub_run_ids


def _run(root: Path, setup: str, workflow: str, given: dict[str, Any]) -> dict[str, Any]:
    example = Example(root)
    given = {key: str(root / "work") if value is _WORK else value for key, value in given.items()}
    output = example.output(
        "--setup", setup, "run", workflow, "--input", json.dumps(given), "--run-id", "form_1"
    )
    events = example.events("form_1")
    paths = _completed(events)
    # The sub-runs an orchestrator started, in the order it started them: their paths too.
    sub_runs = [_completed(example.events(run_id)) for run_id in sub_run_ids(events)]
    kinds = sorted(
        (record.event.step_path, record.event.kind, record.event.route)
        for record in events
        if isinstance(record.event, StepCompleted)
    )
    calls = normalized(example.calls())
    counted = Counter(line.split(" ", 1)[0] for line in calls.elements())
    return {
        "output": output,
        "paths": paths,
        "kinds": kinds,
        "sub_runs": sub_runs,
        "calls": calls,
        "counted": counted,
    }


def _completed(events: list[RecordedEvent]) -> list[str]:
    """The paths of the steps a run completed, sorted."""
    return sorted(
        record.event.step_path for record in events if isinstance(record.event, StepCompleted)
    )


#: Stands for a workspace folder of the run's own (the two forms must not share one).
_WORK = object()


def test_the_review_pipeline_gives_the_same_output_and_paths_in_both_forms(
    tmp_path: Path,
) -> None:
    setup = "examples.review_pipeline.setup:setup"
    given = {"documents": "examples/review_pipeline/documents", "workspace": _WORK}
    lwir = _run(tmp_path / "lwir", setup, "examples/review_pipeline/workflow.yaml", given)
    code = _run(
        tmp_path / "code", setup, "examples.review_pipeline.workflow:review_pipeline", given
    )
    assert code["output"] == lwir["output"]
    assert code["output"]["editor"] == {"note": "All 3 documents pass review."}
    assert code["paths"] == lwir["paths"]
    # Two rounds: the loop's steps at LWIR's visits, the branches of each round's map.
    assert "collect.visit[1]" in code["paths"]
    assert "review.visit[1][quickstart].reviewer" in code["paths"]
    assert "editor.visit[1]" in code["paths"]
    assert "revise.visit[0]" in code["paths"]
    # The editor is a decision in both forms, with the same routes; the steps' kinds too.
    assert code["kinds"] == lwir["kinds"]
    assert ("editor.visit[1]", "decision", "approve") in code["kinds"]
    assert code["counted"] == lwir["counted"] == {"model": 15, "tool": 6, "step": 4}
    # The prompts are the document's: the models were asked the very same things.
    assert code["calls"] == lwir["calls"]


def test_the_orchestrator_gives_the_same_output_and_paths_in_both_forms(tmp_path: Path) -> None:
    setup = "examples.orchestrator.setup:setup"
    given = {
        "question": "Where should a small team keep its workflow runs?",
        "options": ["SQLite", "PostgreSQL"],
    }
    lwir = _run(tmp_path / "lwir", setup, "examples/orchestrator/workflow.yaml", given)
    code = _run(tmp_path / "code", setup, "examples.orchestrator.workflow:tech_choice", given)
    assert code["output"] == lwir["output"]
    assert code["output"]["recommendation"] == "SQLite"
    assert code["paths"] == lwir["paths"] == ["brief", "lead"]
    assert code["kinds"] == lwir["kinds"]
    # The lead started one research sub-run per option, in both forms.
    assert code["sub_runs"] == lwir["sub_runs"] == [["researcher"], ["researcher"]]
    # The prompts are the LWIR files': the models were asked the very same things.
    assert code["calls"] == lwir["calls"]


def _loop(root: Path, workflow: str) -> dict[str, Any]:
    example = Example(root)
    setup = "examples.outer_loop.setup:setup"
    given = (REPO / "examples/outer_loop/input.json").read_text(encoding="utf-8")
    supervise = "examples.outer_loop.setup:supervise"
    args = ["--max-cycles", "5", "--supervise", supervise, "--outer-loop-id", "ol_form"]
    output = example.output("--setup", setup, "loop", workflow, "--input", given, *args)
    status = example.output("loop-status", "ol_form", "--json")
    cycles = [_completed(example.events(cycle["runId"])) for cycle in status["cycles"]]
    kinds = [
        sorted(
            (record.event.step_path, record.event.kind)
            for record in example.events(cycle["runId"])
            if isinstance(record.event, StepCompleted)
        )
        for cycle in status["cycles"]
    ]
    return {
        "output": output,
        "cycles": cycles,
        "kinds": kinds,
        "calls": normalized(example.calls()),
    }


def test_the_outer_loop_gives_the_same_output_and_paths_in_both_forms(tmp_path: Path) -> None:
    lwir = _loop(tmp_path / "lwir", "examples/outer_loop/workflow.yaml")
    code = _loop(tmp_path / "code", "examples.outer_loop.workflow:announcement")
    assert code["output"] == lwir["output"]
    assert code["output"]["cycles"] == 3
    assert code["cycles"] == lwir["cycles"] == [["check", "draft"]] * 3
    # The checker is a tool step in both forms (``ctx.tool``), the writer an agent.
    assert code["kinds"] == lwir["kinds"] == [[("check", "tool"), ("draft", "agent")]] * 3
    # The same drafts asked of the model, the same checks, supervise() once per cycle.
    assert code["calls"] == lwir["calls"]
