"""GC removes only unreachable data: seeded random interleavings of runs, forks and GC.

Each seed drives one real SQLite data directory through a random sequence of: runs that
complete or fail (large outputs, so blobs exist; some make artifacts; each has a
sub-run), forks of finished runs at random steps, live runs (an async step holds them,
their lock held), runs left unfinished as a killed process leaves them, cancellations,
runs made old, and collections with random parameters. After every collection:

* every remaining run's payloads resolve, and every finished one replays;
* every deleted run has no events, no index row, no scratch directory, no artifacts;
* no remaining run names a deleted one (a sub-run, a fork's source that made artifacts);
* no blob or artifact file is unreachable beyond the grace rule, none reachable is gone;
* live and unfinished runs are untouched, byte for byte;
* ``keep_last``'s newest runs stay, and a collection of everything keeps only what it
  reports as kept.

The seeds are fixed, so CI runs the same interleavings every time.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import InvalidForkPointError, RunFailedError
from little_workflow.events import RecordedEvent, RunStarted, RunStatus, SubRunStarted
from little_workflow.runtime import GcReport, RunResult, Runtime
from little_workflow.runtime._gc import FINISHED
from little_workflow.storage import RunInfo, payload_refs, referenced_digests
from tests.runtime.flows import gc_funcs
from tests.runtime.support import FLOWS
from tests.runtime.test_gc import at_gate, give_scratch
from tests.storage.raw_sqlite import row_checksum

FLOW = FLOWS / "gc_parent.yaml"
STEPS = 14


@dataclass
class World:
    rt: Runtime
    rng: random.Random
    count: int = 0
    #: Runs held live: run id -> (task, seed).
    live: dict[str, tuple[asyncio.Task[RunResult], str]] = field(default_factory=dict)
    #: Runs left unfinished and unlocked.
    crashed: set[str] = field(default_factory=set)

    def seed(self) -> str:
        self.count += 1
        return f"s{self.count}"


async def _start_held(world: World) -> tuple[str, str, asyncio.Task[RunResult]]:
    seed = world.seed()
    gc_funcs.GATES[seed] = asyncio.Event()
    run_id = f"run_{seed}"
    task = asyncio.create_task(
        world.rt.run(
            FLOW, {"seed": seed, "artifact": world.rng.random() < 0.3, "fail": False}, run_id=run_id
        )
    )
    # Until the step's write-behind StepAttemptStarted is committed: from then on the run
    # writes nothing until its gate opens, so "untouched" can be checked byte for byte.
    while seed not in gc_funcs.ENTERED or not await at_gate(world.rt, run_id):  # noqa: ASYNC110 - polling the log, which has no event to wait on
        await asyncio.sleep(0.005)
    return seed, run_id, task


async def op_run(world: World) -> None:
    seed = world.seed()
    fail = world.rng.random() < 0.25
    data = {"seed": seed, "artifact": world.rng.random() < 0.3, "fail": fail}
    try:
        await world.rt.run(FLOW, data, run_id=f"run_{seed}")
    except RunFailedError:
        assert fail


async def op_fork(world: World) -> None:
    sources = [
        info
        for info in await world.rt.events.list_runs(workflow="gc-parent")
        if info.status in FINISHED and info.run_id not in world.live
    ]
    if not sources:
        return
    source = world.rng.choice(sorted(sources, key=lambda info: info.run_id))
    try:
        at = world.rng.choice(["share", "child", "wait", "last", "last"])
        await world.rt.fork(source.run_id, at=at)
    except (InvalidForkPointError, RunFailedError):
        pass  # not reached by that source, or the fork failed like its source: both fine


async def op_live(world: World) -> None:
    seed, run_id, task = await _start_held(world)
    world.live[run_id] = (task, seed)


async def op_crash(world: World) -> None:
    seed, run_id, task = await _start_held(world)
    task.cancel()  # no request: the run stays "running" with its lock free
    with pytest.raises(asyncio.CancelledError):
        await task
    gc_funcs.GATES[seed].set()  # a fork of it (never: it is unfinished) would pass
    world.crashed.add(run_id)


async def op_finish(world: World) -> None:
    if not world.live:
        return
    run_id = world.rng.choice(sorted(world.live))
    task, seed = world.live.pop(run_id)
    gc_funcs.GATES[seed].set()
    assert (await task).status is RunStatus.COMPLETED


async def op_cancel(world: World) -> None:
    if not world.live:
        return
    run_id = world.rng.choice(sorted(world.live))
    task, seed = world.live.pop(run_id)
    await world.rt.cancel(run_id, wait=10)
    with pytest.raises(RunFailedError):
        await task
    gc_funcs.GATES[seed].set()


async def op_age(world: World) -> None:
    runs = await world.rt.events.list_runs()
    if not runs:
        return
    chosen = world.rng.choice(sorted(runs, key=lambda info: info.run_id)).run_id
    infos = {info.run_id: info for info in runs}
    top = roots(infos)
    with sqlite3.connect(world.rt.data_dir.database) as conn:
        # The rows' checksums cover their time: resealed, as if written back then.
        conn.create_function("lw_checksum", 5, row_checksum, deterministic=True)
        for run_id in infos:
            if top[run_id] == top[chosen]:
                conn.execute(
                    "UPDATE events SET ts = ts - 864000, "
                    "checksum = lw_checksum(run_id, seq, type, ts - 864000, data) "
                    "WHERE run_id = ?",
                    (run_id,),
                )


async def stored(rt: Runtime) -> dict[str, list[RecordedEvent]]:
    return {
        info.run_id: await rt.events.inner.read(info.run_id) for info in await rt.events.list_runs()
    }


def roots(runs: dict[str, RunInfo]) -> dict[str, str]:
    def root(run_id: str) -> str:
        while (parent := runs[run_id].parent_run_id) is not None and parent in runs:
            run_id = parent
        return run_id

    return {run_id: root(run_id) for run_id in runs}


async def op_gc(world: World) -> None:
    rt, rng = world.rt, world.rng
    older_than = rng.choice([None, timedelta(0), timedelta(0), timedelta(days=1)])
    keep_last = rng.choice([None, None, 0, 1, 2])
    if older_than is None and keep_last is None:
        keep_last = 1
    status = set(FINISHED)
    if rng.random() < 0.3:
        status = set(rng.sample(sorted(FINISHED), rng.randint(1, 2)))
    workflow = rng.choice([None, None, None, "gc-parent"])
    grace = rng.choice([timedelta(0), timedelta(hours=1)])
    before = await stored(rt)
    infos = {info.run_id: info for info in await rt.events.list_runs()}
    give_scratch(rt, list(infos))
    artifact_runs = {manifest.run_id for manifest in rt.artifacts.list()}
    blobs_before = {info.digest for info in await rt.blobs.list()}

    report = await rt.gc(
        older_than, status=status, keep_last=keep_last, workflow=workflow, grace=grace
    )
    await check(world, report, before, infos, artifact_runs, blobs_before, grace)
    top = roots(infos)
    matching = sorted(
        (
            run_id
            for run_id, root in top.items()
            if run_id == root
            and infos[run_id].status in status
            and (workflow is None or infos[run_id].workflow == workflow)
        ),
        key=lambda run_id: max(
            infos[member].updated_at for member in infos if top[member] == run_id
        ),
        reverse=True,
    )
    if keep_last is not None:
        # The newest keep_last matching runs all stay.
        for run_id in matching[:keep_last]:
            assert run_id not in report.runs_deleted
    if older_than == timedelta(0) and keep_last is None and status == FINISHED and workflow is None:
        # A collection of everything keeps only what it says it kept.
        kept = {kept.run_id for kept in report.kept}
        for info in await rt.events.list_runs():
            if info.status in FINISHED and top.get(info.run_id) == info.run_id:
                assert info.run_id in kept, info


async def check(
    world: World,
    report: GcReport,
    before: dict[str, list[RecordedEvent]],
    infos: dict[str, RunInfo],
    artifact_runs: set[str | None],
    blobs_before: set[str],
    grace: timedelta,
) -> None:
    rt = world.rt
    deleted = set(report.runs_deleted)
    top = roots(infos)
    manifests = rt.artifacts.list()
    named = {manifest.run_id for manifest in manifests}
    for run_id in deleted:
        assert infos[run_id].status in FINISHED
        assert run_id not in world.live
        assert run_id not in world.crashed
        assert top[run_id] in deleted  # never a sub-run without its top-level run
        assert await rt.events.get_run(run_id) is None
        assert await rt.events.inner.read(run_id) == []
        assert not rt.data_dir.run_dir(run_id).exists()
        assert run_id not in named
    after = await stored(rt)
    assert set(after) == set(before) - deleted
    refs = []
    for run_id, records in after.items():
        assert records == before[run_id]  # nothing remaining was changed
        for record in records:
            refs.extend(payload_refs(record.event))
            event = record.event
            if isinstance(event, SubRunStarted):
                assert event.sub_run_id not in deleted
            if isinstance(event, RunStarted) and event.forked_from is not None:
                source = event.forked_from.run_id
                if source in deleted:
                    family = {r for r in infos if top[r] == top[source]}
                    assert not family & artifact_runs, "a fork lost its source's artifacts"
        await rt.events.read(run_id)  # every payload resolves
        if infos[run_id].status in FINISHED and run_id not in world.live:
            assert (await rt.replay(run_id)).unreached == ()
    reachable = await referenced_digests(refs, rt.blobs)
    present = {info.digest for info in await rt.blobs.list()}
    assert reachable <= present
    assert present <= blobs_before
    if grace == timedelta(0):
        # Nothing was being written: whatever no remaining event reaches is gone.
        assert present == reachable
        objects = {
            path.name for path in (rt.artifacts.root / "objects").rglob("*") if path.is_file()
        }
        assert objects == {manifest.sha256 for manifest in manifests}
        assert all(manifest.run_id in after for manifest in manifests)
    for run_id in [*world.live, *world.crashed]:
        assert rt.data_dir.run_dir(run_id).is_dir()


OPS: list[tuple[Any, int]] = [
    (op_run, 5),
    (op_fork, 3),
    (op_live, 1),
    (op_crash, 1),
    (op_finish, 1),
    (op_cancel, 1),
    (op_age, 2),
    (op_gc, 3),
]


@pytest.mark.parametrize("seed", range(12))
async def test_gc_removes_only_unreachable_data(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    functions = [op for op, _ in OPS]
    weights = [weight for _, weight in OPS]
    async with Runtime(tmp_path / "data") as rt:
        world = World(rt, rng)
        try:
            for _ in range(STEPS):
                await rng.choices(functions, weights)[0](world)
            await op_gc(world)
            for run_id in sorted(world.live):
                task, gate = world.live.pop(run_id)
                gc_funcs.GATES[gate].set()
                await task
            await op_gc(world)
        finally:
            for task, gate in world.live.values():
                gc_funcs.GATES[gate].set()
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            gc_funcs.GATES.clear()
            gc_funcs.ENTERED.clear()
