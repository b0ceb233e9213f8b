"""What ``run``, ``resume``, ``retry``, ``fork``, ``replay`` and ``show`` say about a run
(issue 21): ``--json`` objects, the resume line, a failed step's error, a cancel's reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.cli.test_stdout_and_input import FLOWS, lw

FLAKY = str(FLOWS / "flaky.yaml")
ASK = str(FLOWS / "ask.yaml")
SETUP = ("--setup", "tests.cli.flows.funcs:research_setup")
#: ask.yaml's events up to its model call's response, before its step completes.
AFTER_THE_MODEL_CALL = {"LITTLE_WORKFLOW_CRASH_AFTER_EVENTS": "5"}


def _fixed(tmp_path: Path) -> dict[str, str]:
    return {"LW_TEST_FIXED": str(tmp_path / "fixed")}


def _json(stdout: str) -> Any:
    return json.loads(stdout)


def test_run_json_prints_one_object_for_a_completed_run(tmp_path: Path) -> None:
    ran = lw(
        tmp_path, *SETUP, "run", ASK, "--input", '{"question": "q"}', "--run-id", "a1", "--json"
    )
    assert ran.returncode == 0, ran.stderr
    assert _json(ran.stdout) == {
        "runId": "a1",
        "status": "completed",
        "output": "an answer",
        "error": None,
        "steps": {"replayed": 0, "executed": 1},
        "calls": {"replayed": 0, "made": 1},
    }


def test_a_failed_run_then_a_fixed_retry(tmp_path: Path) -> None:
    env = _fixed(tmp_path)
    topic = "outgoing mail relay of the second office"  # long: lines past 80 columns
    args = ("run", FLAKY, "--input", json.dumps({"topic": topic}), "--run-id", "f1")
    failed = lw(tmp_path, *args, "--json", "--progress", env=env)
    assert failed.returncode == 1
    # The progress lines on a pipe are whole, not folded at 80 columns mid-sentence.
    assert (
        f"  ! call  attempt 1 failed (ValueError, will retry): the {topic} service is down\n"
        in (failed.stderr)
    )
    message = (
        f"run 'f1' failed: step 'call' failed (attempt 2): ValueError: the {topic} service is down"
    )
    assert _json(failed.stdout) == {
        "runId": "f1",
        "status": "failed",
        "output": None,
        "error": {"code": "run_failed", "cause": "step_failed", "message": message},
        "steps": None,
        "calls": None,
    }
    assert "error: run failed (step_failed)" in failed.stderr

    # show says why the step failed, not only how many attempts it took.
    shown = lw(tmp_path, "show", "f1")
    assert shown.returncode == 0, shown.stderr
    error = f"error: step_failed: {message.partition(': ')[2]}"
    assert error in shown.stdout
    # replay, for a person: each step, the failed one's error, where a resume goes on.
    replayed = lw(tmp_path, "replay", "f1")
    assert replayed.returncode == 0, replayed.stderr
    assert "  call  failed  2 attempts\n    error: step_failed: " in replayed.stdout
    assert "a resume would continue at: call" in replayed.stdout
    assert _json(lw(tmp_path, "replay", "f1", "--json").stdout)["frontier"] == ["call"]

    (tmp_path / "fixed").touch()
    retried = lw(tmp_path, "retry", "f1", "--json", env=env)
    assert retried.returncode == 0, retried.stderr
    assert _json(retried.stdout) == {
        "runId": "f1",
        "status": "completed",
        "output": f"fixed {topic}",
        "error": None,
        "steps": {"replayed": 1, "executed": 1},
        "calls": {"replayed": 0, "made": 0},
    }
    # The step completed on the retry carries no error of the failed run's.
    steps = {
        row["path"]: row for row in _json(lw(tmp_path, "show", "f1", "--json").stdout)["steps"]
    }
    assert steps["call"]["status"] == "completed"
    assert steps["call"]["error"] is None
    assert steps["call"]["failures"] == 0
    assert "error" not in lw(tmp_path, "show", "f1").stdout


def test_resume_says_steps_and_calls_apart(tmp_path: Path) -> None:
    args = ("run", ASK, "--input", '{"question": "q"}')
    # Killed after the model call's response was committed, before its step completed.
    first = lw(tmp_path, *SETUP, *args, "--run-id", "a1", env=AFTER_THE_MODEL_CALL)
    assert first.returncode != 0
    resumed = lw(tmp_path, *SETUP, "resume", "a1")
    assert resumed.returncode == 0, resumed.stderr
    assert _json(resumed.stdout) == "an answer"
    line = resumed.stderr.strip().splitlines()[-1]
    assert line == (
        "run a1 resumed, completed: no completed step in the log, 1 step run anew; "
        "model and tool calls: 1 replayed from the log, 0 made"
    )
    assert "0 step" not in line

    again = lw(tmp_path, *SETUP, *args, "--run-id", "a2", env=AFTER_THE_MODEL_CALL)
    assert again.returncode != 0
    as_json = lw(tmp_path, *SETUP, "resume", "a2", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert _json(as_json.stdout) == {
        "runId": "a2",
        "status": "completed",
        "output": "an answer",
        "error": None,
        "steps": {"replayed": 0, "executed": 1},
        "calls": {"replayed": 1, "made": 0},
    }
    # A run already completed: nothing is run, and the line does not read as a failure.
    done = lw(tmp_path, *SETUP, "resume", "a2")
    assert done.stderr.strip().splitlines()[-1] == (
        "run a2 resumed, completed: 1 step replayed from the log, nothing left to run"
    )


def test_the_resume_of_a_cancelled_run_repeats_its_reason(tmp_path: Path) -> None:
    crashed = lw(
        tmp_path, *SETUP, "run", ASK, "--input", '{"question": "q"}', "--run-id", "c1",
        env={"LITTLE_WORKFLOW_CRASH_AFTER_EVENTS": "2"},
    )  # fmt: skip
    assert crashed.returncode != 0
    cancelled = lw(tmp_path, "cancel", "c1", "--reason", "not needed any more")
    assert cancelled.returncode == 0, cancelled.stderr
    for _ in range(2):  # the resume that finds it recorded, and any after it
        resumed = lw(tmp_path, *SETUP, "resume", "c1")
        assert resumed.returncode == 6
        assert resumed.stderr.strip() == "error: run 'c1' was cancelled: not needed any more"
    as_json = lw(tmp_path, *SETUP, "resume", "c1", "--json")
    assert as_json.returncode == 6
    assert _json(as_json.stdout)["status"] == "cancelled"
    assert _json(as_json.stdout)["error"]["message"].endswith(": not needed any more")


def test_fork_json_has_the_common_fields(tmp_path: Path) -> None:
    ran = lw(tmp_path, *SETUP, "run", ASK, "--input", '{"question": "q"}', "--run-id", "a1")
    assert ran.returncode == 0, ran.stderr
    forked = lw(tmp_path, *SETUP, "fork", "a1", "--at", "out", "--run-id", "k1", "--json")
    assert forked.returncode == 0, forked.stderr
    result = _json(forked.stdout)
    assert {key: result[key] for key in ("runId", "status", "output", "error")} == {
        "runId": "k1",
        "status": "completed",
        "output": "an answer",
        "error": None,
    }
    assert result["steps"] == {"replayed": 1, "executed": 0}
    assert result["calls"] == {"replayed": 0, "made": 0}
    assert result["forkedFrom"] == {"runId": "a1", "at": "out"}
    # Refused (no such step): still one object, with the error.
    refused = lw(tmp_path, *SETUP, "fork", "a1", "--at", "nowhere", "--json")
    assert refused.returncode == 3
    error = _json(refused.stdout)
    assert error["status"] is None
    assert re.match(r"[a-z_]+$", error["error"]["code"])
