"""The README's first command: ``little-workflow demo`` kills a real process and resumes it."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from pathlib import Path


def test_demo_kills_resumes_and_its_counts_match_the_log(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "little_workflow", "demo", "--speed", "0.3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "SIGKILL" in text
    assert "the output equals an uncrashed run's, and no committed step ran twice" in text

    run_id = re.search(r"run id\s+(demo_\w+)", text)
    assert run_id is not None
    data = tmp_path / ".little-workflow"
    conn = sqlite3.connect(data / "little-workflow.db")
    try:
        types = [
            (kind, json.loads(payload))
            for kind, payload in conn.execute(
                "SELECT type, data FROM events WHERE run_id = ? ORDER BY seq", (run_id.group(1),)
            )
        ]
    finally:
        conn.close()
    completed = [payload["stepPath"] for kind, payload in types if kind == "StepCompleted"]
    # Every step it reports as committed is in the log, once, and nothing else is.
    reported = re.findall(r"✓ (\S+)\s+committed", text)
    assert sorted(reported) == sorted(completed)
    assert len(completed) == len(set(completed)) == 10
    assert types[-1][0] == "RunCompleted"
    assert any(kind == "RunResumed" for kind, _ in types)

    # The counts it prints agree with the calls the step functions logged outside both
    # processes: 9 in an uncrashed run (fetch, 4 workers, summarize, judge x2, revise),
    # plus those re-issued because they were in flight at the kill.
    stage_one = text.split("SIGKILL")[0]
    committed_before = re.findall(r"✓ (\S+)\s+committed", stage_one)
    replayed = int(re.search(r"not called again\s+(\d+) steps", text).group(1))  # type: ignore[union-attr]
    after = int(re.search(r"calls made after the restart\s+(\d+)", text).group(1))  # type: ignore[union-attr]
    reissued = int(re.search(r"in flight at the kill (\d+)", text).group(1))  # type: ignore[union-attr]
    assert replayed == len(committed_before) >= 3
    calls = (data / "runs" / run_id.group(1) / "demo" / "calls.log").read_text().splitlines()
    assert len(calls) == 9 + reissued
    calls_before = len([path for path in committed_before if path != "review-candidates"])
    assert after == len(calls) - calls_before - reissued  # = 9 - calls_before
