"""Seed points that were tested only in-process, now under a real SIGKILL (issue 18).

Each test runs a workflow in a child process (``little-workflow run``), stops it at a
chosen point (``LW_KILL_HOLD``: the process writes its pid to a marker file and waits),
SIGKILLs it there, and resumes the run in a fresh process. The resumed output must equal
an uncrashed run's, and the calls counted outside the processes (model calls, tool
calls, step functions: ``tests.runtime.kill_flows``) must show that nothing the log had
committed ran again. The points: a session's scratch directory and memory entries
written before the kill; a model-driven decision's route; a fixer's decision;
structured-output tries; a looping step inside a map branch
(``review-candidates[cand_123].worker.visit[1]``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import stat
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from little_workflow.memory import MemoryStore
from little_workflow.storage import create_file_storage
from tests.runtime.kill_flows import CALLS_ENV, FLOWS, HOLD_ENV, MARK_ENV, NAMESPACE, SETUP
from tests.runtime.support import cli, cli_popen, wait_for_file
from tests.storage.raw_sqlite import event_json

RUN_ID = "run_k"

pytestmark = pytest.mark.timeout(180)


def log(data: Path) -> list[tuple[str, dict[str, Any]]]:
    """``(type, data)`` of the run's events, in log order, read from the SQLite file."""
    conn = sqlite3.connect(data / "little-workflow.db")
    try:
        rows = conn.execute(
            "SELECT type, data FROM events WHERE run_id = ? ORDER BY seq", (RUN_ID,)
        ).fetchall()
    finally:
        conn.close()
    return [(kind, event_json(payload)) for kind, payload in rows]


def calls(path: Path) -> list[tuple[str, str, int]]:
    """``(kind, key, pid)`` of every call the flows' functions, tools and model made."""
    if not path.exists():
        return []
    return [
        (kind, key, int(pid))
        for kind, key, pid in (line.split(" ") for line in path.read_text().splitlines())
    ]


@dataclass
class Killed:
    """A run killed at a hold point and resumed, next to an uncrashed run of it."""

    data: Path
    pid: int
    reference: Any
    reference_calls: list[tuple[str, str, int]]
    at_kill: list[tuple[str, dict[str, Any]]]
    output: Any
    calls: list[tuple[str, str, int]]
    #: What ``inspect`` found on disk after the kill, before the resume.
    on_disk: Any = None

    def before(self) -> list[tuple[str, str]]:
        return [(kind, key) for kind, key, pid in self.calls if pid == self.pid]

    def after(self) -> list[tuple[str, str]]:
        return [(kind, key) for kind, key, pid in self.calls if pid != self.pid]

    def committed(self, kind: str) -> list[dict[str, Any]]:
        return [data for event, data in self.at_kill if event == kind]

    def assert_nothing_committed_ran_again(self) -> None:
        """Calls after the kill: the uncrashed run's, less what the log had committed."""
        uncrashed = Counter(kind for kind, _, _ in self.reference_calls)
        made = Counter(kind for kind, _ in self.after())
        assert made["model"] == uncrashed["model"] - len(self.committed("harness.model.responded"))
        assert made["tool"] == uncrashed["tool"] - len(
            self.committed("harness.tool_call.succeeded")
        )
        done = {data["stepPath"] for data in self.committed("StepCompleted")}
        again = [key for kind, key in self.after() if kind == "step" and key in done]
        assert again == []


def kill_and_resume(
    tmp_path: Path,
    flow: str,
    hold: str,
    run_input: Any = None,
    inspect: Callable[[Path], Any] | None = None,
) -> Killed:
    """Run ``flow`` uncrashed; run it again, SIGKILL it at ``hold``, resume it.

    ``inspect(data_dir)`` looks at the data directory between the kill and the resume.
    """
    arguments = ["--setup", SETUP, "run", str(FLOWS / flow), "--run-id", RUN_ID]
    if run_input is not None:
        arguments += ["--input", json.dumps(run_input)]
    reference_calls = tmp_path / "reference-calls"
    reference = cli(tmp_path / "reference", *arguments, env={CALLS_ENV: str(reference_calls)})
    assert reference.returncode == 0, reference.stderr

    data, counted, mark = tmp_path / "data", tmp_path / "calls", tmp_path / "held"
    env = {CALLS_ENV: str(counted), HOLD_ENV: hold, MARK_ENV: str(mark)}
    first = cli_popen(data, *arguments, env=env)
    try:
        wait_for_file(mark, first)
        assert int(mark.read_text()) == first.pid
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    at_kill = log(data)
    on_disk = inspect(data) if inspect is not None else None

    resumed = cli(data, "--setup", SETUP, "resume", RUN_ID, env={CALLS_ENV: str(counted)})
    assert resumed.returncode == 0, resumed.stderr
    return Killed(
        data=data,
        pid=first.pid,
        reference=json.loads(reference.stdout),
        reference_calls=calls(reference_calls),
        at_kill=at_kill,
        output=json.loads(resumed.stdout),
        calls=calls(counted),
        on_disk=on_disk,
    )


# --- a session's scratch directory and memory -------------------------------------


def _scratch_and_memory(data: Path) -> dict[str, Any]:
    sessions = list((data / "runs" / RUN_ID / "harness").iterdir())
    memory = MemoryStore(create_file_storage(data / "memory"))
    entry = asyncio.run(memory.entry(NAMESPACE, "note"))
    return {
        "sessions": [folder.name for folder in sessions],
        "modes": [stat.S_IMODE(folder.stat().st_mode) for folder in sessions],
        "files": {
            path.relative_to(data / "runs" / RUN_ID / "harness").as_posix(): path.read_text()
            for folder in sessions
            for path in folder.iterdir()
        },
        "memory": None if entry is None else (entry.value, entry.run_id, entry.step_path),
    }


@pytest.fixture(scope="module")
def notes(tmp_path_factory: pytest.TempPathFactory) -> Killed:
    """The notes agent SIGKILLed in ``peek`` (``jot`` committed), then resumed."""
    return kill_and_resume(
        tmp_path_factory.mktemp("notes"), "notes.yaml", "peek", inspect=_scratch_and_memory
    )


def test_scratch_files_written_before_a_sigkill_are_read_by_the_resumed_session(
    notes: Killed,
) -> None:
    # Killed inside the session: jot's result committed, peek in flight.
    assert [data["sessionId"] for data in notes.committed("harness.tool_call.succeeded")] == [
        "keeper"
    ]
    assert notes.committed("StepCompleted") == []
    # The file jot wrote is under runs/<runId>/harness/<session>/, 0700, after the kill.
    [session] = notes.on_disk["sessions"]
    assert session.startswith("keeper-")
    assert notes.on_disk["modes"] == [0o700]
    assert notes.on_disk["files"] == {f"{session}/notes.txt": "alpha"}
    # The resumed session did not jot again; its peek read the file the killed one wrote.
    assert [key for kind, key in notes.after() if kind == "tool"] == [f"peek:{RUN_ID}/keeper"]
    assert notes.output == notes.reference
    assert '"file": "alpha"' in notes.output
    notes.assert_nothing_committed_ran_again()


def test_memory_entries_written_before_a_sigkill_survive_it(notes: Killed) -> None:
    # The entry is on disk after the kill, with the run and step that wrote it.
    assert notes.on_disk["memory"] == ({"text": "alpha"}, RUN_ID, "keeper")
    assert [key for kind, key in notes.before() if kind == "tool"] == [
        f"jot:{RUN_ID}/keeper",
        f"peek:{RUN_ID}/keeper",
    ]
    # The resumed session's peek found it (jot was not called again to write it anew).
    assert '"memory": {"text": "alpha"}' in notes.output
    assert notes.output == notes.reference


# --- a model-driven decision, a fixer -------------------------------------------------


def test_a_model_decision_s_route_is_replayed_after_a_sigkill(tmp_path: Path) -> None:
    # Killed in write's second visit: the judge's first answer (revise) was committed.
    killed = kill_and_resume(tmp_path, "decide.yaml", "write#1")
    [judged] = [data for data in killed.committed("StepCompleted") if data["stepId"] == "judge"]
    assert (judged["stepPath"], judged["route"]) == ("judge.visit[0]", "revise")
    assert [key for kind, key in killed.before() if kind == "model"] == [
        "judge-model:'Judge:_draft_v0':0"
    ]
    # The resume takes the route from the log: the judge is asked about v1 only, and
    # only the write that was cut off runs again.
    assert [key for kind, key in killed.after() if kind == "model"] == [
        "judge-model:'Judge:_draft_v1':0"
    ]
    assert [key for kind, key in killed.after() if kind == "step"] == ["write.visit[1]"]
    assert killed.output == killed.reference == {"draft": "draft v1", "verdict": "accept"}
    killed.assert_nothing_committed_ran_again()


def test_structured_output_tries_are_replayed_after_a_sigkill(tmp_path: Path) -> None:
    # Killed in the third try: the two refused answers (and the refusals sent back) were
    # committed; the resume pays for the third try only, and gets the uncrashed answer.
    killed = kill_and_resume(tmp_path, "structured.yaml", "city#2")
    asked = "city-model:'Capital_of_Norway?'"
    assert [key for kind, key in killed.before() if kind == "model"] == [
        f"{asked}:0",
        f"{asked}:1",
        f"{asked}:2",
    ]
    assert [key for kind, key in killed.after() if kind == "model"] == [f"{asked}:2"]
    assert len(killed.committed("harness.model.responded")) == 2
    assert killed.output == killed.reference == {"city": "Oslo", "population": 709000}
    killed.assert_nothing_committed_ran_again()


def test_a_fixer_s_decision_is_replayed_after_a_sigkill(tmp_path: Path) -> None:
    # Killed in the corrected call: the fixer's decision (retry with b=2) was committed.
    killed = kill_and_resume(tmp_path, "fix.yaml", "divide-fixed")
    [fix] = [
        data
        for event, data in killed.at_kill
        if event == "harness.session.completed" and data["sessionId"] == "divide#fix[0]"
    ]
    assert fix["output"] == {"action": "retry", "with": {"a": 10, "b": 2}}
    assert [kind for kind, _ in killed.before()] == ["step", "model", "step"]
    # The resume does not consult the fixer again, nor repeat the failed call: it makes
    # the corrected call that was cut off, once.
    assert killed.after() == [("step", "divide:b=2")]
    assert killed.output == killed.reference == 5.0
    killed.assert_nothing_committed_ran_again()


# --- a looping step inside a map branch ----------------------------------------------

CANDIDATES = {"candidates": [{"id": "cand_123"}, {"id": "cand_456"}]}
LOOPING = "review-candidates[cand_123].worker.visit[1]"


def test_a_looping_step_in_a_map_branch_resumes_at_its_visit(tmp_path: Path) -> None:
    # Killed in cand_123's second worker visit, the seed's own example path.
    killed = kill_and_resume(tmp_path, "map_loop.yaml", LOOPING, CANDIDATES)
    done = [data["stepPath"] for data in killed.committed("StepCompleted")]
    assert "review-candidates[cand_123].worker.visit[0]" in done
    assert "review-candidates[cand_123].check.visit[0]" in done
    assert LOOPING not in done
    # Only what was cut off runs again: the held visit (and cand_456's steps not yet
    # committed); no committed visit of either branch.
    again = [key for kind, key in killed.after()]
    assert again.count(LOOPING) == 1
    assert set(again) <= {LOOPING, *(key for _, key in killed.before())} | {
        "review-candidates[cand_123].check.visit[1]",
        "review-candidates[cand_456].check.visit[1]",
        "review-candidates[cand_456].worker.visit[1]",
    }
    assert killed.output == killed.reference == ["cand_123 v1", "cand_456 v1"]
    completed = [data["stepPath"] for event, data in log(killed.data) if event == "StepCompleted"]
    assert len(completed) == len(set(completed))
    assert completed.count(LOOPING) == 1
    killed.assert_nothing_committed_ran_again()
