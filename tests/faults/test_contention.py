"""SQLite under contention: 50 runs at once in one data directory, from five processes.

Five real processes (``contention_driver``), each with its own ``Runtime`` on the same
data directory's default SQLite store and default busy timeout, start together and run
ten runs each at once: twelve steps that commit one by one, then a map whose branches
group their commits. Every run must complete with its output; no ``database is
locked`` and no ``StorageBusyError`` may reach a caller or the processes' output; and
every run's log must hold the same events as a run of the same workflow made alone
(seqs 1..n, the same multiset of event types and step paths).
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from little_workflow.events import RecordedEvent, RunStatus
from little_workflow.runtime import RunResult, Runtime
from little_workflow.storage import RunInfo
from tests.faults.contention_driver import FLOW, ITEMS

pytestmark = pytest.mark.timeout(90)

REPO = Path(__file__).resolve().parents[2]
PROCESSES = 5
RUNS_EACH = 10


def _shape(records: list[RecordedEvent]) -> collections.Counter[tuple[str, str | None]]:
    """Each (event type, step path) with its count: what the log holds, in any order."""
    return collections.Counter(
        (record.type, getattr(record.event, "step_path", None)) for record in records
    )


def _expected_output(start: int) -> dict[str, int]:
    return {"chain": start + sum(range(1, 13)), "sum": 2 * sum(ITEMS)}


async def _run_alone(data_dir: Path) -> tuple[RunResult, list[RecordedEvent]]:
    async with Runtime(data_dir) as rt:
        result = await rt.run(FLOW, {"start": 0, "items": ITEMS}, run_id="alone")
        return result, await rt.events.read("alone")


async def _read_logs(data_dir: Path) -> tuple[dict[str, list[RecordedEvent]], list[RunInfo]]:
    async with Runtime(data_dir) as rt:
        logs = {
            f"p{process}-{index}": await rt.events.read(f"p{process}-{index}")
            for process in range(PROCESSES)
            for index in range(RUNS_EACH)
        }
        return logs, await rt.events.list_runs()


def test_fifty_runs_in_five_processes_lose_nothing_and_never_see_a_lock(tmp_path: Path) -> None:
    # The same workflow alone: the events every contended run must have.
    alone, alone_events = asyncio.run(_run_alone(tmp_path / "alone"))
    assert alone.output == _expected_output(0)
    expected_shape = _shape(alone_events)

    data_dir = tmp_path / "shared"
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.faults.contention_driver",
                str(data_dir),
                f"p{index}",
                str(RUNS_EACH),
                str(go),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for index in range(PROCESSES)
    ]
    # Once every process has opened the store, all start writing at once.
    deadline = time.monotonic() + 30
    while not all(go.with_name(f"go.p{index}.ready").exists() for index in range(PROCESSES)):
        assert all(child.poll() is None for child in children), "a process ended early"
        assert time.monotonic() < deadline, "the processes did not get ready"
        time.sleep(0.02)
    go.touch()
    outputs = [child.communicate(timeout=60) for child in children]

    results: dict[str, dict[str, object]] = {}
    for child, (stdout, stderr) in zip(children, outputs, strict=True):
        text = stdout.decode() + stderr.decode()
        assert "database is locked" not in text
        assert "StorageBusyError" not in text
        assert child.returncode == 0, text
        for line in stdout.decode().splitlines():
            record = json.loads(line)
            if "run_id" in record:
                results[record["run_id"]] = record
    assert len(results) == PROCESSES * RUNS_EACH
    failures = [record for record in results.values() if "error" in record]
    assert failures == []
    for process in range(PROCESSES):
        for index in range(RUNS_EACH):
            record = results[f"p{process}-{index}"]
            assert record["status"] == "completed"
            assert record["output"] == _expected_output(index)

    logs, runs = asyncio.run(_read_logs(data_dir))
    assert len(runs) == PROCESSES * RUNS_EACH
    assert {info.run_id for info in runs} == set(logs)
    assert all(info.status is RunStatus.COMPLETED for info in runs)
    for run_id, events in logs.items():
        assert [record.seq for record in events] == list(range(1, len(events) + 1)), run_id
        assert len(events) == len(alone_events), run_id
        assert _shape(events) == expected_shape, run_id
    # The processes did write at the same time: every one's span of commits overlaps
    # every other's.
    spans = [
        (
            min(logs[f"p{process}-{index}"][0].ts for index in range(RUNS_EACH)),
            max(logs[f"p{process}-{index}"][-1].ts for index in range(RUNS_EACH)),
        )
        for process in range(PROCESSES)
    ]
    assert max(first for first, _ in spans) < min(last for _, last in spans)
