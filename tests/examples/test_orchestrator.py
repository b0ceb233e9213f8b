"""The orchestrator example, run as its README says: offline, killed between its sub-runs
and resumed, and on a real provider's wire format (a local server)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.orchestrator.scripted import answer
from little_workflow.events import RunCompleted
from tests.examples.support import (
    Example,
    committed,
    kill_when,
    normalized,
    run_on_a_real_provider,
    sub_run_ids,
)

SETUP = "examples.orchestrator.setup:setup"
WORKFLOW = "examples/orchestrator/workflow.yaml"
#: The same workflow written as code (its lead an orchestrator of ``research``).
CODE = "examples.orchestrator.workflow:tech_choice"
INPUT = {
    "question": "Where should a small team keep its workflow runs?",
    "options": ["SQLite", "PostgreSQL"],
}

# The lead twice (start both sub-runs; combine), each researcher twice, the brief writer.
MODEL_CALLS = 7


def _run_args(run_id: str, workflow: str = WORKFLOW) -> list[str]:
    return ["--setup", SETUP, "run", workflow, "--input", json.dumps(INPUT), "--run-id", run_id]


def _all_runs(example: Example) -> list[dict[str, Any]]:
    listed = example.run("runs", "--sub-runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs: list[dict[str, Any]] = json.loads(listed.stdout)
    return runs


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Counter[str]]:
    """The output and calls of a run that nobody interrupts."""
    example = Example(tmp_path_factory.mktemp("uncrashed"))
    return example.output(*_run_args("choice_1")), normalized(example.calls())


def test_the_lead_combines_two_research_sub_runs(
    uncrashed: tuple[Any, Counter[str]], tmp_path: Path
) -> None:
    output, calls = uncrashed
    assert output["recommendation"] == "SQLite"
    assert [finding["option"] for finding in output["findings"]] == ["SQLite", "PostgreSQL"]
    assert output["findings"][0]["fit"] > output["findings"][1]["fit"]
    assert output["brief"].startswith("Decision: SQLite.")
    kinds = Counter(line.split(" ", 1)[0] for line in calls.elements())
    assert kinds == {"model": MODEL_CALLS, "tool": 2}

    example = Example(tmp_path)
    assert example.run(*_run_args("choice_2")).returncode == 0
    children = [run for run in _all_runs(example) if run["parentRunId"] == "choice_2"]
    assert sorted(run["workflow"] for run in children) == ["brief", "research", "research"]
    assert {run["status"] for run in children} == {"completed"}
    # show names every sub-run: the brief on its step, the research ones the lead started.
    shown = example.run("show", "choice_2")
    assert shown.returncode == 0, shown.stderr
    brief = next(run["runId"] for run in children if run["workflow"] == "brief")
    assert f"sub-run {brief}" in shown.stdout.replace("\n    ", " ")
    started = shown.stdout.split("sub-runs started by agents:\n", 1)[1].splitlines()
    assert sorted(line.split()[0] for line in started) == sorted(
        run["runId"] for run in children if run["workflow"] == "research"
    )
    as_json = json.loads(example.run("show", "choice_2", "--json").stdout)
    assert sorted(sub["runId"] for sub in as_json["subRuns"]) == sorted(
        run["runId"] for run in children
    )


@pytest.mark.parametrize("workflow", [WORKFLOW, CODE], ids=["lwir", "code"])
def test_sigkill_between_sub_runs_then_resume(
    uncrashed: tuple[Any, Counter[str]], tmp_path: Path, workflow: str
) -> None:
    expected_output, expected_calls = uncrashed
    example = Example(tmp_path)
    process = example.start(
        *_run_args("choice_killed", workflow), env=example.env(EXAMPLE_DELAY="0.15")
    )

    def first_research_done() -> bool:
        return any(
            isinstance(record.event, RunCompleted)
            for sub_run in sub_run_ids(example.events("choice_killed"))
            for record in example.events(sub_run)
        )

    kill_when(process, first_research_done)
    run_ids = [run["runId"] for run in _all_runs(example)]
    paid = sum((committed(example.events(run_id)) for run_id in run_ids), Counter[str]())
    before = normalized(example.calls())
    assert not paid - before

    resumed = example.run("--setup", SETUP, "resume", "choice_killed")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == expected_output
    assert normalized(example.calls()) - before == expected_calls - paid
    # The resumed parent went on with the sub-runs it had recorded: none was started twice.
    children = [run for run in _all_runs(example) if run["parentRunId"] == "choice_killed"]
    assert sorted(run["workflow"] for run in children) == ["brief", "research", "research"]


def test_a_real_provider_over_the_anthropic_wire_format(
    uncrashed: tuple[Any, Counter[str]], tmp_path: Path
) -> None:
    expected_output, _ = uncrashed
    example = Example(tmp_path)
    done, requests = run_on_a_real_provider(
        example, _run_args("choice_anthropic"), answer, provider="anthropic", api_key="sk-ant-x"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected_output
    assert len(requests) == MODEL_CALLS
    assert {(r.path, r.status) for r in requests} == {("/v1/messages", 200)}
    assert {r.body["model"] for r in requests} == {"claude-haiku-4-5"}
    assert {r.headers["x-api-key"] for r in requests} == {"sk-ant-x"}
