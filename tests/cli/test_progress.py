"""The progress display of ``run`` and ``resume``, read against the log it follows."""

from __future__ import annotations

import json
from pathlib import Path

from little_workflow.runtime import Runtime
from tests.runtime.support import cli

FLOWS = Path(__file__).resolve().parents[1] / "runtime" / "flows"
INPUT = json.dumps({"query": "staff engineers"})


async def completed_paths(data: Path, run_id: str) -> list[str]:
    async with Runtime(data) as rt:
        return [
            record.event.step_path  # type: ignore[attr-defined]
            for record in await rt.events.read(run_id)
            if record.type == "StepCompleted"
        ]


def shown_steps(stderr: str) -> list[str]:
    return [line.split()[1] for line in stderr.splitlines() if line.startswith("  ✓ ")]


async def test_run_shows_each_step_as_it_completes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = cli(data, "run", str(FLOWS / "review.yaml"), "--input", INPUT, "--run-id", "run_p1",
               "--progress")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "▶ run run_p1 (review)"
    assert shown_steps(done.stderr) == await completed_paths(data, "run_p1")
    assert any(line.startswith("  ↳ summarize  sub-run run_") for line in lines)
    assert lines[-2].startswith("■ completed in ")
    # The output on stdout is untouched by the display.
    assert json.loads(done.stdout)["verdict"]["verdict"] == "accept"


async def test_a_resume_shows_only_what_it_runs_anew(tmp_path: Path) -> None:
    data = tmp_path / "data"
    crashed = cli(data, "run", str(FLOWS / "review.yaml"), "--input", INPUT, "--run-id",
                  "run_p2", crash=8)  # fmt: skip
    assert crashed.returncode != 0
    before = await completed_paths(data, "run_p2")
    assert len(before) > 0

    resumed = cli(data, "resume", "run_p2", "--progress")
    assert resumed.returncode == 0, resumed.stderr
    after = await completed_paths(data, "run_p2")
    assert f"↻ run run_p2 resumed: {len(before)} step(s) in the log" in resumed.stderr
    assert shown_steps(resumed.stderr) == after[len(before) :]


def test_no_display_when_not_asked_and_not_a_terminal(tmp_path: Path) -> None:
    done = cli(tmp_path / "data", "run", str(FLOWS / "review.yaml"), "--input", INPUT)
    assert done.returncode == 0, done.stderr
    assert "✓" not in done.stderr
    assert done.stderr.strip().startswith("run run_")
