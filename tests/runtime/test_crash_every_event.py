"""Kill the process right after every event commit of a representative run; resume; compare.

The workflow has a map over three items, a sub-workflow, and a decision loop that visits
twice. For every N from 1 to the run's event count, a real child process runs it with
the crash switch set to N and dies by ``os._exit`` right after the N-th commit; a second
process resumes it. Every resume must end with the uncrashed run's output, and the step
functions, which count their calls in a file outside the process, must never be called
again for a step whose ``StepCompleted`` was committed; only steps in flight at the
crash may run twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from little_workflow.runtime import CRASH_ENV, CRASH_EXIT_CODE
from tests.storage.raw_sqlite import event_json

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "tests" / "runtime" / "flows" / "review.yaml"
INPUT = json.dumps({"query": "senior engineers"})


def cli(
    data_dir: Path, calls: Path, *args: str, crash: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LW_TEST_CALLS": str(calls)}
    env.pop(CRASH_ENV, None)
    if crash is not None:
        env[CRASH_ENV] = str(crash)
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_calls(calls: Path) -> list[tuple[str, str]]:
    if not calls.exists():
        return []
    return [tuple(line.split()[:2]) for line in calls.read_text().splitlines()]  # type: ignore[misc]


def log_facts(data_dir: Path) -> tuple[int, set[tuple[str, str]], set[tuple[str, str]]]:
    """(event count, completed (run, path)s, started-but-not-completed (run, path)s)."""
    conn = sqlite3.connect(data_dir / "little-workflow.db")
    try:
        rows = conn.execute("SELECT run_id, type, data FROM events").fetchall()
    finally:
        conn.close()
    completed: set[tuple[str, str]] = set()
    started: set[tuple[str, str]] = set()
    for run_id, type_name, data in rows:
        if type_name in ("StepCompleted", "StepAttemptStarted"):
            path = event_json(data)["stepPath"]
            (completed if type_name == "StepCompleted" else started).add((run_id, path))
    return len(rows), completed, started - completed


@pytest.mark.slow
def test_crash_at_every_event_boundary_then_resume(tmp_path: Path) -> None:
    reference_dir, reference_calls = tmp_path / "reference", tmp_path / "reference-calls"
    reference = cli(
        reference_dir,
        reference_calls,
        "run",
        str(WORKFLOW),
        "--input",
        INPUT,
        "--run-id",
        "run_crash",
    )
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)
    total_events, reference_completed, _ = log_facts(reference_dir)
    reference_counts = Counter(read_calls(reference_calls))
    assert set(reference_counts.values()) == {1}
    assert len(reference_counts) == 8  # fetch, 3 workers, total, judge x2, revise
    assert total_events >= 25  # an attempt and a completion per step, and the runs' own

    for n in range(1, total_events + 1):
        data_dir, calls = tmp_path / f"crash-{n:03d}", tmp_path / f"calls-{n:03d}"
        crashed = cli(
            data_dir,
            calls,
            "run",
            str(WORKFLOW),
            "--input",
            INPUT,
            "--run-id",
            "run_crash",
            crash=n,
        )
        assert crashed.returncode == CRASH_EXIT_CODE, (n, crashed.stderr)
        before = read_calls(calls)
        events_at_crash, committed, _ = log_facts(data_dir)
        assert events_at_crash >= n

        resumed = cli(data_dir, calls, "resume", "run_crash")
        assert resumed.returncode == 0, (n, resumed.stderr)
        assert json.loads(resumed.stdout) == expected, n

        after = read_calls(calls)[len(before) :]
        assert not set(after) & committed, (n, set(after) & committed)
        # Only steps in flight at the crash run again: invoked but not committed. The run
        # is sequential but for the map, whose three branches may all be in flight.
        twice = {call for call in after if call in set(before)}
        assert twice <= set(before) - committed
        assert len([call for call in twice if "[" not in call[1]]) <= 1, (n, twice)
        assert len(twice) <= 3, (n, twice)
        # Nothing ran more than twice, and every step ran at least once in all.
        counts = Counter(before + after)
        assert max(counts.values()) <= 2, n
        assert len(counts) == len(reference_counts), n
        # The completed log equals the uncrashed run's, step for step.
        _, final_completed, final_in_flight = log_facts(data_dir)
        assert {path for _, path in final_completed} == {path for _, path in reference_completed}
        assert not final_in_flight, n
