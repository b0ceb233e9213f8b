"""Outer-loop manifests on resume: mismatch errors, legacy manifests, corrupt manifests.

A resume with another workflow, ``max_outer_cycles`` or input fails before any cycle
runs (no step, no ``supervise()`` call: counted in a file) and before a finished loop
returns its result, and the manifest is left byte for byte. A manifest without
``inputHash`` takes its input identity from its cycles' runs, or from the resuming call
when no run recorded one. A corrupt manifest is a ``CorruptDataError`` naming the file,
and the file is never overwritten.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import sha256_digest
from little_workflow.errors import CorruptDataError, RunFailedError, SupervisorError
from little_workflow.lwir import definition_hash, load_workflow
from little_workflow.runtime import Continue, Cycle, Done
from tests.runtime.outer_support import (
    ANSWER_ENV,
    CALLS_ENV,
    DONE_AT_ENV,
    ENTERED_ENV,
    FLOW,
    KILL_ENV,
    OTHER_FLOW,
    RELEASE_ENV,
    SUPERVISE,
    events,
    manifest,
    manifest_file,
    steps,
    supervise,
    supervised,
)
from tests.runtime.support import cli, runtime

INPUT = {"topic": "tea"}
OTHER_INPUT = {"topic": "coffee"}


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls"
    monkeypatch.setenv(CALLS_ENV, str(path))
    for name in (KILL_ENV, DONE_AT_ENV, ANSWER_ENV, ENTERED_ENV, RELEASE_ENV):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def calls_text(calls: Path) -> str:
    return calls.read_text() if calls.exists() else ""


def broken_at(number: int) -> Any:
    """A supervisor that raises at cycle ``number``: the loop stays unfinished there."""

    def supervisor(cycle: Cycle) -> Done | Continue:
        if cycle.cycle_number == number:
            raise RuntimeError("the supervisor broke")
        return supervise(cycle)

    return supervisor


async def unfinished(data: Path, loop_id: str, *, at: int = 2) -> None:
    """A loop with ``at - 1`` cycles recorded and cycle ``at``'s (completed) run pending."""
    async with runtime(data) as rt:
        with pytest.raises(SupervisorError, match="broke"):
            await rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=3, supervise=broken_at(at), outer_loop_id=loop_id
            )
    doc = manifest(data, loop_id)
    assert len(doc["cycles"]) == at - 1
    assert doc["pendingCycleRunId"] is not None


async def finished(data: Path, loop_id: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv(DONE_AT_ENV, "2")
    async with runtime(data) as rt:
        return await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id=loop_id
        )


def strip_input_hash(data: Path, loop_id: str) -> bytes:
    """Rewrite the manifest as one written before ``inputHash`` existed."""
    doc = manifest(data, loop_id)
    del doc["inputHash"]
    content = json.dumps(doc, indent=2).encode()
    manifest_file(data, loop_id).write_bytes(content)
    return content


# --- mismatches ------------------------------------------------------------------------

MISMATCHES = [
    ("outer_loop_goal_mismatch", {"workflow": OTHER_FLOW}),
    ("outer_loop_max_cycles_mismatch", {"max_outer_cycles": 4}),
    ("outer_loop_input_mismatch", {"input": OTHER_INPUT}),
]


async def resume_with(data: Path, loop_id: str, change: dict[str, Any]) -> Any:
    call: dict[str, Any] = {"workflow": FLOW, "input": INPUT, "max_outer_cycles": 3, **change}
    async with runtime(data) as rt:
        return await rt.run_outer_loop(
            call.pop("workflow"),
            call.pop("input"),
            **call,
            supervise=supervise,
            outer_loop_id=loop_id,
        )


@pytest.mark.parametrize(("reason", "change"), MISMATCHES, ids=[m[0] for m in MISMATCHES])
async def test_a_mismatched_resume_fails_before_any_cycle_runs(
    data: Path, calls: Path, reason: str, change: dict[str, Any]
) -> None:
    await unfinished(data, "ol_mis")
    content = manifest_file(data, "ol_mis").read_bytes()
    before = calls_text(calls)
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_mis", change)
    assert (refused.value.cause_code, refused.value.reason) == ("runtime_config_error", reason)
    assert "ol_mis" in str(refused.value)
    assert calls_text(calls) == before  # no step, no supervise()
    assert manifest_file(data, "ol_mis").read_bytes() == content
    # The loop is intact: the right call finishes it, resuming the pending cycle's run.
    outcome = await resume_with(data, "ol_mis", {})
    assert outcome.cycles[1].run_id == json.loads(content)["pendingCycleRunId"]
    assert supervised(calls) == [1, 2, 3]


@pytest.mark.parametrize(("reason", "change"), MISMATCHES, ids=[m[0] for m in MISMATCHES])
async def test_a_mismatched_call_on_a_finished_loop_fails_instead_of_returning_its_result(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch, reason: str, change: dict[str, Any]
) -> None:
    result = await finished(data, "ol_done", monkeypatch)
    content = manifest_file(data, "ol_done").read_bytes()
    before = calls_text(calls)
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_done", change)
    assert (refused.value.cause_code, refused.value.reason) == ("runtime_config_error", reason)
    assert calls_text(calls) == before
    assert manifest_file(data, "ol_done").read_bytes() == content
    assert await resume_with(data, "ol_done", {}) == result


# --- legacy manifests (no inputHash) -----------------------------------------------------


async def test_a_legacy_manifest_takes_its_input_identity_from_its_cycles_runs(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = await finished(data, "ol_old", monkeypatch)
    legacy = strip_input_hash(data, "ol_old")
    before = calls_text(calls)
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_old", {"input": OTHER_INPUT})
    assert refused.value.reason == "outer_loop_input_mismatch"
    assert manifest_file(data, "ol_old").read_bytes() == legacy
    # The loop's own input is accepted, and its identity is recorded.
    assert await resume_with(data, "ol_old", {}) == result
    assert calls_text(calls) == before
    assert manifest(data, "ol_old")["inputHash"] == sha256_digest(INPUT)


async def test_an_unfinished_legacy_manifest_resumes_with_its_input_only(
    data: Path, calls: Path
) -> None:
    await unfinished(data, "ol_old")
    legacy = strip_input_hash(data, "ol_old")
    before = calls_text(calls)
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_old", {"input": OTHER_INPUT})
    assert refused.value.reason == "outer_loop_input_mismatch"
    assert manifest_file(data, "ol_old").read_bytes() == legacy
    assert calls_text(calls) == before
    outcome = await resume_with(data, "ol_old", {})
    assert outcome.kind == "exhausted"
    assert supervised(calls) == [1, 2, 3]
    assert manifest(data, "ol_old")["inputHash"] == sha256_digest(INPUT)


async def test_a_legacy_manifest_with_only_a_pending_cycle_takes_that_runs_input(
    data: Path, calls: Path
) -> None:
    """No cycle recorded yet: the in-flight cycle's run still recorded the input."""
    await unfinished(data, "ol_old", at=1)
    legacy = strip_input_hash(data, "ol_old")
    pending = json.loads(legacy)["pendingCycleRunId"]
    assert events(data, pending)[0][1]["input"]["input"] == INPUT
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_old", {"input": OTHER_INPUT})
    assert refused.value.reason == "outer_loop_input_mismatch"
    assert manifest_file(data, "ol_old").read_bytes() == legacy
    outcome = await resume_with(data, "ol_old", {})
    assert outcome.cycles[0].run_id == pending


def write_legacy(data: Path, loop_id: str, cycles: list[dict[str, Any]]) -> None:
    doc = {
        "outerLoopId": loop_id,
        "goal": {
            "workflowDefinitionHash": definition_hash(load_workflow(FLOW)),
            "description": None,
        },
        "maxCycles": 3,
        "cycles": cycles,
        "pendingCycleRunId": None,
        "result": None,
    }
    (data / "outer-loops").mkdir(parents=True, exist_ok=True)
    manifest_file(data, loop_id).write_text(json.dumps(doc))


async def test_a_legacy_manifest_whose_cycle_run_recorded_nothing_accepts_and_records_the_input(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_output = {"text": "from an older version", "cycle": 1}
    write_legacy(
        data,
        "ol_lost",
        [
            {
                "cycleNumber": 1,
                "runId": "run_gone",
                "workflowVersionId": "wv_gone",
                "status": "completed",
                "output": old_output,
                "summary": "kept",
            }
        ],
    )
    monkeypatch.setenv(DONE_AT_ENV, "2")
    outcome = await resume_with(data, "ol_lost", {"input": OTHER_INPUT})
    assert outcome.kind == "done"
    assert len(outcome.cycles) == 2
    assert supervised(calls) == [2]
    doc = manifest(data, "ol_lost")
    assert doc["inputHash"] == sha256_digest(OTHER_INPUT)
    assert doc["cycles"][0]["runId"] == "run_gone"
    # Cycle 2 saw the recorded cycle 1 and the accepted input.
    started = events(data, outcome.cycles[1].run_id)[0][1]
    assert started["input"] == {
        "input": OTHER_INPUT,
        "cycle": 2,
        "previous": [{"cycleNumber": 1, "output": old_output, "summary": "kept"}],
    }
    # From now on the recorded identity holds.
    with pytest.raises(RunFailedError) as refused:
        await resume_with(data, "ol_lost", {"input": INPUT})
    assert refused.value.reason == "outer_loop_input_mismatch"


async def test_a_legacy_manifest_without_cycles_accepts_and_records_the_input(
    data: Path, calls: Path
) -> None:
    write_legacy(data, "ol_empty", [])
    outcome = await resume_with(data, "ol_empty", {"input": OTHER_INPUT})
    assert outcome.kind == "exhausted"
    assert supervised(calls) == [1, 2, 3]
    assert manifest(data, "ol_empty")["inputHash"] == sha256_digest(OTHER_INPUT)


# --- corrupt manifests -------------------------------------------------------------------


def corrupt_variants() -> dict[str, Any]:
    """name -> a function from a valid manifest's bytes to corrupt bytes."""

    def edit(change: Any) -> Any:
        def apply(valid: bytes) -> bytes:
            doc = json.loads(valid)
            change(doc)
            return json.dumps(doc).encode()

        return apply

    return {
        "truncated": lambda valid: valid[: len(valid) // 2],
        "empty": lambda valid: b"",
        "not-json": lambda valid: b"this is not JSON\n",
        "not-an-object": lambda valid: b"[1, 2, 3]",
        "wrong-type": edit(lambda doc: doc.update(maxCycles="three")),
        "unknown-field": edit(lambda doc: doc.update(extra=True)),
        "missing-field": edit(lambda doc: doc.pop("goal")),
        "bad-result-kind": edit(lambda doc: doc.update(result={"kind": "maybe"})),
        "cycle-wrong-type": edit(lambda doc: doc["cycles"][0].update(cycleNumber="one")),
        "cycle-misnumbered": edit(lambda doc: doc["cycles"][0].update(cycleNumber=2)),
        "another-loops-id": edit(lambda doc: doc.update(outerLoopId="ol_other")),
    }


CORRUPT = corrupt_variants()


@pytest.mark.parametrize("variant", sorted(CORRUPT))
async def test_a_corrupt_manifest_is_a_typed_error_and_is_not_overwritten(
    data: Path, calls: Path, variant: str
) -> None:
    await unfinished(data, "ol_bad")
    path = manifest_file(data, "ol_bad")
    path.write_bytes(CORRUPT[variant](path.read_bytes()))
    content = path.read_bytes()
    before = calls_text(calls)
    async with runtime(data) as rt:
        with pytest.raises(CorruptDataError) as loop_error:
            await rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_bad"
            )
        with pytest.raises(CorruptDataError) as status_error:
            rt.outer_loop_status("ol_bad")
    for error in (loop_error.value, status_error.value):
        assert error.code == "corrupt_data"
        assert str(path) in str(error)
        assert "left unchanged" in str(error)
    assert path.read_bytes() == content
    assert calls_text(calls) == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["ol_bad.json"]


def test_loop_status_on_a_corrupt_manifest_exits_with_the_storage_code(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "outer-loops").mkdir(parents=True)
    path = manifest_file(data, "ol_torn")
    path.write_bytes(b'{"outerLoopId": "ol_to')
    result = cli(data, "loop-status", "ol_torn")
    assert result.returncode == 4, result.stderr
    assert "corrupt_data" in result.stderr
    assert str(path) in result.stderr
    assert path.read_bytes() == b'{"outerLoopId": "ol_to'
    # And `loop` refuses it the same way, before running anything.
    looped = cli(
        data,
        "loop",
        str(FLOW),
        "--input",
        json.dumps(INPUT),
        "--max-cycles",
        "2",
        "--supervise",
        SUPERVISE,
        "--outer-loop-id",
        "ol_torn",
        env={CALLS_ENV: str(tmp_path / "calls")},
    )
    assert looped.returncode == 4, looped.stderr
    assert not (tmp_path / "calls").exists()
    assert path.read_bytes() == b'{"outerLoopId": "ol_to'
    assert steps(tmp_path / "calls") == []
