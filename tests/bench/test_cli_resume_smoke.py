"""``python -m bench.cli_resume`` still measures what its table claims, at tiny counts.

A real run SIGKILLed mid-chain, resumed through the CLI (this tree and, through
``--lw-rev HEAD``, the committed one), against the raw baseline: every row present, every
figure a positive number. Never a time or a ratio: those belong to the benchmark.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_cli_resume_bench_prints_every_row() -> None:
    tiny = ["--rounds", "1", "--steps", "12", "--lw-rev", "HEAD"]
    done = subprocess.run(
        [sys.executable, "-m", "bench.cli_resume", *tiny],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {
        cells[0]: cells[1:]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and not line.startswith(("| case", "| tree"))
        for cells in [[cell.strip() for cell in line.strip("|").split("|")]]
    }
    for name in (
        "python -c pass",
        "raw sqlite3, the same commits",
        "little-workflow resume (working tree)",
        "little-workflow resume (HEAD)",
    ):
        assert float(rows[name][1]) > 0, name  # the median wall seconds
    assert int(rows["working tree"][1]) > 0
    assert int(rows["HEAD"][1]) > 0
