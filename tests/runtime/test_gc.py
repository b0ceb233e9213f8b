"""``Runtime.gc``: which runs go, which stay and why, and what is swept with them.

Every test runs real workflows against a real SQLite data directory. A run is made old
by moving its events' timestamps back in the database, never by sleeping.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from little_workflow.durable import FileLock
from little_workflow.errors import ConfigError, SupervisorError
from little_workflow.events import RunStatus
from little_workflow.lwir import OutputStep, Workflow
from little_workflow.runtime import Continue, Cycle, Done, GcReport, Runtime
from little_workflow.runtime._cancel import CancelRequest, cancel_key
from little_workflow.runtime._gc import PENDING_PREFIX
from little_workflow.storage import payload_refs, referenced_digests
from little_workflow.storage._dirs import make_private_dirs
from tests.runtime.flows import gc_funcs
from tests.runtime.support import FLOWS
from tests.storage.raw_sqlite import row_checksum

FLOW = FLOWS / "gc_parent.yaml"
NO_GRACE = timedelta(0)
ALL = timedelta(0)


def seed(name: str, *, artifact: bool = False, fail: bool = False) -> dict[str, Any]:
    return {"seed": name, "artifact": artifact, "fail": fail}


@pytest.fixture
async def rt(tmp_path: Path) -> AsyncIterator[Runtime]:
    async with Runtime(tmp_path / "data") as runtime:
        yield runtime
    gc_funcs.GATES.clear()


async def family(rt: Runtime, run_id: str) -> list[str]:
    """``run_id`` and its sub-runs."""
    found = [run_id]
    for child in await rt.events.list_runs(parent_run_id=run_id):
        found.extend(await family(rt, child.run_id))
    return found


def age(rt: Runtime, run_ids: list[str], days: float) -> None:
    """Move the runs' events ``days`` into the past (what waiting would do)."""
    with sqlite3.connect(rt.data_dir.database) as conn:
        # The rows' checksums cover their time: resealed, as if written back then.
        conn.create_function("lw_checksum", 5, row_checksum, deterministic=True)
        for run_id in run_ids:
            conn.execute(
                "UPDATE events SET ts = ts - ?1, "
                "checksum = lw_checksum(run_id, seq, type, ts - ?1, data) WHERE run_id = ?2",
                (days * 86400, run_id),
            )
            conn.execute(
                "UPDATE runs SET created_at = created_at - ? WHERE run_id = ?",
                (days * 86400, run_id),
            )


async def at_gate(rt: Runtime, run_id: str) -> bool:
    """Whether ``run_id``'s log ends with the ``wait`` step's attempt (it waits there)."""
    records = await rt.events.inner.read(run_id)
    return bool(records) and getattr(records[-1].event, "step_path", None) == "wait"


async def reachable(rt: Runtime) -> set[str]:
    """Every blob the remaining runs' events reach, computed here independently."""
    refs = []
    for info in await rt.events.list_runs():
        for record in await rt.events.inner.read(info.run_id):
            refs.extend(payload_refs(record.event))
    return await referenced_digests(refs, rt.blobs)


def give_scratch(rt: Runtime, run_ids: list[str]) -> None:
    """A file in each run's scratch directory, as a harness session leaves one.

    The plain steps of these flows make no scratch directory (made at first use).
    """
    for run_id in run_ids:
        folder = rt.data_dir.harness_dir(run_id) / "session"
        make_private_dirs(folder)
        (folder / "notes.txt").write_text(run_id)


async def assert_gone(rt: Runtime, run_ids: list[str]) -> None:
    names = {manifest.run_id for manifest in rt.artifacts.list()}
    for run_id in run_ids:
        assert await rt.events.read(run_id) == []
        assert await rt.events.get_run(run_id) is None
        assert not rt.data_dir.run_dir(run_id).exists()
        assert run_id not in names
        assert await rt.kv.get(cancel_key(run_id)) is None
        assert await rt.kv.get(PENDING_PREFIX + run_id) is None


async def assert_whole(rt: Runtime, run_id: str) -> None:
    """The run's every payload resolves and it replays."""
    await rt.events.read(run_id)  # resolves every reference, or raises
    replayed = await rt.replay(run_id)
    assert replayed.unreached == ()


async def test_older_than_deletes_a_run_with_its_sub_run_and_their_blobs(rt: Runtime) -> None:
    old = await rt.run(FLOW, seed("old"))
    new = await rt.run(FLOW, seed("new"))
    old_family, new_family = await family(rt, old.run_id), await family(rt, new.run_id)
    assert len(old_family) == 2  # the run and its sub-run
    age(rt, old_family, days=2)
    blobs_before = {info.digest for info in await rt.blobs.list()}
    events = 0
    for run_id in old_family:
        events += await rt.events.last_seq(run_id)
    give_scratch(rt, [*old_family, *new_family])

    report = await rt.gc(timedelta(days=1), grace=NO_GRACE)

    assert sorted(report.runs_deleted) == sorted(old_family)
    assert report.events_deleted == events > 0
    await assert_gone(rt, old_family)
    for run_id in new_family:
        await assert_whole(rt, run_id)
        assert (rt.data_dir.harness_dir(run_id) / "session" / "notes.txt").is_file()
    left = {info.digest for info in await rt.blobs.list()}
    # The old run's own blobs went; the one both runs share stayed.
    assert left == await reachable(rt)
    assert report.blobs_deleted == len(blobs_before - left) > 0
    assert report.blob_bytes_freed > 0
    assert report.kept == ()


async def test_a_run_not_old_enough_stays(rt: Runtime) -> None:
    run = await rt.run(FLOW, seed("fresh"))
    report = await rt.gc(timedelta(days=1), grace=NO_GRACE)
    assert report.runs_deleted == ()
    await assert_whole(rt, run.run_id)


async def test_keep_last_keeps_the_newest_matching_top_level_runs(rt: Runtime) -> None:
    runs = [await rt.run(FLOW, seed(f"r{index}")) for index in range(4)]
    other = await rt.run(FLOWS / "gc_child.yaml", {"seed": "other"})
    report = await rt.gc(keep_last=2, workflow="gc-parent", grace=NO_GRACE)
    kept = {run.run_id for run in runs[2:]}
    remaining = {info.run_id for info in await rt.events.list_runs(workflow="gc-parent")}
    assert remaining == kept
    assert len(report.runs_deleted) == 4  # two runs, two sub-runs
    assert runs[0].run_id in report.runs_deleted
    assert runs[1].run_id in report.runs_deleted
    await assert_whole(rt, other.run_id)
    # Without a workflow, the newest N of every workflow together.
    await rt.gc(keep_last=1, grace=NO_GRACE)
    assert {info.run_id for info in await rt.events.list_runs()} == {other.run_id}


async def test_keep_last_and_older_than_combine(rt: Runtime) -> None:
    runs = [await rt.run(FLOW, seed(f"c{index}")) for index in range(3)]
    for run in runs[:2]:
        age(rt, await family(rt, run.run_id), days=10)
    # Two are old enough, but the newest two are kept: only the oldest goes.
    report = await rt.gc(timedelta(days=1), keep_last=2, grace=NO_GRACE)
    assert runs[0].run_id in report.runs_deleted
    remaining = {info.run_id for info in await rt.events.list_runs(workflow="gc-parent")}
    assert remaining == {runs[1].run_id, runs[2].run_id}


async def test_status_picks_which_finished_runs_go(rt: Runtime) -> None:
    done = await rt.run(FLOW, seed("done"))
    with pytest.raises(Exception, match="boom"):
        await rt.run(FLOW, seed("failed", fail=True), run_id="run_failed")
    report = await rt.gc(ALL, status={RunStatus.FAILED}, grace=NO_GRACE)
    assert "run_failed" in report.runs_deleted
    assert done.run_id not in report.runs_deleted
    await assert_gone(rt, await family(rt, "run_failed") + ["run_failed"])
    await assert_whole(rt, done.run_id)


async def test_live_crashed_and_locked_runs_are_never_touched(rt: Runtime) -> None:
    gc_funcs.GATES["live"] = asyncio.Event()
    gc_funcs.GATES["crashed"] = asyncio.Event()
    live = asyncio.create_task(rt.run(FLOW, seed("live"), run_id="run_live"))
    crashed = asyncio.create_task(rt.run(FLOW, seed("crashed"), run_id="run_crashed"))
    # Until both wait at the gate with its StepAttemptStarted committed (write-behind):
    # from then on neither writes until its gate opens.
    while not (await at_gate(rt, "run_crashed") and await at_gate(rt, "run_live")):  # noqa: ASYNC110 - polling the log, which has no event to wait on
        await asyncio.sleep(0.01)
    # Cancelled from outside with no request: the run stays "running", its lock free,
    # as a killed process leaves it.
    crashed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await crashed
    held = await rt.run(FLOW, seed("held"), run_id="run_held")
    lock = FileLock(rt.data_dir.lock_path("run", held.run_id), purpose="a test")
    assert lock.try_acquire()
    before = {run_id: await rt.events.inner.read(run_id) for run_id in ("run_live", "run_crashed")}
    give_scratch(rt, list(before))
    try:
        report = await rt.gc(ALL, grace=NO_GRACE)
    finally:
        lock.release()
    assert report.runs_deleted == ()
    assert [(kept.run_id, kept.reason) for kept in report.kept] == [("run_held", "locked")]
    for run_id, records in before.items():
        assert await rt.events.inner.read(run_id) == records
        assert rt.data_dir.run_dir(run_id).is_dir()
    await assert_whole(rt, "run_held")
    gc_funcs.GATES["live"].set()
    assert (await live).status is RunStatus.COMPLETED  # its blobs were all still there
    # Released, the held run goes.
    report = await rt.gc(ALL, grace=NO_GRACE)
    assert "run_held" in report.runs_deleted
    assert "run_live" in report.runs_deleted
    assert "run_crashed" not in report.runs_deleted


async def test_a_fresh_cancel_request_keeps_a_run_and_a_stale_one_does_not(rt: Runtime) -> None:
    fresh = await rt.run(FLOW, seed("fresh"))
    stale = await rt.run(FLOW, seed("stale"))
    await rt.kv.set(cancel_key(fresh.run_id), CancelRequest.new("just now").to_json())
    # A request from a process that died before dropping it, long ago.
    await rt.kv.set(cancel_key(stale.run_id), {"reason": None, "requestedAt": 1.0, "pid": 1})
    report = await rt.gc(ALL, grace=timedelta(minutes=5))
    assert [(kept.run_id, kept.reason) for kept in report.kept] == [
        (fresh.run_id, "cancel_requested")
    ]
    assert stale.run_id in report.runs_deleted
    await assert_gone(rt, [stale.run_id])
    assert await rt.kv.get(cancel_key(fresh.run_id)) is not None


async def test_a_fork_keeping_the_sources_sub_run_keeps_the_source(rt: Runtime) -> None:
    source = await rt.run(FLOW, seed("src"))
    fork = await rt.fork(source.run_id, at="last")  # keeps the `child` step and its sub-run
    report = await rt.gc(keep_last=1, grace=NO_GRACE)
    assert report.runs_deleted == ()
    (kept,) = report.kept
    assert (kept.run_id, kept.reason) == (source.run_id, "referenced")
    assert fork.run_id in kept.detail
    await assert_whole(rt, fork.run_id)
    # With the fork gone too, nothing holds the source.
    report = await rt.gc(ALL, grace=NO_GRACE)
    assert {source.run_id, fork.run_id} <= set(report.runs_deleted)
    assert await rt.blobs.list() == []


async def test_a_fork_that_needs_nothing_of_its_source_outlives_it(rt: Runtime) -> None:
    source = await rt.run(FLOW, seed("src"))
    fork = await rt.fork(source.run_id, at="child")  # keeps make and share only
    report = await rt.gc(keep_last=1, grace=NO_GRACE)
    assert source.run_id in report.runs_deleted
    await assert_gone(rt, list(report.runs_deleted))
    await assert_whole(rt, fork.run_id)
    # The kept steps' large outputs are the fork's own references now.
    assert {info.digest for info in await rt.blobs.list()} == await reachable(rt)


async def test_a_fork_keeps_a_source_that_made_artifacts_and_the_chain_to_it(
    rt: Runtime,
) -> None:
    source = await rt.run(FLOW, seed("art", artifact=True))
    middle = await rt.fork(source.run_id, at="child")
    last = await rt.fork(middle.run_id, at="child")
    (made,) = rt.artifacts.list(source.run_id)
    report = await rt.gc(keep_last=1, grace=NO_GRACE)
    assert report.runs_deleted == ()
    assert {(kept.run_id, kept.reason) for kept in report.kept} == {
        (source.run_id, "referenced"),
        (middle.run_id, "referenced"),
    }
    assert rt.artifacts.read_bytes(made.artifact_id) == b"made by art\n"
    await assert_whole(rt, last.run_id)


async def test_cycles_of_an_unfinished_outer_loop_stay(rt: Runtime) -> None:
    tick = Workflow(name="tick", steps=(OutputStep(id="out", value="${input.cycle}"),))

    def stop_at_two(cycle: Cycle) -> Done | Continue:
        if cycle.cycle_number == 2:
            raise RuntimeError("supervisor down")
        return Continue()

    with pytest.raises(SupervisorError, match="supervisor down") as caught:
        await rt.run_outer_loop(
            tick, {}, max_outer_cycles=3, supervise=stop_at_two, outer_loop_id="ol_gc"
        )
    assert isinstance(caught.value.__cause__, RuntimeError)
    cycles = {info.run_id for info in await rt.events.list_runs(workflow="tick")}
    assert len(cycles) == 2
    report = await rt.gc(ALL, grace=NO_GRACE)
    assert report.runs_deleted == ()
    assert {kept.run_id for kept in report.kept} == cycles
    assert {kept.reason for kept in report.kept} == {"outer_loop"}
    outcome = await rt.run_outer_loop(
        tick, {}, max_outer_cycles=3, supervise=lambda cycle: Done(1), outer_loop_id="ol_gc"
    )
    assert outcome.kind == "done"
    report = await rt.gc(ALL, grace=NO_GRACE)
    assert set(report.runs_deleted) == cycles
    assert report.kept == ()


async def test_grace_spares_a_blob_a_live_run_is_about_to_refer_to(rt: Runtime) -> None:
    await rt.run(FLOW, seed("a"))
    # What a live run does first: the blob, then (later) the event pointing at it.
    pending = await rt.blobs.put(b'"about to be referenced"')
    report = await rt.gc(keep_last=5, grace=timedelta(hours=1))
    assert report.blobs_deleted == 0
    assert await rt.blobs.has(pending.digest)
    report = await rt.gc(keep_last=5, grace=NO_GRACE)
    assert report.blobs_deleted == 1
    assert not await rt.blobs.has(pending.digest)


async def test_artifact_files_no_manifest_names_are_swept_after_the_grace(rt: Runtime) -> None:
    manifest = rt.artifacts.put("orphan.txt", b"left by a put killed before its manifest")
    (rt.artifacts.root / "manifests" / f"{manifest.artifact_id}.json").unlink()
    report = await rt.gc(keep_last=5, grace=timedelta(hours=1))
    assert report.artifact_objects_deleted == 0
    report = await rt.gc(keep_last=5, grace=NO_GRACE)
    assert report.artifact_objects_deleted == 1
    assert report.artifact_bytes_freed == manifest.size
    assert list((rt.artifacts.root / "objects").rglob("*")) == [
        path for path in (rt.artifacts.root / "objects").rglob("*") if path.is_dir()
    ]


async def test_a_dry_run_reports_what_a_real_run_then_deletes(rt: Runtime) -> None:
    await rt.run(FLOW, seed("x", artifact=True))
    await rt.run(FLOW, seed("y"))
    snapshot = {info.run_id: info.last_seq for info in await rt.events.list_runs()}
    blobs = await rt.blobs.list()
    dry = await rt.gc(ALL, grace=NO_GRACE, dry_run=True)
    assert {info.run_id: info.last_seq for info in await rt.events.list_runs()} == snapshot
    assert await rt.blobs.list() == blobs
    real = await rt.gc(ALL, grace=NO_GRACE)
    assert dry.dry_run
    assert not real.dry_run
    assert sorted(dry.runs_deleted) == sorted(real.runs_deleted)
    for name in (
        "events_deleted",
        "blobs_deleted",
        "blob_bytes_freed",
        "artifacts_deleted",
        "artifact_objects_deleted",
        "artifact_bytes_freed",
    ):
        assert getattr(dry, name) == getattr(real, name), name
    assert real.artifacts_deleted == 1


async def test_bad_limits_are_refused_before_anything_is_deleted(rt: Runtime) -> None:
    await rt.run(FLOW, seed("safe"))
    with pytest.raises(ConfigError) as needs:
        await rt.gc()
    assert needs.value.code == "gc_needs_a_limit"
    with pytest.raises(ConfigError) as status:
        await rt.gc(ALL, status={RunStatus.RUNNING})
    assert status.value.code == "gc_invalid_status"
    with pytest.raises(ConfigError):
        await rt.gc(keep_last=-1)
    assert len(await rt.events.list_runs()) == 2


def test_the_report_is_frozen() -> None:
    report = GcReport(
        dry_run=False,
        runs_deleted=(),
        events_deleted=0,
        blobs_deleted=0,
        blob_bytes_freed=0,
        artifacts_deleted=0,
        artifact_objects_deleted=0,
        artifact_bytes_freed=0,
        kept=(),
    )
    with pytest.raises(AttributeError):
        report.events_deleted = 1  # type: ignore[misc]
    assert report.to_json()["runsDeleted"] == []


@pytest.mark.postgres
async def test_gc_on_postgres_deletes_events_and_sweeps_blobs(
    tmp_path: Path, postgres_url: str
) -> None:
    async with Runtime(tmp_path / "data", store=postgres_url) as pg:
        old = await pg.run(FLOW, seed("pg-old", artifact=True))
        new = await pg.run(FLOW, seed("pg-new"))
        fork = await pg.fork(new.run_id, at="last")  # refers to new's sub-run
        old_family = await family(pg, old.run_id)
        pending = await pg.blobs.put(b'"a live run is about to refer to this"')
        report = await pg.gc(keep_last=1, grace=timedelta(hours=1))
        assert sorted(report.runs_deleted) == sorted(old_family)
        assert [(kept.run_id, kept.reason) for kept in report.kept] == [(new.run_id, "referenced")]
        await assert_gone(pg, old_family)
        for run_id in (*await family(pg, new.run_id), fork.run_id):
            await assert_whole(pg, run_id)
        # The grace spared everything just written; without it, what no event reaches goes.
        assert report.blobs_deleted == 0
        assert await pg.blobs.has(pending.digest)
        report = await pg.gc(keep_last=1, grace=NO_GRACE)
        assert report.runs_deleted == ()
        assert report.blobs_deleted > 0
        assert {info.digest for info in await pg.blobs.list()} == await reachable(pg)
        assert not await pg.blobs.has(pending.digest)


async def test_a_collection_with_nothing_to_delete_or_sweep_reads_no_log(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = Workflow(name="plain", steps=(OutputStep(id="out", value="${input.n}"),))
    for n in range(30):
        await rt.run(plain, {"n": n}, run_id=f"run_{n:02d}")
    assert await rt.blobs.list() == []
    inner = rt.events.inner
    reads: list[str] = []
    read = inner.read

    async def counted(run_id: str, **page: Any) -> Any:
        reads.append(run_id)
        return await read(run_id, **page)

    monkeypatch.setattr(inner, "read", counted)
    report = await rt.gc(timedelta(days=30), grace=NO_GRACE)
    assert report.runs_deleted == ()
    # Nothing is old and no blob is stored: which run needs which, and which blob is
    # reached, are questions without an answer to change. At a million runs each of them
    # read every log.
    assert reads == []
    old = ["run_00", "run_01"]
    age(rt, old, 60)
    report = await rt.gc(timedelta(days=30), grace=NO_GRACE)
    assert sorted(report.runs_deleted) == old
    assert set(reads) >= {f"run_{n:02d}" for n in range(2, 30)}  # checked for references
