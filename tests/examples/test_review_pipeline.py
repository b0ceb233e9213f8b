"""The review pipeline, run as its README says: offline, killed and resumed, on a real
provider's wire format (a local server)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.review_pipeline.scripted import answer
from little_workflow.events import (
    HarnessModelResponded,
    HarnessSessionCompleted,
    RunCompleted,
    StepCompleted,
)
from tests.examples.support import (
    REPO,
    Example,
    committed,
    kill_when,
    normalized,
    run_on_a_real_provider,
)

SETUP = "examples.review_pipeline.setup:setup"
WORKFLOW = "examples/review_pipeline/workflow.yaml"
#: The same workflow written as code (its editor a ``ctx.decide``).
CODE = "examples.review_pipeline.workflow:review_pipeline"
DOCUMENTS = "examples/review_pipeline/documents"

# Two rounds: three reviewers (two calls each), the editor, the writer; then three
# reviewers and the editor again.
MODEL_CALLS = 15


def _run_args(example: Example, run_id: str, workflow: str = WORKFLOW) -> list[str]:
    given = {"documents": DOCUMENTS, "workspace": str(example.root / "work")}
    return ["--setup", SETUP, "run", workflow, "--input", json.dumps(given), "--run-id", run_id]


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Counter[str]]:
    """The output and calls of a run that nobody interrupts."""
    example = Example(tmp_path_factory.mktemp("uncrashed"))
    return example.output(*_run_args(example, "review_1")), normalized(example.calls())


def test_the_run_revises_flagged_documents_then_approves(
    uncrashed: tuple[Any, Counter[str]],
) -> None:
    output, calls = uncrashed
    assert output["editor"] == {"note": "All 3 documents pass review."}
    assert [review["verdict"] for review in output["reviews"]] == ["approve"] * 3
    texts = {document["id"]: document["text"] for document in output["documents"]}
    assert "you run the demo" in texts["quickstart"]
    assert "simply" not in texts["quickstart"]
    assert "obviously" not in texts["outer-loops"]
    # The originals are left as they were.
    assert "simply" in (REPO / DOCUMENTS / "quickstart.md").read_text(encoding="utf-8")
    kinds = Counter(line.split(" ", 1)[0] for line in calls.elements())
    # collect twice, save once, publish once
    assert kinds == {"model": MODEL_CALLS, "tool": 6, "step": 4}
    assert [item["name"] for item in output["published"]] == [
        f"{document['id']}.md" for document in output["documents"]
    ]


def test_the_approved_set_is_published_as_artifacts(tmp_path: Path) -> None:
    example = Example(tmp_path)
    output = example.output(*_run_args(example, "review_art"))
    listed = example.run("artifacts", "review_art", "--json")
    assert listed.returncode == 0, listed.stderr
    artifacts = json.loads(listed.stdout)
    assert [(a["name"], a["sha256"], a["stepPath"]) for a in artifacts] == [
        (item["name"], item["sha256"], "publish") for item in output["published"]
    ]
    texts = {document["id"]: document["text"] for document in output["documents"]}
    exported = example.run("export-artifact", artifacts[0]["artifactId"], "-")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == texts[artifacts[0]["name"].removesuffix(".md")]


def test_show_draws_both_rounds(tmp_path: Path) -> None:
    example = Example(tmp_path)
    assert example.run(*_run_args(example, "review_show")).returncode == 0
    shown = example.run("show", "review_show")
    assert shown.returncode == 0, shown.stderr
    assert "visit[0]  decision  completed -> revise" in shown.stdout
    assert "visit[1]  decision  completed -> approve" in shown.stdout
    assert "[quickstart]" in shown.stdout


def _session_under_way(example: Example, run_id: str) -> bool:
    """A reviewer's session has a committed model response and has not completed."""
    answered: set[str] = set()
    completed: set[str] = set()
    for record in example.events(run_id):
        if isinstance(record.event, HarnessModelResponded):
            answered.add(record.event.session_id)
        elif isinstance(record.event, HarnessSessionCompleted):
            completed.add(record.event.session_id)
    return bool(answered - completed)


def _step_committed(example: Example, run_id: str, path: str) -> bool:
    return any(
        isinstance(r.event, StepCompleted) and r.event.step_path == path
        for r in example.events(run_id)
    )


@pytest.mark.parametrize(
    ("kill_at", "workflow"),
    [
        ("mid-review", WORKFLOW),
        ("mid-review", CODE),
        ("second-round", WORKFLOW),
        ("second-round", CODE),
    ],
    ids=["mid-review", "mid-review-code", "second-round", "second-round-code"],
)
def test_sigkill_then_resume_pays_for_nothing_twice(
    uncrashed: tuple[Any, Counter[str]], tmp_path: Path, kill_at: str, workflow: str
) -> None:
    expected_output, expected_calls = uncrashed
    example = Example(tmp_path)
    run_id = "review_killed"
    # Slow enough that the kill lands between calls, with some in flight.
    process = example.start(
        *_run_args(example, run_id, workflow), env=example.env(EXAMPLE_DELAY="0.15")
    )
    if kill_at == "mid-review":
        # Inside a session (the drift check below needs one under way), after its first
        # answer: a kill between a reviewer's two model calls.
        kill_when(process, lambda: _session_under_way(example, run_id))
    else:
        kill_when(process, lambda: _step_committed(example, run_id, "save.visit[0]"))

    at_kill = example.events(run_id)
    assert not any(isinstance(r.event, RunCompleted) for r in at_kill)
    before = normalized(example.calls())
    paid = committed(at_kill)
    assert paid, "nothing was committed before the kill"
    assert not paid - before, "the log holds calls the call log never saw"

    if kill_at == "mid-review":
        # A reviewer's session was under way: another model in the slot is refused
        # before anything runs (the real provider here is never reached).
        drifted = example.run(
            "--setup",
            SETUP,
            "resume",
            run_id,
            env=example.env(EXAMPLE_PROVIDER="openai", OPENAI_BASE_URL="http://127.0.0.1:9/v1"),
        )
        assert drifted.returncode == 3, drifted.stderr
        assert "CapabilityDriftError" in drifted.stderr
        assert '"scripted" → "gpt-4o-mini"' in drifted.stderr
        # Refused before any branch started a session under the new model: nothing
        # written, nothing called.
        assert len(example.events(run_id)) == len(at_kill)
        assert normalized(example.calls()) == before

    resumed = example.run("--setup", SETUP, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == expected_output
    after = normalized(example.calls()) - before
    # Exactly what the uncrashed run made and the log had not committed: the calls in
    # flight at the kill again, nothing committed twice.
    assert after == expected_calls - paid


def test_a_real_provider_over_the_openai_wire_format(
    uncrashed: tuple[Any, Counter[str]], tmp_path: Path
) -> None:
    expected_output, _ = uncrashed
    example = Example(tmp_path)
    done, requests = run_on_a_real_provider(
        example,
        _run_args(example, "review_openai"),
        answer,
        provider="openai",
        api_key="sk-example-test",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected_output
    assert len(requests) == MODEL_CALLS
    assert {(r.path, r.status) for r in requests} == {("/v1/chat/completions", 200)}
    assert {r.body["model"] for r in requests} == {"gpt-4o-mini"}
    assert {r.headers["authorization"] for r in requests} == {"Bearer sk-example-test"}
    # The scripted model was not used: no model call went through the call log.
    assert not [line for line in example.calls() if line.startswith("model ")]
