"""``python -m bench.peers`` still measures what its table claims, at tiny counts.

Runs the harness for real (fresh child processes, a real SIGKILL, a resume) with a few
steps per run, and checks the shape of the table: every expected row in every section,
every figure a positive number, no step lost. Never a time or a ratio: those belong to
the benchmark, not to the test suite. The DBOS and LangGraph rows need
``bench/peers/.venv`` (``bench/peers/setup.sh``); CI does not build it, so they skip.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS_PYTHON = REPO / "bench" / "peers" / ".venv" / "bin" / "python"
TINY = ["--quick", "--rounds", "1", "--steps", "20", "--history-steps", "12", "--warmup", "2"]


def run_peers(python: Path | str, tmp_path: Path, *options: str) -> str:
    done = subprocess.run(
        [
            str(python),
            "-m",
            "bench.peers",
            "--here",
            "--no-pg",
            "--dir",
            str(tmp_path),
            *TINY,
            *options,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def sections(output: str) -> dict[str, list[list[str]]]:
    """Table rows (cells) by section number: ``"1"``, ``"2"``, ``"3"``."""
    found: dict[str, list[list[str]]] = {}
    current = None
    for line in output.splitlines():
        heading = re.match(r"\*\*\((\d)\)", line)
        if heading:
            current = heading.group(1)
            found[current] = []
        elif current and line.startswith("| ") and not line.startswith("| system "):
            found[current].append([cell.strip() for cell in line.strip("|").split("|")])
    return found


def number(cell: str) -> float:
    match = re.match(r"[0-9.]+", cell)
    assert match is not None, cell
    return float(match.group(0))


def check_rows(output: str, expected: dict[str, list[tuple[str, str]]]) -> None:
    table = sections(output)
    assert sorted(table) == sorted(expected)
    for section, rows in expected.items():
        assert [(row[0], row[1]) for row in table[section]] == rows
        for row in table[section]:
            for cell in row[2:]:
                assert "failed" not in cell
                assert cell == "-" or number(cell) >= 0, row
            # The figure each section leads with is a measured cost: never zero.
            assert number(row[2]) > 0, row


def test_little_workflow_and_raw_sqlite_rows(tmp_path: Path) -> None:
    output = run_peers(sys.executable, tmp_path, "--only", "lw,raw")

    check_rows(
        output,
        {
            "1": [
                ("raw sqlite3", "SQLite WAL, FULL"),
                ("raw sqlite3", "SQLite WAL, NORMAL"),
                ("raw sqlite3", "SQLite FULL, 100 rows/commit"),
                ("little-workflow", "SQLite WAL, FULL"),
                ("little-workflow", "SQLite WAL, NORMAL"),
                ("little-workflow", "SQLite FULL, map x100"),
            ],
            "2": [
                ("raw sqlite3", "SQLite WAL, FULL"),
                ("raw sqlite3", "SQLite WAL, NORMAL"),
                ("little-workflow", "SQLite WAL, FULL"),
                ("little-workflow", "SQLite WAL, NORMAL"),
            ],
            "3": [("raw sqlite3", "SQLite WAL, FULL"), ("little-workflow", "SQLite WAL, FULL")],
        },
    )
    # The in-flight step is the only one a resume may run again, in every row.
    for row in sections(output)["2"]:
        assert row[-1] == "1", row
    assert "Targets (issue 10)" in output
    # Every temporary database went away with its measurement.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason="bench/peers/.venv absent (setup.sh)")
def test_dbos_and_langgraph_rows(tmp_path: Path) -> None:
    output = run_peers(PEERS_PYTHON, tmp_path, "--only", "dbos,langgraph")

    check_rows(
        output,
        {
            "1": [
                ("DBOS", "SQLite WAL, FULL"),
                ("DBOS", "SQLite as shipped (journal)"),
                ("LangGraph", "SqliteSaver, sync"),
            ],
            "2": [
                ("DBOS", "SQLite WAL, FULL"),
                ("LangGraph", "SqliteSaver, sync"),
                ("LangGraph", "SqliteSaver, async (default)"),
            ],
            "3": [("DBOS", "SQLite WAL, FULL"), ("LangGraph", "SqliteSaver, sync")],
        },
    )
    assert list(tmp_path.iterdir()) == []
