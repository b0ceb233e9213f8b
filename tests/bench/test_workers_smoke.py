"""``python -m bench.workers`` still measures what its table claims, at tiny counts.

Runs the benchmark for real (a SQLite child process, real ``little-workflow worker``
subprocesses on a fresh Postgres schema each) with a few runs, and checks the table's
shape: every row, every figure a number, every run completed (the benchmark fails a row,
and exits 1, when a run did not complete once with one ``StepCompleted`` per step, or a
worker lost a lease or reported an error). Never a time or a ratio: those belong to the
benchmark, not to the test suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bench.workers import HEADER, SCHEMA_PREFIX

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(60)]

REPO = Path(__file__).resolve().parents[2]


def _schemas(postgres_url: str, prefix: str) -> list[str]:
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE starts_with(nspname, %s)", [prefix]
        ).fetchall()
    return [row[0] for row in rows]


def test_one_table_of_every_row_with_every_run_completed(postgres_url: str, tmp_path: Path) -> None:
    # The fixture's URL names a schema of this test; the benchmark makes its own.
    server = postgres_url.split("?", maxsplit=1)[0]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.workers",
            "--quick",
            "--rounds",
            "1",
            "--runs",
            "6",
            "--items",
            "2",
            "--chain",
            "2",
            "--processes",
            "1,2",
            "--concurrency",
            "2",
            "--pg-url",
            server,
            "--dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    lines = [line for line in done.stdout.splitlines() if line.startswith("|")]
    header, rule, *rows = (
        [cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines
    )
    assert header == list(HEADER)
    assert all(re.fullmatch(r"-*:?", cell) for cell in rule)
    assert [(row[0], row[1]) for row in rows] == [
        ("SQLite, one process, sequential", "1 x 1"),
        ("SQLite, one process, asyncio.gather", "1 x 2"),
        ("Postgres, 1 worker process", "1 x 2"),
        ("Postgres, 2 worker processes", "2 x 2"),
    ]
    for row in rows:
        assert len(row) == len(HEADER), row
        assert not any("failed" in cell for cell in row), row
        # Seconds to done, start-up, runs/s, steps/s, runs/s once up: measured, never 0.
        assert all(float(cell) > 0 for cell in row[2:7]), row
        assert row[7].endswith("x"), row
        assert row[-1].endswith("%"), row
    assert "6 runs of 4 steps" in done.stdout
    # Every temporary directory and schema went away with its measurement.
    assert list(tmp_path.iterdir()) == []
    prefix = re.search(rf"schemas ({SCHEMA_PREFIX}\d+_)\*", done.stderr)
    assert prefix is not None, done.stderr
    assert _schemas(server, prefix.group(1)) == []
