"""The README's first command: ``little-workflow demo`` kills a real process and resumes it."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.storage.raw_sqlite import event_json

# An uncrashed run: 4 reviewer sessions, each a model call, a tool call, a model call.
MODEL_CALLS, TOOL_CALLS = 8, 4


def _number(pattern: str, text: str) -> list[int]:
    found = re.search(pattern, text)
    assert found is not None, (pattern, text)
    return [int(group) for group in found.groups()]


def test_demo_kills_inside_a_session_and_replays_model_and_tool_calls(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "little_workflow", "demo", "--speed", "0.3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        # No COLUMNS: rich would fold a pipe's lines at 80 columns, mid-sentence.
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = result.stdout
    assert "SIGKILL" in text
    assert "the output equals an uncrashed run's; nothing committed ran twice" in text
    lines = text.splitlines()
    closing = next(line for line in lines if line.startswith("The demo resumed the run"))
    assert closing.endswith("starts scheduled ones (docs/workers.md).")
    # The commands it names work as typed, in the shell it ran in (nothing on the PATH).
    me = f"{sys.executable} -m little_workflow"
    assert f"leave {me} worker running" in closing
    look = next(line for line in lines if line.startswith("Look inside: "))
    named = re.fullmatch(
        r"Look inside: (.+) \(its steps\), (.+) \(its log\), (.+) \(in a browser\)", look
    )
    assert named is not None, look
    assert named.group(3) == f"{me} ui"
    for command in named.group(1, 2):
        assert command.startswith(me)
        typed = subprocess.run(
            command, shell=True, cwd=tmp_path, capture_output=True, text=True, check=False,
            env={"PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert typed.returncode == 0, (command, typed.stderr)
        assert "RunCompleted" in typed.stdout or "review-candidates" in typed.stdout

    run_id = re.search(r"run id\s+(demo_\w+)", text)
    assert run_id is not None
    data = tmp_path / ".little-workflow"
    conn = sqlite3.connect(data / "little-workflow.db")
    try:
        events = [
            (kind, event_json(payload))
            for kind, payload in conn.execute(
                "SELECT type, data FROM events WHERE run_id = ? ORDER BY seq", (run_id.group(1),)
            )
        ]
    finally:
        conn.close()
    kinds = [kind for kind, _ in events]
    resumed = kinds.index("RunResumed")
    completed = [payload["stepPath"] for kind, payload in events if kind == "StepCompleted"]
    # Every step it reports as committed is in the log, once, and nothing else is.
    reported = re.findall(r"✓ (\S+)\s+committed", text)
    assert sorted(reported) == sorted(completed)
    assert len(completed) == len(set(completed)) == 10
    assert kinds[-1] == "RunCompleted"

    # The reviewers are agent sessions whose model and tool calls are in the log, each
    # committed once; the kill came inside a session, after some of them were committed.
    assert kinds.count("harness.model.called") >= MODEL_CALLS
    assert kinds.count("harness.model.responded") == MODEL_CALLS
    assert kinds.count("harness.tool_call.succeeded") == TOOL_CALLS
    model_before = kinds[:resumed].count("harness.model.responded")
    tool_before = kinds[:resumed].count("harness.tool_call.succeeded")
    steps_before = kinds[:resumed].count("StepCompleted")
    assert 0 < model_before < MODEL_CALLS
    cut = re.search(r"(\d+) sessions? cut off", text)
    assert cut is not None
    assert int(cut.group(1)) >= 1

    # The table agrees with the log (replayed) and with the calls the model, the tool
    # and the step functions logged outside both processes (run anew).
    steps = _number(r"steps\s+(\d+)\s+(\d+)", text)
    model = _number(r"model calls\s+(\d+)\s+(\d+)\s+\((\d+) of them in flight", text)
    tool = _number(r"tool calls\s+(\d+)\s+(\d+)\s+\((\d+) of them in flight", text)
    assert steps == [steps_before, len(completed) - steps_before]
    assert model[0] == model_before
    assert tool[0] == tool_before
    calls = (data / "runs" / run_id.group(1) / "demo" / "calls.log").read_text().splitlines()
    made = [line.split(" ", 1)[0] for line in calls]
    # Each call is made once, except those in flight at the kill, made once more; the
    # provider's calls after the resume are fewer than an uncrashed run's.
    assert made.count("model") == MODEL_CALLS + model[2]
    assert made.count("tool") == TOOL_CALLS + tool[2]
    assert model[1] == MODEL_CALLS - model_before < MODEL_CALLS
    assert tool[1] == TOOL_CALLS - tool_before
    assert made.count("step") == 5  # fetch, summarize, judge x2, revise: none killed


def test_after_the_readme_install_the_demo_names_the_venv_s_command(tmp_path: Path) -> None:
    """``.venv/bin/little-workflow demo`` (the README's, venv not activated): the hint says
    ``.venv/bin/little-workflow``, which works as typed, and how to activate the venv."""
    venv = Path(sys.executable).parent.parent
    program = f"{venv.name}/bin/little-workflow"
    data = tmp_path / "data"
    result = subprocess.run(
        [program, "--data-dir", str(data), "demo", "--speed", "0.3"],
        cwd=venv.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    look = next(line for line in lines if line.startswith("Look inside: "))
    me = f"{program} --data-dir {data}"
    assert look.startswith(f"Look inside: {me} show demo_")
    shown = re.search(r"Look inside: (.+?) \(its steps\)", look)
    assert shown is not None
    typed = subprocess.run(
        shown.group(1), shell=True, cwd=venv.parent, capture_output=True, text=True,
        check=False, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert typed.returncode == 0, typed.stderr
    assert f"source {venv.name}/bin/activate" in result.stdout
