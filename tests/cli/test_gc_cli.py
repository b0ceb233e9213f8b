"""``little-workflow gc``: options, output, and a collection SIGKILLed mid-way, then rerun.

The kill tests run the real command in a child process with ``LITTLE_WORKFLOW_FAULT``
naming a point of the collection, where it SIGKILLs itself; then they check that what
remains is consistent (every remaining run's payloads resolve and it replays) and that
the next ``gc`` leaves nothing of the deleted runs behind.
"""

from __future__ import annotations

import json
import signal
from datetime import timedelta
from pathlib import Path

import pytest

from little_workflow.runtime import FAULT_ENV, Runtime
from little_workflow.runtime._gc import PENDING_PREFIX
from little_workflow.storage import payload_refs, referenced_digests
from tests.runtime.support import FLOWS, cli

FLOW = FLOWS / "gc_parent.yaml"


async def _populate(data: Path, count: int = 3) -> set[str]:
    """``count`` finished runs (each with a sub-run, blobs, an artifact) and a fork that
    needs one of them; returns every run id."""
    async with Runtime(data) as rt:
        for index in range(count):
            await rt.run(FLOW, {"seed": f"k{index}", "artifact": True, "fail": False})
        source = (await rt.events.list_runs(workflow="gc-parent"))[-1]
        await rt.fork(source.run_id, at="last")
        return {info.run_id for info in await rt.events.list_runs()}


async def _consistent(data: Path) -> set[str]:
    """Assert every remaining run is whole; return the remaining run ids."""
    async with Runtime(data) as rt:
        remaining = set()
        refs = []
        for info in await rt.events.list_runs():
            remaining.add(info.run_id)
            await rt.events.read(info.run_id)  # every payload resolves
            assert (await rt.replay(info.run_id)).unreached == ()
            for record in await rt.events.inner.read(info.run_id):
                refs.extend(payload_refs(record.event))
            for manifest in rt.artifacts.list(info.run_id):
                assert rt.artifacts.read_bytes(manifest.artifact_id)
        await referenced_digests(refs, rt.blobs)  # every chain is whole
        return remaining


async def _clean(data: Path, deleted: set[str]) -> None:
    async with Runtime(data) as rt:
        assert await rt.kv.list(PENDING_PREFIX) == []
        manifests = rt.artifacts.list()
        for run_id in deleted:
            assert await rt.events.get_run(run_id) is None
            assert not rt.data_dir.run_dir(run_id).exists()
            assert all(manifest.run_id != run_id for manifest in manifests)
        # Grace 0: nothing left that no remaining run reaches.
        refs = []
        for info in await rt.events.list_runs():
            for record in await rt.events.inner.read(info.run_id):
                refs.extend(payload_refs(record.event))
        reachable = await referenced_digests(refs, rt.blobs)
        assert {info.digest for info in await rt.blobs.list()} == reachable
        objects = {p.name for p in (rt.artifacts.root / "objects").rglob("*") if p.is_file()}
        assert objects == {manifest.sha256 for manifest in manifests}


@pytest.mark.parametrize(
    "fault",
    ["gc.after_events", "gc.after_family#2", "gc.after_manifests", "gc.before_sweep"],
)
async def test_a_gc_killed_mid_way_leaves_only_what_the_next_gc_removes(
    tmp_path: Path, fault: str
) -> None:
    data = tmp_path / "data"
    everything = await _populate(data)
    killed = cli(data, "gc", "--keep-last", "1", "--grace", "0s", env={FAULT_ENV: fault})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    remaining = await _consistent(data)
    assert remaining < everything  # the kill came after something was deleted
    done = cli(data, "gc", "--keep-last", "1", "--grace", "0s", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    after = await _consistent(data)
    # The fork's source stays (the fork needs its artifacts), with the fork.
    assert len(after) == 3  # the source, its sub-run, the fork
    assert {kept["reason"] for kept in report["kept"]} == {"referenced"}
    await _clean(data, everything - after)


async def test_summary_json_and_dry_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    everything = await _populate(data, count=2)
    dry = cli(data, "gc", "--keep-last", "1", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.startswith("would delete 2 run(s) (")
    assert await _consistent(data) == everything
    real = cli(data, "gc", "--keep-last", "1", "--grace", "0s", "--json")
    report = json.loads(real.stdout)
    assert report["dryRun"] is False
    assert len(report["runsDeleted"]) == 2
    assert report["blobsDeleted"] > 0
    assert report["artifactsDeleted"] == 1
    again = cli(data, "gc", "--older-than", "30d", "--status", "failed")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("deleted 0 run(s) (0 events)")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "gc needs a limit"),
        (("--older-than", "30"), "is not a duration"),
        (("--older-than", "3x"), "is not a duration"),
        (("--older-than", "-1d"), "is not a duration"),
        (("--keep-last", "-1"), "-1"),
        (("--older-than", "1d", "--grace", "soon"), "is not a duration"),
        (("--older-than", "1d", "--status", "running"), "running"),
    ],
)
def test_bad_options_are_usage_errors(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    result = cli(tmp_path / "data", "gc", *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was opened, let alone deleted


def test_durations_parse() -> None:
    from little_workflow.cli._gc import Duration

    parse = Duration().convert
    assert parse("30d", None, None) == timedelta(days=30)
    assert parse("12h", None, None) == timedelta(hours=12)
    assert parse("90m", None, None) == timedelta(minutes=90)
    assert parse("1.5w", None, None) == timedelta(weeks=1.5)
    assert parse("0s", None, None) == timedelta(0)
