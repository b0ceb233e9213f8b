"""``python -m bench.history`` still measures what its table claims, at tiny counts.

Runs the benchmark for real (a scripted agent session on a real SQLite store) in both
forms: the default report, and the ``--sweep`` table of issue 23 with one row per message
size. Checks the shape and that each figure is a number; never a size or a ratio's value
beyond being positive (those belong to the benchmark).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


def bench(*options: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bench.history", "--turns", "3", *options],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_default_invocation_reports_ours_against_final() -> None:
    output = bench()
    assert re.search(r"final conversation \(last request\)\s+[\d,]+ KiB", output), output
    assert re.search(r"little-workflow \(db \+ \d+ blobs\)\s+[\d,]+ KiB\s+[\d.]+x final", output)


def test_sweep_reports_one_row_per_message_size() -> None:
    output = bench("--sweep", "--sizes", "100,4096")
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in output.splitlines()
        if line.startswith("| ") and not line.startswith("| message")
    ]
    assert [row[0] for row in rows] == ["100 B", "4 KiB"], output
    for row in rows:
        # SQLite db+WAL, bytes per byte of conversation (apparent and allocated).
        assert float(row[2].split()[0].replace(",", "")) > 0, row
        assert float(row[4].rstrip("x")) > 0, row
        assert float(row[5].rstrip("x")) > 0, row
        leaf, overflow = (int(part) for part in row[7].split(" / "))
        assert leaf > 0, row
        assert overflow >= 0, row
