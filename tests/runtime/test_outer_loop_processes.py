"""Outer loops across real processes: the seed's three kill scenarios, racing callers, the CLI.

Every kill is a real ``SIGKILL`` of a ``little-workflow loop`` process: at the fault
points ``outer_loop.before_cycle`` and ``outer_loop.after_supervise``
(``LITTLE_WORKFLOW_FAULT``), or by a step function killing its own process in the middle
of a cycle. Step and ``supervise()`` calls are counted in a file outside the processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from little_workflow.runtime import FAULT_ENV
from tests.runtime.outer_support import (
    ANSWER_ENV,
    CALLS_ENV,
    DONE_AT_ENV,
    ENTERED_ENV,
    FLOW,
    KILL_ENV,
    RELEASE_ENV,
    SUPERVISE,
    completed_steps,
    events,
    manifest,
    manifest_file,
    steps,
    supervised,
)
from tests.runtime.support import cli, cli_popen, wait_for_file

INPUT = {"topic": "tea"}
LOOP_ID = "ol_proc"
SWITCHES = (FAULT_ENV, KILL_ENV, DONE_AT_ENV, ANSWER_ENV, ENTERED_ENV, RELEASE_ENV)


def loop_args(max_cycles: int = 3, loop_id: str = LOOP_ID, input: object = INPUT) -> list[str]:
    return [
        "loop",
        str(FLOW),
        "--input",
        json.dumps(input),
        "--max-cycles",
        str(max_cycles),
        "--supervise",
        SUPERVISE,
        "--outer-loop-id",
        loop_id,
    ]


def environment(calls: Path, **switches: str) -> dict[str, str]:
    """The calls file and ``switches``; every other switch cleared (also if inherited)."""
    env = {name: value for name, value in os.environ.items() if name not in SWITCHES}
    return {**env, CALLS_ENV: str(calls), **switches}


def run_loop(
    data: Path, calls: Path, switches: Mapping[str, str] | None = None, **options: object
) -> subprocess.CompletedProcess[str]:
    args = loop_args(**options)  # type: ignore[arg-type]
    return cli(data, *args, env=environment(calls, **(switches or {})))


def polished(cycle: int) -> dict[str, object]:
    return {"text": f"tea v{cycle} (polished)", "cycle": cycle}


def assert_killed(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr)


def assert_one_call_per_step(calls: Path, run_ids: list[str]) -> None:
    assert sorted(steps(calls)) == sorted(
        (run_id, path) for run_id in run_ids for path in ("draft", "polish")
    )


def test_killed_before_cycle_2_starts_then_resumed(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    killed = run_loop(data, calls, {FAULT_ENV: "outer_loop.before_cycle#2", DONE_AT_ENV: "3"})
    assert_killed(killed)
    doc = manifest(data, LOOP_ID)
    pending = doc["pendingCycleRunId"]
    assert len(doc["cycles"]) == 1
    assert pending is not None
    assert doc["result"] is None
    assert pending != doc["cycles"][0]["runId"]
    assert events(data, pending) == []  # written before the cycle started
    assert supervised(calls) == [1]
    # The dead process's lock file is still there; the next caller recovers it.
    assert (data / "locks" / f"outer-loop-{LOOP_ID}.lock").exists()

    resumed = run_loop(data, calls, {DONE_AT_ENV: "3"})
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"answer": "first", "last": polished(3)}
    doc = manifest(data, LOOP_ID)
    run_ids = [cycle["runId"] for cycle in doc["cycles"]]
    assert run_ids[1] == pending
    assert supervised(calls) == [1, 2, 3]
    assert_one_call_per_step(calls, run_ids)
    assert list((data / "locks").iterdir()) == []


def test_killed_mid_cycle_2_then_its_run_resumes_under_the_same_run_id(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    killed = run_loop(data, calls, {KILL_ENV: "2", DONE_AT_ENV: "3"})
    assert_killed(killed)
    doc = manifest(data, LOOP_ID)
    pending = doc["pendingCycleRunId"]
    assert len(doc["cycles"]) == 1
    assert pending is not None
    # draft was committed; polish was running when the process died.
    assert completed_steps(data, pending) == {"draft"}
    assert steps(calls)[-2:] == [(pending, "draft"), (pending, "polish")]
    assert supervised(calls) == [1]
    before = len(steps(calls))

    resumed = run_loop(data, calls, {DONE_AT_ENV: "3"})
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"answer": "first", "last": polished(3)}
    doc = manifest(data, LOOP_ID)
    assert doc["cycles"][1]["runId"] == pending
    assert doc["cycles"][1]["output"] == polished(2)
    assert "RunResumed" in [type_name for type_name, _ in events(data, pending)]
    # After the kill, the committed draft of cycle 2 never ran again; polish did.
    after = steps(calls)[before:]
    assert (pending, "draft") not in after
    assert after.count((pending, "polish")) == 1
    assert supervised(calls) == [1, 2, 3]


def test_killed_after_supervise_2_committed_then_the_committed_answer_wins(
    tmp_path: Path,
) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    # The first process: Continue at cycle 2 ("first: ..."), killed right after its commit.
    killed = run_loop(
        data,
        calls,
        {FAULT_ENV: "outer_loop.after_supervise#2", DONE_AT_ENV: "3", ANSWER_ENV: "first"},
    )
    assert_killed(killed)
    doc = manifest(data, LOOP_ID)
    pending = doc["pendingCycleRunId"]
    assert len(doc["cycles"]) == 1
    assert pending is not None
    last_type, last = events(data, pending)[-1]
    assert last_type == "OuterLoopCycleCompleted"
    assert last["result"] == {
        "kind": "continue",
        "finalOutput": None,
        "summary": "first: cycle 2 reviewed",
    }
    assert supervised(calls) == [1, 2]

    # The resume's supervisor would now answer Done at cycle 2: it is not asked.
    resumed = run_loop(data, calls, {DONE_AT_ENV: "2", ANSWER_ENV: "second"})
    assert resumed.returncode == 0, resumed.stderr
    assert supervised(calls) == [1, 2, 3]
    doc = manifest(data, LOOP_ID)
    assert [cycle["summary"] for cycle in doc["cycles"]] == [
        "first: cycle 1 reviewed",
        "first: cycle 2 reviewed",
        "second: cycle 3 reviewed",
    ]
    assert doc["cycles"][1]["runId"] == pending
    assert doc["result"] == {"kind": "exhausted", "finalOutput": polished(3)}
    assert json.loads(resumed.stdout) == polished(3)
    assert "exhausted after 3 cycle(s)" in resumed.stderr
    assert_one_call_per_step(calls, [cycle["runId"] for cycle in doc["cycles"]])


def test_killed_after_a_done_answer_was_committed_returns_that_answer(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    killed = run_loop(data, calls, {FAULT_ENV: "outer_loop.after_supervise#2", DONE_AT_ENV: "2"})
    assert_killed(killed)
    assert manifest(data, LOOP_ID)["result"] is None
    resumed = run_loop(data, calls, {DONE_AT_ENV: "2", ANSWER_ENV: "second"})
    assert resumed.returncode == 0, resumed.stderr
    final = {"answer": "first", "last": polished(2)}
    assert json.loads(resumed.stdout) == final
    assert manifest(data, LOOP_ID)["result"] == {"kind": "done", "finalOutput": final}
    assert supervised(calls) == [1, 2]


def _has_open(pid: int, path: Path) -> bool:
    """Whether process ``pid`` has ``path`` open (Linux ``/proc``)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


def test_two_processes_started_at_once_share_one_supervise_per_cycle(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    entered, release = tmp_path / "entered", tmp_path / "release"
    env = environment(
        calls, **{DONE_AT_ENV: "2", ENTERED_ENV: str(entered), RELEASE_ENV: str(release)}
    )
    processes = [cli_popen(data, *loop_args(), env=env) for _ in range(2)]
    try:
        # One process holds the loop, inside cycle 1; the other has opened the store and
        # is at the loop's lock.
        wait_for_file(entered, processes[0])
        holder = int(entered.read_text())
        (waiter,) = (p for p in processes if p.pid != holder)
        deadline = time.monotonic() + 30
        while not _has_open(waiter.pid, (data / "little-workflow.db").absolute()):
            assert waiter.poll() is None, waiter.communicate()
            assert time.monotonic() < deadline, "the second process never opened the store"
            time.sleep(0.01)
        assert waiter.poll() is None
        release.touch()
        results = [p.communicate(timeout=60) for p in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.communicate()
    assert [p.returncode for p in processes] == [0, 0], results
    outputs = [json.loads(out) for out, _ in results]
    assert outputs[0] == outputs[1] == {"answer": "first", "last": polished(2)}
    assert supervised(calls) == [1, 2]
    # Everything ran in the process that held the loop; the other only read the result.
    pids = {line.split()[-1] for line in calls.read_text().splitlines()}
    assert pids == {str(holder)}
    assert_one_call_per_step(calls, [c["runId"] for c in manifest(data, LOOP_ID)["cycles"]])


def test_loop_status_prints_the_manifest(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    assert run_loop(data, calls, {DONE_AT_ENV: "1"}, max_cycles=2).returncode == 0
    status = cli(data, "loop-status", LOOP_ID, "--json")
    assert status.returncode == 0, status.stderr
    recorded = manifest(data, LOOP_ID)
    assert json.loads(status.stdout) == recorded
    assert json.loads(status.stdout)["result"]["kind"] == "done"
    table = cli(data, "loop-status", LOOP_ID)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[0].startswith(f"{LOOP_ID}  done after 1 cycle(s)")
    [cycle] = recorded["cycles"]
    assert any(line.split()[:3] == ["1", cycle["runId"], cycle["status"]]
               for line in table.stdout.splitlines())  # fmt: skip

    missing = cli(data, "loop-status", "ol_nowhere")
    assert missing.returncode == 3
    assert "outer_loop_not_found" in missing.stderr


def test_the_cli_refuses_a_mismatched_resume(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    assert run_loop(data, calls, {DONE_AT_ENV: "1"}).returncode == 0
    content = manifest_file(data, LOOP_ID).read_bytes()
    before = calls.read_text()
    for options in ({"max_cycles": 4}, {"input": {"topic": "coffee"}}):
        refused = run_loop(data, calls, {DONE_AT_ENV: "1"}, **options)
        assert refused.returncode == 1, refused.stderr
        assert "runtime_config_error" in refused.stderr
        assert refused.stdout == ""
    assert calls.read_text() == before
    assert manifest_file(data, LOOP_ID).read_bytes() == content


def test_the_cli_refuses_a_bad_supervise_reference(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    for reference in ("no_colon", "tests.runtime.outer_support:missing", "nowhere_at_all:x"):
        args = loop_args()
        args[args.index(SUPERVISE)] = reference
        result = cli(data, *args, env=environment(calls))
        assert result.returncode == 2, (reference, result.stderr)
        assert "--supervise" in result.stderr
    assert not calls.exists()


def _stopped(process: subprocess.Popen[str], signum: signal.Signals, err: str) -> None:
    """The documented exits of a ``loop`` caller stopped by a signal: Ctrl-C (SIGINT) is
    exit 130 with a one-line message; SIGTERM ends it as its default action does."""
    if signum == signal.SIGINT:
        assert process.returncode == 130, err
        assert err.strip().splitlines()[-1] == "error: interrupted; the run can be resumed"
    else:
        assert process.returncode == -signal.SIGTERM, err


def _finished_and_consistent(data: Path, calls: Path) -> None:
    """Both cycles were supervised once, and a later call returns the loop's result,
    running nothing."""
    assert supervised(calls) == [1, 2]
    assert manifest(data, LOOP_ID)["result"]["kind"] == "done"
    before = calls.read_text()
    again = run_loop(data, calls, {DONE_AT_ENV: "2"})
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"answer": "first", "last": polished(2)}
    assert calls.read_text() == before


SIGNALS = pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"]
)


@SIGNALS
def test_a_caller_waiting_for_the_loop_stopped_by_a_signal_leaves_it_to_its_holder(
    tmp_path: Path, signum: signal.Signals
) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    entered, release = tmp_path / "entered", tmp_path / "release"
    env = environment(
        calls, **{DONE_AT_ENV: "2", ENTERED_ENV: str(entered), RELEASE_ENV: str(release)}
    )
    holder = cli_popen(data, *loop_args(), env=env)
    waiter: subprocess.Popen[str] | None = None
    try:
        wait_for_file(entered, holder)
        waiter = cli_popen(data, *loop_args(), env=env)
        # The second caller opens the store, then polls the loop's lock, which the first
        # holds while it is inside cycle 1. The lock file is opened only for each try, so
        # there is no trace of the wait to look for: give it a moment to get there.
        deadline = time.monotonic() + 30
        while not _has_open(waiter.pid, (data / "little-workflow.db").absolute()):
            assert waiter.poll() is None, waiter.communicate()
            assert time.monotonic() < deadline, "the second caller never opened the store"
            time.sleep(0.01)
        time.sleep(0.5)
        assert waiter.poll() is None
        waiter.send_signal(signum)
        _, waiter_err = waiter.communicate(timeout=60)
        release.touch()
        out, err = holder.communicate(timeout=60)
    finally:
        for process in (holder, waiter):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate()
    _stopped(waiter, signum, waiter_err)
    # The holder was not disturbed; the stopped caller ran nothing.
    assert holder.returncode == 0, err
    assert json.loads(out) == {"answer": "first", "last": polished(2)}
    assert {line.split()[-1] for line in calls.read_text().splitlines()} == {str(holder.pid)}
    assert_one_call_per_step(calls, [c["runId"] for c in manifest(data, LOOP_ID)["cycles"]])
    _finished_and_consistent(data, calls)


@SIGNALS
def test_a_caller_driving_the_loop_stopped_by_a_signal_mid_cycle_resumes(
    tmp_path: Path, signum: signal.Signals
) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    entered, release = tmp_path / "entered", tmp_path / "release"
    env = environment(
        calls, **{DONE_AT_ENV: "2", ENTERED_ENV: str(entered), RELEASE_ENV: str(release)}
    )
    caller = cli_popen(data, *loop_args(), env=env)
    try:
        # Inside cycle 1's first step (a sync function, on a thread): stop the caller,
        # then let the step's thread end, as a step would.
        wait_for_file(entered, caller)
        caller.send_signal(signum)
        release.touch()
        _, err = caller.communicate(timeout=60)
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.communicate()
    _stopped(caller, signum, err)
    # The manifest names the cycle that was under way; the next call resumes it under the
    # same run id, and the loop ends as an uninterrupted one does.
    pending = manifest(data, LOOP_ID)["pendingCycleRunId"]
    assert pending is not None
    resumed = run_loop(data, calls, {DONE_AT_ENV: "2"})
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"answer": "first", "last": polished(2)}
    assert manifest(data, LOOP_ID)["cycles"][0]["runId"] == pending
    # Each step ran once, but the one the signal cut off, which may have run again.
    made, cut = steps(calls), (pending, "draft")
    assert made.count(cut) in (1, 2)
    if made.count(cut) == 2:
        made.remove(cut)
    run_ids = [cycle["runId"] for cycle in manifest(data, LOOP_ID)["cycles"]]
    assert sorted(made) == sorted((run, path) for run in run_ids for path in ("draft", "polish"))
    committed = [
        fields["stepPath"] for kind, fields in events(data, pending) if kind == "StepCompleted"
    ]
    assert sorted(committed) == ["draft", "polish"]
    _finished_and_consistent(data, calls)
