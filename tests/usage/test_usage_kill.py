"""What a resume replayed against what it paid, after a real SIGKILL mid-call.

The usage workflow runs in a child process (``little-workflow run``) that stops inside
its third model call (``second#1``, after ``first#0`` and ``second#0`` were committed)
and is SIGKILLed there, once the log holds that call's ``harness.model.called``. A fresh
process resumes it. The calls the model saw are counted outside both processes: no
committed call was made twice, the cut-off one was made again, and ``show --json`` says
pass 1 paid ``first#0 + second#0``, pass 2 paid ``second#1`` and replayed the first two,
with one call interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from tests.runtime.support import cli, cli_popen, wait_for_file
from tests.usage.flows import CALLS_ENV, FLOWS, HOLD_ENV, MARK_ENV, SETUP, USAGES
from tests.usage.test_usage import ZERO, tokens

pytestmark = pytest.mark.timeout(180)
RUN_ID = "run_kill"


def _called(data: Path) -> int:
    """How many ``harness.model.called`` the run's log holds (read from the file)."""
    if not (data / "little-workflow.db").exists():
        return 0
    conn = sqlite3.connect(data / "little-workflow.db")
    try:
        [(count,)] = conn.execute(
            "SELECT COUNT(*) FROM events WHERE run_id = ? AND type = 'harness.model.called'",
            (RUN_ID,),
        ).fetchall()
    finally:
        conn.close()
    return int(count)


def test_a_resume_after_a_sigkill_mid_call_replays_what_was_paid(tmp_path: Path) -> None:
    data, counted, mark = tmp_path / "data", tmp_path / "calls", tmp_path / "held"
    arguments = ["--setup", SETUP, "run", str(FLOWS / "usage.yaml"), "--run-id", RUN_ID]
    env = {CALLS_ENV: str(counted), HOLD_ENV: "second#1", MARK_ENV: str(mark)}
    first = cli_popen(data, *arguments, env=env)
    try:
        wait_for_file(mark, first)
        # The call's start is written behind (docs/runtime.md): wait until it is in the
        # log, so the kill cuts off a call the log knows was begun.
        deadline = time.monotonic() + 30
        while _called(data) < 3:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the third call's start never reached the log"
            time.sleep(0.01)
        os.kill(first.pid, signal.SIGKILL)
    finally:
        first.kill()
        first.communicate()
    assert first.returncode == -signal.SIGKILL

    # Before the resume: two answers paid, one call open (nobody can tell it is dead yet
    # from the log alone), nothing replayed.
    before = json.loads(cli(data, "show", RUN_ID, "--json").stdout)["usage"]
    assert before["paid"] == tokens(USAGES["first#0"] + USAGES["second#0"], calls=2)
    assert (before["open"], before["interrupted"], before["replayed"]) == (1, 0, ZERO)

    resumed = cli(data, "--setup", SETUP, "resume", RUN_ID, env={CALLS_ENV: str(counted)})
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == "two"

    # What the model saw, counted outside the processes: each committed call once; the
    # cut-off call twice, once by each process.
    seen = [line.split(" ") for line in counted.read_text().splitlines()]
    assert [key for key, _ in seen] == ["first#0", "second#0", "second#1", "second#1"]
    assert seen[2][1] == str(first.pid) != seen[3][1]

    usage = json.loads(cli(data, "show", RUN_ID, "--json").stdout)["usage"]
    paid_first = USAGES["first#0"] + USAGES["second#0"]
    assert usage["paid"] == tokens(paid_first + USAGES["second#1"], calls=3)
    assert usage["replayed"] == tokens(paid_first, calls=2)
    assert (usage["interrupted"], usage["open"]) == (1, 0)
    one, two = usage["passes"]
    assert (one["number"], one["reason"], one["interrupted"]) == (1, "start", 1)
    assert (one["paid"], one["replayed"]) == (tokens(paid_first, calls=2), ZERO)
    assert (two["number"], two["reason"], two["interrupted"]) == (2, "resume", 0)
    assert (two["paid"], two["replayed"]) == (
        tokens(USAGES["second#1"]),
        tokens(paid_first, calls=2),
    )
    [cut] = [call for call in usage["calls"] if call["cutOff"]]
    assert (cut["stepPath"], cut["calledIn"], cut["respondedIn"]) == ("second", 1, 2)
    assert cut["usage"] == tokens(USAGES["second#1"])
    assert cut["latency"] is None  # begun by one process, answered by another
    listed = {row["runId"]: row["usage"] for row in json.loads(cli(data, "runs", "--json").stdout)}
    assert listed[RUN_ID]["replayed"] == tokens(paid_first, calls=2)
    assert listed[RUN_ID]["interrupted"] == 1
    text = cli(data, "show", RUN_ID).stdout
    assert "interrupted  1 call cut off mid-call" in text
    assert "2 resume  paid 1 call" in text
