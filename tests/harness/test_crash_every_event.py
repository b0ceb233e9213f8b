"""Layer C under fire: kill the process after every event commit of an agent run; resume.

Two runs: an orchestrator starts a sub-workflow whose worker calls two tools; a planner
compiles a goal into LWIR (its first answer invalid and sent back), then the planned
workflow runs. The model is served
over HTTP by a fake server in its own process, which counts requests in a file; the
tools count their calls in another. For every N from 1 to the run's event count, a
child process runs the workflow and dies right after its N-th commit; another resumes
it. Each resume must end with the uncrashed run's output, and the counts kept outside
the dying processes must show that only the one call in flight at the crash was made
again: model requests = committed responses + at most 1, tool calls likewise.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_workflow.runtime import CRASH_ENV, CRASH_EXIT_CODE
from tests.processes import fake_model_server

REPO = Path(__file__).resolve().parents[2]
FLOWS = REPO / "tests" / "harness" / "flows"


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The fake model server, a separate process; (its URL, its request-count file)."""
    counts = tmp_path / "model-requests"
    with fake_model_server("tests.harness.flows:script", count_file=counts) as url:
        yield url, counts


def cli(
    data_dir: Path, url: str, tool_calls: Path, *args: str, crash: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LW_TEST_MODEL_URL": url, "LW_TEST_TOOL_CALLS": str(tool_calls)}
    env.pop(CRASH_ENV, None)
    if crash is not None:
        env[CRASH_ENV] = str(crash)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "little_workflow",
            "--data-dir",
            str(data_dir),
            "--setup",
            "tests.harness.flows:setup",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def log_counts(data_dir: Path) -> dict[str, int]:
    conn = sqlite3.connect(data_dir / "little-workflow.db")
    try:
        rows = conn.execute("SELECT type, COUNT(*) FROM events GROUP BY type").fetchall()
    finally:
        conn.close()
    return dict(rows)


CASES = [
    pytest.param(
        "orchestrate.yaml",
        {"who": "Ada"},
        'Shortlist ready: {"verdict": "Ada scores 70"}',
        # The orchestrator's two turns and the worker's three; two tools, and the
        # orchestrator's start_workflow, a tool call too, that starts the sub-run.
        {"harness.model.responded": 5, "harness.tool_call.succeeded": 3, "RunCompleted": 2},
        2,
        id="orchestrator",
    ),
    pytest.param(
        "plan.yaml",
        {"years": 4},
        40,
        # The planner's two turns (the first plan does not validate); the planned
        # workflow's one tool step.
        {"harness.model.responded": 2, "harness.tool_call.succeeded": 1, "RunCompleted": 2},
        1,
        id="planner",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("workflow", "run_input", "expected", "committed", "tools"), CASES)
def test_crash_at_every_event_boundary_of_an_agent_run(
    tmp_path: Path,
    model_server: tuple[str, Path],
    workflow: str,
    run_input: dict[str, object],
    expected: object,
    committed: dict[str, int],
    tools: int,
) -> None:
    url, requests = model_server
    path, data = str(FLOWS / workflow), json.dumps(run_input)
    reference_dir, reference_tools = tmp_path / "reference", tmp_path / "reference-tools"
    reference = cli(
        reference_dir, url, reference_tools, "run", path, "--input", data, "--run-id", "run_agent"
    )
    assert reference.returncode == 0, reference.stderr
    assert json.loads(reference.stdout) == expected
    counts = log_counts(reference_dir)
    total_events = sum(counts.values())
    responses = committed["harness.model.responded"]
    assert {key: counts[key] for key in committed} == committed
    assert lines(requests) == responses
    assert lines(reference_tools) == tools

    for n in range(1, total_events + 1):
        data_dir, tool_calls = tmp_path / f"crash-{n:03d}", tmp_path / f"tools-{n:03d}"
        before = lines(requests)
        crashed = cli(
            data_dir,
            url,
            tool_calls,
            "run",
            path,
            "--input",
            data,
            "--run-id",
            "run_agent",
            crash=n,
        )
        assert crashed.returncode == CRASH_EXIT_CODE, (n, crashed.stderr)
        resumed = cli(data_dir, url, tool_calls, "resume", "run_agent")
        assert resumed.returncode == 0, (n, resumed.stderr)
        assert json.loads(resumed.stdout) == expected, n
        # Committed once each, whatever the crash point...
        final = log_counts(data_dir)
        assert {key: final[key] for key in committed} == committed, n
        # ...and only the one call in flight at the crash was made again.
        made = lines(requests) - before
        assert responses <= made <= responses + 1, (n, made)
        assert tools <= lines(tool_calls) <= tools + 1, (n, lines(tool_calls))
