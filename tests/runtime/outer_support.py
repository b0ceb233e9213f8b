"""Step functions and a supervisor for the outer-loop tests, steered by the environment.

Everything that runs appends a line to the file ``LW_OUTER_CALLS`` names, so a test
counts calls outside the process that made them (a SIGKILLed process included):
``step <run id> <step path> <pid>`` and ``supervise <outer loop id> <cycle> <run id> <pid>``.

* ``LW_OUTER_KILL_CYCLE=n``: ``polish`` SIGKILLs its own process in cycle ``n``, after
  ``draft`` of that cycle was committed (mid-cycle).
* ``LW_OUTER_DONE_AT=n``: ``supervise`` answers ``Done`` at cycle ``n``, ``Continue``
  before (always ``Continue`` if unset).
* ``LW_OUTER_ANSWER=tag``: put into every answer, so an answer given by another process
  (or a later one) is told apart from the committed one.
* ``LW_OUTER_ENTERED`` / ``LW_OUTER_RELEASE``: ``draft`` of cycle 1 writes its pid to the
  first file, then waits (a minute at most) until the second exists.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.runtime import Continue, Cycle, Done, StepContext
from tests.storage.raw_sqlite import event_json

FLOWS = Path(__file__).resolve().parent / "flows"
#: The cycle workflow: ``draft`` then ``polish`` (both counted), output ``polish``'s.
FLOW = FLOWS / "outer_cycle.yaml"
#: Another workflow (for the goal mismatch).
OTHER_FLOW = FLOWS / "outer_other.yaml"
SUPERVISE = "tests.runtime.outer_support:supervise"

CALLS_ENV = "LW_OUTER_CALLS"
KILL_ENV = "LW_OUTER_KILL_CYCLE"
DONE_AT_ENV = "LW_OUTER_DONE_AT"
ANSWER_ENV = "LW_OUTER_ANSWER"
ENTERED_ENV = "LW_OUTER_ENTERED"
RELEASE_ENV = "LW_OUTER_RELEASE"


def record(*fields: object) -> None:
    """Append one line to the calls file (one ``write`` on an ``O_APPEND`` descriptor)."""
    target = os.environ.get(CALLS_ENV)
    if not target:
        return
    line = " ".join(str(field) for field in (*fields, os.getpid())) + "\n"
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _gate(cycle: int) -> None:
    entered, release = os.environ.get(ENTERED_ENV), os.environ.get(RELEASE_ENV)
    if cycle != 1 or not entered or not release:
        return
    Path(entered).write_text(f"{os.getpid()}\n")
    deadline = time.monotonic() + 60
    while not Path(release).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the step")
        time.sleep(0.01)


def draft(ctx: StepContext, topic: str, cycle: int, previous: list[JsonValue]) -> dict[str, object]:
    """The first step of a cycle."""
    record("step", ctx.run_id, ctx.step_path)
    _gate(cycle)
    return {"text": f"{topic} v{cycle}", "previous": len(previous)}


def polish(ctx: StepContext, draft: dict[str, JsonValue], cycle: int) -> dict[str, object]:
    """The second step of a cycle; SIGKILLs its process in cycle ``LW_OUTER_KILL_CYCLE``."""
    record("step", ctx.run_id, ctx.step_path)
    if os.environ.get(KILL_ENV) == str(cycle):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"text": f"{draft['text']} (polished)", "cycle": cycle}


def supervise(cycle: Cycle) -> Done | Continue:
    """``Done`` at cycle ``LW_OUTER_DONE_AT``, ``Continue`` before; tagged ``LW_OUTER_ANSWER``."""
    record("supervise", cycle.outer_loop_id, cycle.cycle_number, cycle.run_id)
    tag = os.environ.get(ANSWER_ENV, "first")
    if str(cycle.cycle_number) == os.environ.get(DONE_AT_ENV):
        return Done({"answer": tag, "last": cycle.output})
    return Continue(f"{tag}: cycle {cycle.cycle_number} reviewed")


def read_calls(path: Path) -> list[list[str]]:
    """The lines ``record`` wrote, split into fields (without the pid)."""
    if not path.exists():
        return []
    return [line.split()[:-1] for line in path.read_text().splitlines()]


def supervised(path: Path) -> list[int]:
    """The cycle numbers ``supervise`` was called for, in call order."""
    return [int(fields[2]) for fields in read_calls(path) if fields[0] == "supervise"]


def steps(path: Path) -> list[tuple[str, str]]:
    """``(run id, step path)`` of every step call, in call order."""
    return [(fields[1], fields[2]) for fields in read_calls(path) if fields[0] == "step"]


def manifest_file(data_dir: Path, outer_loop_id: str) -> Path:
    """``outer-loops/{outerLoopId}.json`` in ``data_dir``."""
    return data_dir / "outer-loops" / f"{outer_loop_id}.json"


def manifest(data_dir: Path, outer_loop_id: str) -> Any:
    """The manifest file, parsed as plain JSON."""
    return json.loads(manifest_file(data_dir, outer_loop_id).read_text())


def events(data_dir: Path, run_id: str) -> list[tuple[str, Any]]:
    """``(type, fields)`` of ``run_id``'s committed events, read straight from SQLite."""
    conn = sqlite3.connect(f"file:{data_dir / 'little-workflow.db'}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, data FROM events WHERE run_id = ? ORDER BY seq", (run_id,)
        ).fetchall()
    finally:
        conn.close()
    return [(type_name, event_json(data)) for type_name, data in rows]


def completed_steps(data_dir: Path, run_id: str) -> set[str]:
    """The step paths with a committed ``StepCompleted`` in ``run_id``'s log."""
    return {
        fields["stepPath"]
        for type_name, fields in events(data_dir, run_id)
        if type_name == "StepCompleted"
    }
