"""Outer loops (Layer B) in one process: cycles, the manifest, the order of writes, atomic
replacement, ``exhausted``, ``loop_status``.

The step functions and the supervisor (``outer_support``) count their calls in a file
outside the process. Elsewhere: cancellation, ``timeout`` and a waiting second caller in
``test_outer_loop_callers``; mismatches, legacy and corrupt manifests in
``test_outer_loop_manifests``; the kill scenarios and racing processes, with real
processes, in ``test_outer_loop_processes``.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import ConfigError, InvalidIdError, StorageError
from little_workflow.events import OuterLoopCycleCompleted, OuterLoopCycleResult
from little_workflow.lwir import definition_hash, load_workflow
from little_workflow.platform._atomic import atomic_write
from little_workflow.runtime import (
    Continue,
    Cycle,
    CycleRecord,
    Done,
    OuterLoopManifest,
    StepContext,
)
from tests.runtime.outer_support import (
    ANSWER_ENV,
    CALLS_ENV,
    DONE_AT_ENV,
    ENTERED_ENV,
    FLOW,
    KILL_ENV,
    RELEASE_ENV,
    events,
    manifest,
    manifest_file,
    steps,
    supervise,
    supervised,
)
from tests.runtime.support import runtime

INPUT = {"topic": "tea"}
DRAFT = "tests.runtime.outer_support:draft"


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The calls file, named in the environment; the other switches cleared."""
    path = tmp_path / "calls"
    monkeypatch.setenv(CALLS_ENV, str(path))
    for name in (KILL_ENV, DONE_AT_ENV, ANSWER_ENV, ENTERED_ENV, RELEASE_ENV):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def polished(topic: str, cycle: int) -> dict[str, JsonValue]:
    """What a cycle of ``outer_cycle.yaml`` outputs."""
    return {"text": f"{topic} v{cycle} (polished)", "cycle": cycle}


def calls_text(calls: Path) -> str:
    return calls.read_text() if calls.exists() else ""


def temp_files(data: Path) -> list[str]:
    return sorted(
        path.name for path in (data / "outer-loops").iterdir() if path.name.startswith(".~")
    )


# --- a loop, its manifest and its runs ------------------------------------------------


async def test_cycles_run_until_supervise_is_done_and_the_manifest_has_the_seeds_shape(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DONE_AT_ENV, "2")
    seen: list[Cycle] = []

    def watching(cycle: Cycle) -> Done | Continue:
        seen.append(cycle)
        return supervise(cycle)

    async with runtime(data) as rt:
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=3, supervise=watching, outer_loop_id="ol_shape"
        )
        state = await rt.get_state(outcome.cycles[0].run_id)

    final = {"answer": "first", "last": polished("tea", 2)}
    assert (outcome.outer_loop_id, outcome.kind, outcome.final_output) == (
        "ol_shape",
        "done",
        final,
    )
    assert supervised(calls) == [1, 2]
    run_ids = [cycle.run_id for cycle in outcome.cycles]
    assert steps(calls) == [(run_id, path) for run_id in run_ids for path in ("draft", "polish")]

    # The manifest: the seed's fields, in the seed's order, and nothing else.
    doc = manifest(data, "ol_shape")
    assert list(doc) == [
        "outerLoopId",
        "goal",
        "maxCycles",
        "inputHash",
        "cycles",
        "pendingCycleRunId",
        "result",
    ]
    assert doc["outerLoopId"] == "ol_shape"
    assert doc["goal"] == {
        "workflowDefinitionHash": definition_hash(load_workflow(FLOW)),
        "description": "One cycle of an outer loop - a draft, then a polish, each counted.",
    }
    assert doc["maxCycles"] == 3
    assert doc["inputHash"] == sha256_digest(INPUT)
    assert doc["inputHash"].startswith("sha256:")
    assert doc["pendingCycleRunId"] is None
    assert doc["result"] == {"kind": "done", "finalOutput": final}
    assert [list(cycle) for cycle in doc["cycles"]] == [
        ["cycleNumber", "runId", "workflowVersionId", "status", "output", "summary"]
    ] * 2
    assert doc["cycles"] == [
        {
            "cycleNumber": 1,
            "runId": run_ids[0],
            "workflowVersionId": state.workflow_version_id,
            "status": "completed",
            "output": polished("tea", 1),
            "summary": "first: cycle 1 reviewed",
        },
        {
            "cycleNumber": 2,
            "runId": run_ids[1],
            "workflowVersionId": state.workflow_version_id,
            "status": "completed",
            "output": polished("tea", 2),
            "summary": None,
        },
    ]
    assert state.workflow_version_id.startswith("wv_")
    assert run_ids[0].startswith("run_")
    assert run_ids[0] != run_ids[1]
    assert outcome.cycles == tuple(CycleRecord.model_validate(c) for c in doc["cycles"])

    # Each cycle is a run whose input is {"input", "cycle", "previous"}, whose
    # RunStarted names the loop and the cycle, and whose log ends with the commit point.
    previous: list[dict[str, JsonValue]] = []
    for number, run_id in enumerate(run_ids, start=1):
        log = events(data, run_id)
        assert log[0][0] == "RunStarted"
        started = log[0][1]
        assert started["input"] == {"input": INPUT, "cycle": number, "previous": previous}
        assert (started["outerLoopId"], started["cycleNumber"]) == ("ol_shape", number)
        assert [type_name for type_name, _ in log[-2:]] == [
            "RunCompleted",
            "OuterLoopCycleCompleted",
        ]
        committed = log[-1][1]
        assert (committed["outerLoopId"], committed["cycleNumber"]) == ("ol_shape", number)
        summary = doc["cycles"][number - 1]["summary"]
        previous = [
            *previous,
            {"cycleNumber": number, "output": polished("tea", number), "summary": summary},
        ]
    assert events(data, run_ids[1])[-1][1]["result"] == {
        "kind": "done",
        "finalOutput": final,
        "summary": None,
    }

    # What supervise() saw.
    assert [(c.outer_loop_id, c.cycle_number, c.max_cycles, c.run_id) for c in seen] == [
        ("ol_shape", 1, 3, run_ids[0]),
        ("ol_shape", 2, 3, run_ids[1]),
    ]
    assert [c.input for c in seen] == [INPUT, INPUT]
    assert [c.output for c in seen] == [polished("tea", 1), polished("tea", 2)]
    assert seen[0].previous == ()
    assert seen[1].previous == (outcome.cycles[0],)

    # No temp file is left, and no lock.
    assert temp_files(data) == []
    assert list((data / "locks").iterdir()) == []


async def test_a_finished_loop_returns_its_result_without_running_anything(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DONE_AT_ENV, "1")
    async with runtime(data) as rt:
        first = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=2, supervise=supervise, outer_loop_id="ol_again"
        )
        before = calls_text(calls)
        content = manifest_file(data, "ol_again").read_bytes()
        monkeypatch.setenv(ANSWER_ENV, "second")
        again = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=2, supervise=supervise, outer_loop_id="ol_again"
        )
    assert again == first
    assert calls_text(calls) == before
    assert manifest_file(data, "ol_again").read_bytes() == content


async def test_the_loop_is_exhausted_after_max_outer_cycles_continues(
    data: Path, calls: Path
) -> None:
    async with runtime(data) as rt:
        outcome = await rt.run_outer_loop(FLOW, INPUT, max_outer_cycles=2, supervise=supervise)
    assert outcome.outer_loop_id.startswith("ol_")
    assert outcome.kind == "exhausted"
    assert outcome.final_output == polished("tea", 2)
    assert supervised(calls) == [1, 2]
    doc = manifest(data, outcome.outer_loop_id)
    assert doc["result"] == {"kind": "exhausted", "finalOutput": polished("tea", 2)}
    assert [cycle["summary"] for cycle in doc["cycles"]] == [
        "first: cycle 1 reviewed",
        "first: cycle 2 reviewed",
    ]


async def test_an_async_supervise_is_awaited(data: Path, calls: Path) -> None:
    async def supervisor(cycle: Cycle) -> Done | Continue:
        await asyncio.sleep(0)
        return Done(cycle.cycle_number) if cycle.cycle_number == 2 else Continue()

    async with runtime(data) as rt:
        outcome = await rt.run_outer_loop(FLOW, INPUT, max_outer_cycles=5, supervise=supervisor)
    assert (outcome.kind, outcome.final_output, len(outcome.cycles)) == ("done", 2, 2)
    assert outcome.cycles[0].summary is None


async def test_a_bad_supervise_answer_commits_nothing(data: Path, calls: Path) -> None:
    async with runtime(data) as rt:
        with pytest.raises(ConfigError, match="Done"):
            await rt.run_outer_loop(
                FLOW,
                INPUT,
                max_outer_cycles=2,
                supervise=lambda cycle: "yes",  # type: ignore[arg-type,return-value]
                outer_loop_id="ol_bad",
            )
        doc = manifest(data, "ol_bad")
        pending = doc["pendingCycleRunId"]
        assert doc["cycles"] == []
        assert doc["result"] is None
        assert pending is not None
        assert "OuterLoopCycleCompleted" not in [t for t, _ in events(data, pending)]
        # A resume with a working supervisor finishes the same cycle's run.
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=2, supervise=supervise, outer_loop_id="ol_bad"
        )
    assert outcome.cycles[0].run_id == pending
    assert steps(calls).count((pending, "draft")) == 1


async def test_max_outer_cycles_must_be_positive(data: Path) -> None:
    async with runtime(data) as rt:
        with pytest.raises(ConfigError, match="max_outer_cycles"):
            await rt.run_outer_loop(FLOW, INPUT, max_outer_cycles=0, supervise=supervise)
    assert list((data / "outer-loops").iterdir()) == []


def _no_cycle() -> Done:
    return Done(None)


def _with_verdict(cycle: Cycle, verdict: str) -> Done:
    return Done(verdict)


async def test_a_supervise_that_cannot_take_a_cycle_is_refused_before_any_cycle(
    data: Path, calls: Path
) -> None:
    async with runtime(data) as rt:
        for wrong, problem in (
            (_no_cycle, "too many positional arguments"),
            (_with_verdict, "missing a required argument: 'verdict'"),
        ):
            with pytest.raises(ConfigError) as refused:
                await rt.run_outer_loop(FLOW, INPUT, max_outer_cycles=2, supervise=wrong)  # type: ignore[arg-type]
            assert refused.value.code == "supervise_invalid"
            name = f"tests.runtime.test_outer_loops:{wrong.__name__}"
            assert refused.value.message.startswith(f"supervise function {name}("), refused.value
            assert problem in refused.value.message
        with pytest.raises(InvalidIdError, match="invalid outer loop id '': it is empty"):
            await rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=2, supervise=supervise, outer_loop_id=""
            )
    assert not (data / "outer-loops").exists() or list((data / "outer-loops").iterdir()) == []
    assert calls_text(calls) == ""


async def test_loop_status_returns_the_manifest(data: Path, calls: Path) -> None:
    async with runtime(data) as rt:
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=1, supervise=supervise, outer_loop_id="ol_status"
        )
        status = rt.outer_loop_status("ol_status")
        with pytest.raises(ConfigError) as missing:
            rt.outer_loop_status("ol_nowhere")
    assert missing.value.code == "outer_loop_not_found"
    assert isinstance(status, OuterLoopManifest)
    assert status.model_dump(mode="json", by_alias=True) == manifest(data, "ol_status")
    assert status.result is not None
    assert status.result.kind == "exhausted"
    assert tuple(status.cycles) == outcome.cycles


# --- the order of writes, and atomic replacement --------------------------------------


async def test_pending_cycle_run_id_is_written_first_and_cleared_after_the_commit_point(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[tuple[Any, list[str]]] = []
    original = atomic_write

    def observing(path: Path, content: bytes, **options: Any) -> None:
        doc = json.loads(content)
        # The log of the cycle whose run id this write clears or sets, at this moment.
        run_id = doc["pendingCycleRunId"] or (doc["cycles"][-1]["runId"] if doc["cycles"] else None)
        logged = (
            []
            if run_id is None or not (data / "little-workflow.db").exists()
            else events(data, run_id)
        )
        writes.append((doc, [type_name for type_name, _ in logged]))
        original(path, content, **options)

    seen_by_steps: list[tuple[str, str | None]] = []

    def draft(ctx: StepContext, topic: str, cycle: int, previous: list[JsonValue]) -> JsonValue:
        seen_by_steps.append((ctx.run_id, manifest(data, "ol_order")["pendingCycleRunId"]))
        return {"text": f"{topic} v{cycle}", "previous": len(previous)}

    # The manifest's writer, as the outer-loop module calls it.
    monkeypatch.setattr("little_workflow.runtime._outer.atomic_write", observing)
    monkeypatch.setenv(DONE_AT_ENV, "2")
    async with runtime(data, functions={DRAFT: draft}) as rt:
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_order"
        )
    first, second = (cycle.run_id for cycle in outcome.cycles)
    # While a cycle's steps run, the manifest names its run as pending.
    assert seen_by_steps == [(first, first), (second, second)]
    shape = [
        (len(doc["cycles"]), doc["pendingCycleRunId"], doc["result"] is not None, logged[-1:])
        for doc, logged in writes
    ]
    assert shape == [
        (0, None, False, []),  # the new manifest
        (0, first, False, []),  # pending, before the run exists
        (1, None, False, ["OuterLoopCycleCompleted"]),  # after the commit point
        (1, second, False, []),
        (2, None, True, ["OuterLoopCycleCompleted"]),
    ]


async def test_a_failed_manifest_write_leaves_the_old_manifest_and_the_commit_point_wins(
    data: Path, calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A torn write (``os.replace`` fails) after cycle 2's commit point, then a resume."""
    path = manifest_file(data, "ol_torn")
    replace: Callable[..., None] = os.replace
    before_failure: list[bytes] = []

    def failing(source: Any, target: Any, **options: Any) -> None:
        if Path(target) == path and len(json.loads(Path(source).read_bytes())["cycles"]) == 2:
            before_failure.append(path.read_bytes())
            raise OSError(errno.EIO, "Input/output error")
        replace(source, target, **options)

    monkeypatch.setattr(os, "replace", failing)
    monkeypatch.setenv(DONE_AT_ENV, "2")
    async with runtime(data) as rt:
        with pytest.raises(StorageError) as failed:
            await rt.run_outer_loop(
                FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_torn"
            )
        assert str(path) in str(failed.value)
        monkeypatch.setattr(os, "replace", replace)
        # The old content is intact, and no temp file is left.
        assert path.read_bytes() == before_failure[0]
        assert temp_files(data) == []
        doc = manifest(data, "ol_torn")
        pending = doc["pendingCycleRunId"]
        assert len(doc["cycles"]) == 1
        assert pending is not None
        assert doc["result"] is None
        # Cycle 2 was committed as done ("first"). A later contradicting commit does not
        # count: the first OuterLoopCycleCompleted for a cycle is authoritative.
        assert events(data, pending)[-1][0] == "OuterLoopCycleCompleted"
        late = OuterLoopCycleCompleted(
            outer_loop_id="ol_torn",
            cycle_number=2,
            result=OuterLoopCycleResult(kind="continue", summary="late"),
        )
        await rt.events.append(pending, [late], expected_seq=await rt.events.last_seq(pending))

        # The resume's supervisor would answer otherwise; it is not asked.
        monkeypatch.setenv(ANSWER_ENV, "second")
        monkeypatch.setenv(DONE_AT_ENV, "3")
        outcome = await rt.run_outer_loop(
            FLOW, INPUT, max_outer_cycles=3, supervise=supervise, outer_loop_id="ol_torn"
        )
    final = {"answer": "first", "last": polished("tea", 2)}
    assert (outcome.kind, outcome.final_output) == ("done", final)
    assert outcome.cycles[1].run_id == pending
    assert supervised(calls) == [1, 2]
    assert steps(calls).count((pending, "polish")) == 1
    doc = manifest(data, "ol_torn")
    assert doc["result"] == {"kind": "done", "finalOutput": final}
    assert doc["pendingCycleRunId"] is None
    assert temp_files(data) == []
