"""bench.tracing runs: each child reports its figures, and tracing off means no span, no import.

The bench's children check themselves (``check_report``: tracing on makes at least a span
a step, off makes none and imports no OpenTelemetry), so a seam that started importing the
SDK, or spans that stopped being made, fail this run. No time is asserted.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.test_readme import REPO


def test_the_timed_rounds_print_a_row_per_workload_and_setting() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.tracing", "--rounds", "1", "--steps", "10", "--no-counts"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = re.findall(
        r"^\| (steps|model) \| (off|on) \| (\d+) \| ([\d.]+)x \| ([\d.]+) \|$",
        done.stdout,
        re.MULTILINE,
    )
    assert [(workload, tracing) for workload, tracing, *_ in rows] == [
        ("steps", "off"),
        ("steps", "on"),
        ("model", "off"),
        ("model", "on"),
    ]
    assert all(int(us) > 0 and float(ratio) > 0 for _, _, us, ratio, _ in rows)
