"""Workers in one process, on the real PostgreSQL server: submit, claim, drive, finish.

The multi-process proof (SIGKILL, SIGSTOP past the lease) is in ``test_worker_processes``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from little_workflow.errors import ConfigError
from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime, Worker
from tests.workers.support import FLOW, until
from tests.workers.support import calls as calls_of

pytestmark = pytest.mark.postgres


async def _all_done(runtime: Runtime, run_ids: list[str], timeout: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        entries = [await runtime.queue.get(run_id) for run_id in run_ids]
        if all(entry is not None and entry.state == "done" for entry in entries):
            return
        assert loop.time() < deadline, [e.state if e else None for e in entries]
        await asyncio.sleep(0.05)


async def test_two_workers_drive_every_submitted_run_once(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.01")
    inputs = {f"run_{index:02d}": list(range(index % 5 + 1)) for index in range(12)}
    async with (
        Runtime(tmp_path / "submitter", store=postgres_url) as submitter,
        Runtime(tmp_path / "a", store=postgres_url) as host_a,
        Runtime(tmp_path / "b", store=postgres_url) as host_b,
    ):
        for run_id, items in inputs.items():
            assert await submitter.submit(FLOW, {"items": items}, run_id=run_id) == run_id
        # Submitting again (a submit retried after a crash) changes nothing.
        assert await submitter.submit(FLOW, {"items": inputs["run_00"]}, run_id="run_00")
        with pytest.raises(ConfigError, match="already exists with other input"):
            await submitter.submit(FLOW, {"items": [9]}, run_id="run_00")
        workers = [
            Worker(host, concurrency=3, lease_seconds=5, poll_interval=0.02)
            for host in (host_a, host_b)
        ]
        tasks = [asyncio.create_task(worker.run()) for worker in workers]
        await _all_done(submitter, list(inputs), timeout=60)
        for worker in workers:
            worker.stop()
        reports = await asyncio.gather(*tasks)
        for run_id, items in inputs.items():
            state = await submitter.get_state(run_id)
            assert state.output == sum(item * item for item in items)
            entry = await submitter.queue.get(run_id)
            assert entry is not None
            assert entry.outcome == "completed"
            completed = [
                record.event
                for record in await submitter.events.read(run_id)
                if isinstance(record.event, StepCompleted)
            ]
            paths = [event.step_path for event in completed]
            assert len(paths) == len(set(paths))
        # Every step ran exactly once, whichever worker ran it.
        counted = calls_of(calls)
        assert sum(counted.values()) == sum(len(items) + 1 for items in inputs.values())
        assert set(counted.values()) == {1}
        assert sum(report.finished.get("completed", 0) for report in reports) == len(inputs)
        assert all(report.leases_lost == 0 for report in reports)
        assert all(report.worker_id in {w.worker_id for w in workers} for report in reports)
        listed = await submitter.queue.workers(include_stopped=True)
        assert {info.worker_id for info in listed} >= {w.worker_id for w in workers}
        assert all(info.stopped_at is not None for info in listed)


async def test_a_stopped_worker_gives_its_runs_back(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.3")
    async with (
        Runtime(tmp_path / "a", store=postgres_url) as host_a,
        Runtime(tmp_path / "b", store=postgres_url) as host_b,
    ):
        await host_a.submit(FLOW, {"items": [1, 2, 3, 4, 5, 6, 7, 8]}, run_id="run_slow")
        first = Worker(host_a, concurrency=1, lease_seconds=30, poll_interval=0.02)
        task = asyncio.create_task(first.run())
        await until(lambda: bool(calls_of(calls)))
        first.stop()
        report = await task
        assert report.released == 1
        entry = await host_a.queue.get("run_slow")
        assert entry is not None
        assert entry.state == "queued"
        # Released, not expired: another worker takes it at once, long before 30 s.
        second = Worker(host_b, concurrency=1, lease_seconds=30, poll_interval=0.02)
        assert (await asyncio.wait_for(second.run(max_runs=1), 30)).finished == {"completed": 1}
        assert (await host_b.get_state("run_slow")).output == sum(i * i for i in range(1, 9))
        # What the first worker had committed was not run again.
        counted = calls_of(calls)
        assert max(counted.values()) <= 2
        assert sum(counted.values()) - 9 <= 4  # at most its in-flight branches, re-run


async def test_submit_needs_a_store_with_a_queue(tmp_path: Path) -> None:
    # SQLite and PostgreSQL have one; the in-memory store, which no worker could reach,
    # does not.
    async with Runtime(tmp_path / "local", store="memory:") as runtime:
        with pytest.raises(ConfigError, match="has no run queue; submit and workers need"):
            await runtime.submit(FLOW, {"items": [1]}, run_id="run_x")
        assert await runtime.events.read("run_x") == []
        assert await runtime.events.list_runs() == []


async def test_cancel_reaches_a_run_on_a_worker_of_another_host(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.2")
    async with (
        Runtime(tmp_path / "a", store=postgres_url) as host_a,
        Runtime(tmp_path / "b", store=postgres_url) as host_b,
    ):
        await host_a.submit(FLOW, {"items": list(range(40))}, run_id="run_long")
        worker = Worker(host_a, concurrency=1, lease_seconds=30, poll_interval=0.02)
        task = asyncio.create_task(worker.run(max_runs=1))
        await until(lambda: bool(calls_of(calls)))
        # host_b shares no file with host_a: only the store tells it a worker holds the run.
        outcome = await host_b.cancel("run_long", reason="enough", wait=10)
        assert outcome.status.value == "cancelled"
        assert outcome.recorded_by_owner
        report = await asyncio.wait_for(task, 10)
        assert report.finished == {"cancelled": 1}
        entry = await host_b.queue.get("run_long")
        assert entry is not None
        assert (entry.state, entry.outcome) == ("done", "cancelled")
        assert sum(calls_of(calls).values()) < 40


async def test_cancel_settles_a_queued_run_so_no_worker_claims_it(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Runtime(tmp_path / "a", store=postgres_url) as host:
        await host.submit(FLOW, {"items": [1, 2]}, run_id="run_queued")
        outcome = await host.cancel("run_queued", wait=1)
        assert outcome.status.value == "cancelled"
        assert not outcome.recorded_by_owner
        entry = await host.queue.get("run_queued")
        assert entry is not None
        assert (entry.state, entry.outcome) == ("done", "cancelled")
        assert await host.queue.claim("w", limit=5, lease_seconds=5) == []


async def test_runs_stuck_lists_a_run_whose_worker_lease_expired(
    postgres_url: str, tmp_path: Path
) -> None:
    import subprocess
    import sys

    async with Runtime(tmp_path / "a", store=postgres_url) as host:
        await host.submit(FLOW, {"items": [1]}, run_id="run_orphan")
        await host.submit(FLOW, {"items": [2]}, run_id="run_waiting")
        # A worker that claimed one run and died: nobody renews its lease.
        (claim,) = await host.queue.claim("w_dead", limit=1, lease_seconds=0.2)
        assert claim.run_id == "run_orphan"
        await asyncio.sleep(0.4)
    command = [
        sys.executable, "-m", "little_workflow", "--data-dir", str(tmp_path / "b"),
        "--store", postgres_url, "runs", "--stuck", "--json",
    ]  # fmt: skip
    listed = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
    )
    assert listed.returncode == 0, listed.stderr
    found = json.loads(listed.stdout)
    assert [(item["runId"], item["reason"], item["workerId"]) for item in found] == [
        ("run_orphan", "lease_expired", "w_dead")
    ]


async def test_a_lone_worker_with_one_slot_drives_the_sub_runs_it_queued(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LW_TEST_CALLS", str(calls))
    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.01")
    spread = Path(__file__).with_name("spread.yaml")
    async with Runtime(tmp_path / "a", store=postgres_url) as host:
        await host.submit(spread, {"items": [1, 2, 3, 4]}, run_id="run_spread")
        worker = Worker(host, concurrency=1, lease_seconds=10, poll_interval=0.02)
        report = await asyncio.wait_for(worker.run(max_runs=1), 60)
        assert report.finished == {"completed": 1}
        assert (await host.get_state("run_spread")).output == [1, 4, 9, 16]
        state = await host.get_state("run_spread")
        children = [record.sub_run_id for record in state.steps.values() if record.sub_run_id]
        assert len(children) == 4
        for child in children:
            assert child is not None
            entry = await host.queue.get(child)
            assert entry is not None
            # Queued for any worker, then driven by the parent's own (nobody else came).
            assert (entry.state, entry.outcome, entry.worker_id) == (
                "done",
                "completed",
                worker.worker_id,
            )
    assert sum(calls_of(calls).values()) == 4


async def test_gc_deletes_a_finished_runs_queue_row_and_keeps_a_queued_one(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    monkeypatch.setenv("LW_TEST_STEP_SECONDS", "0.01")
    async with Runtime(tmp_path / "a", store=postgres_url) as host:
        await host.submit(FLOW, {"items": [1]}, run_id="run_old")
        worker = Worker(host, concurrency=1, lease_seconds=10, poll_interval=0.02)
        assert (await asyncio.wait_for(worker.run(max_runs=1), 30)).finished == {"completed": 1}
        await host.submit(FLOW, {"items": [2]}, run_id="run_waiting")
        report = await host.gc(timedelta(0))
        assert "run_old" in report.runs_deleted
        assert await host.queue.get("run_old") is None
        entry = await host.queue.get("run_waiting")
        assert entry is not None
        assert entry.state == "queued"
