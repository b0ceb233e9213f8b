"""The command line on code-first runs: ``run module:function``, ``show``, ``fork --at``,
``resume``, and a function that cannot be imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLOW = "tests.code_first.flows:transfer"


def cli(data_dir: Path, *args: str, ledger: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    env["LW_TEST_LEDGER"] = str(ledger or data_dir.parent / "ledger")
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_run_show_and_fork_a_code_first_run(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ran = cli(data, "run", FLOW, "--input", '{"amount": 5}', "--run-id", "run_saga")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {
        "withdraw": "withdrew 5",
        "failed": "deposit",
        "refund": "refunded 5",
    }
    shown = cli(data, "show", "run_saga")
    assert shown.returncode == 0, shown.stderr
    for path in ("withdraw", "deposit", "refund"):
        assert path in shown.stdout
    assert "transfer" in shown.stdout
    forked = cli(data, "fork", "run_saga", "--at", "refund", "--run-id", "run_fork", "--json")
    assert forked.returncode == 0, forked.stderr
    report = json.loads(forked.stdout)
    assert report["forkedFrom"] == {"runId": "run_saga", "at": "refund"}
    assert report["output"]["refund"] == "refunded 5"
    # withdraw was kept (replayed); a fork keeps completed calls only, so the failed
    # deposit was asked again (it failed again), and refund ran anew.
    assert report["keptSteps"] == 1
    assert report["executedSteps"] == 1
    ledger = [" ".join(line.split()[:2]) for line in (tmp_path / "ledger").read_text().splitlines()]
    assert ledger == [
        "withdraw run_saga/withdraw",
        "deposit run_saga/deposit",
        "refund run_saga/refund",
        "deposit run_fork/deposit",
        "refund run_fork/refund",
    ]


def test_a_workflow_that_cannot_be_imported_is_a_typed_error(tmp_path: Path) -> None:
    ran = cli(tmp_path / "data", "run", "tests.code_first.flows:nothing_here", "--input", "{}")
    assert ran.returncode != 0
    assert "workflow_not_importable" in ran.stderr or "cannot import workflow" in ran.stderr
    assert "has no 'nothing_here'" in ran.stderr


def test_loop_takes_a_module_function_and_refuses_one_it_cannot_import(tmp_path: Path) -> None:
    data = tmp_path / "data"
    supervise = "examples.outer_loop.setup:supervise"
    missing = cli(
        data, "loop", "nosuch.flows:flow", "--input", "{}", "--max-cycles", "2",
        "--supervise", supervise, "--outer-loop-id", "ol_missing",
    )  # fmt: skip
    assert missing.returncode == 3
    assert "workflow_not_importable: cannot import workflow 'nosuch.flows:flow'" in missing.stderr
    assert not (data / "outer-loops" / "ol_missing.json").exists()
    # A code-first cycle runs; the loop's goal names it, and it is the loop's cycles' workflow.
    given = (REPO / "examples/outer_loop/input.json").read_text(encoding="utf-8")
    ran = cli(
        data, "--setup", "examples.outer_loop.setup:setup", "loop",
        "examples.outer_loop.workflow:announcement", "--input", given, "--max-cycles", "1",
        "--supervise", supervise, "--outer-loop-id", "ol_code",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "outer loop ol_code exhausted after 1 cycle(s)" in ran.stderr
    status = json.loads(cli(data, "loop-status", "ol_code", "--json").stdout)
    assert status["goal"]["description"].startswith("A writer drafts a release announcement")
    assert status["cycles"][0]["workflowVersionId"] == (
        "code:examples.outer_loop.workflow:announcement"
    )
