"""Kill a code-first run right after every event commit; resume it; compare.

The workflow (``flows.review``) has a step, a map with concurrency 3, a loop that calls
a step three times, an ``asyncio.gather`` of two steps, a tool called as a step
(``ctx.tool``), an agent with tools on the scripted model, a sub-workflow and a
side-effecting step with a reconcile hook. For every N a real child process runs it with
the crash switch at N and dies by ``os._exit`` right after the N-th commit; another
process resumes it. Every resume ends with the uncrashed run's output; no step whose
``StepCompleted`` was committed is called again (calls counted outside the process, the
tool's too), and the side effect's far end is asked exactly once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from little_workflow.runtime import CRASH_ENV, CRASH_EXIT_CODE
from tests.runtime.test_crash_every_event import log_facts

REPO = Path(__file__).resolve().parents[2]
INPUT = json.dumps({"query": "senior"})
SETUP = "tests.runtime.agent_flows:setup"


def cli(
    data_dir: Path, files: Path, *args: str, crash: int | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(files / "calls"),
        "LW_TEST_LEDGER": str(files / "ledger"),
        "LW_TEST_TOOL_CALLS": str(files / "tools"),
    }
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
            SETUP,
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def lines(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split()[:2]) for line in path.read_text().splitlines()]  # type: ignore[misc]


def _directory_calls(path: Path) -> int:
    """How many times the ``directory`` tool step's tool was asked (``lookup "Grace"``)."""
    if not path.exists():
        return 0
    return path.read_text().splitlines().count('lookup "Grace"')


@pytest.mark.slow
@pytest.mark.timeout(900)  # two processes per event: minutes on a busy machine
def test_a_code_first_run_killed_after_every_commit_resumes_to_the_same_output(
    tmp_path: Path,
) -> None:
    files = tmp_path / "reference-files"
    files.mkdir()
    reference = cli(
        tmp_path / "reference",
        files,
        "run",
        "tests.code_first.flows:review",
        "--input",
        INPUT,
        "--run-id",
        "run_code",
    )
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)
    assert expected["total"] == 243
    assert expected["verdict"] == "Ada scores 70"
    total_events, reference_completed, _ = log_facts(tmp_path / "reference")
    reference_calls = Counter(lines(files / "calls"))
    assert set(reference_calls.values()) == {1}
    assert _directory_calls(files / "tools") == 1
    # fetch, 3 scores, 3 revises, left, right, the sub-run's revise, notify
    assert len(reference_calls) == 11
    assert total_events >= 40

    for n in range(1, total_events + 1):
        data_dir, files = tmp_path / f"crash-{n:03d}", tmp_path / f"files-{n:03d}"
        files.mkdir()
        crashed = cli(
            data_dir,
            files,
            "run",
            "tests.code_first.flows:review",
            "--input",
            INPUT,
            "--run-id",
            "run_code",
            crash=n,
        )
        assert crashed.returncode == CRASH_EXIT_CODE, (n, crashed.stderr)
        before = lines(files / "calls")
        _, committed, _ = log_facts(data_dir)
        resumed = cli(data_dir, files, "resume", "run_code")
        assert resumed.returncode == 0, (n, resumed.stderr)
        assert json.loads(resumed.stdout) == expected, n
        after = lines(files / "calls")[len(before) :]
        assert not set(after) & committed, (n, set(after) & committed)
        counts = Counter(before + after)
        assert max(counts.values()) <= 2, n
        assert len(counts) == len(reference_calls), n
        # The tool step (``directory``): called again only if its commit had not landed.
        asked = _directory_calls(files / "tools")
        assert 1 <= asked <= 2, (n, asked)
        if ("run_code", "directory") in committed:
            assert asked == 1, n
        # The far end was asked once: the reconcile hook settled a request a crash cut.
        ledger = Counter(lines(files / "ledger"))
        assert list(ledger.values()) == [1], (n, ledger)
        _, final_completed, final_in_flight = log_facts(data_dir)
        assert len(final_completed) == len(reference_completed), n
        assert not final_in_flight, n
