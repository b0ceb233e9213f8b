"""Refusals and messages of the commands (issue 17, 5): what a user gets wrong is said
in one line, with the exit code the CLI documents, and nothing is stored.

An empty ``--run-id`` (or ``--outer-loop-id``) is invalid, not "make one up"; a
``--supervise`` function that cannot be called as ``supervise(cycle)`` is a configuration
error naming it, before any cycle runs; a 10,000-character value is quoted shortened; a
``fork`` says the new run's id before it runs, so a fork killed mid-way is found and
resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_stdout_and_input import FLOWS, lw
from tests.runtime.support import REPO, wait_for_file

MEASURE = str(FLOWS / "measure.yaml")
LONG = "x" * 10_000


def _runs(data_dir: Path) -> list[str]:
    listed = lw(data_dir, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    return [run["runId"] for run in json.loads(listed.stdout)]


def _one_line(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_an_empty_run_id_is_invalid(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    line = _one_line(lw(data_dir, "run", MEASURE, "--input", '{"blob": "a"}', "--run-id", ""), 3)
    assert line == "error: invalid_id: invalid run id '': it is empty"
    assert _runs(data_dir) == []

    made = lw(data_dir, "run", MEASURE, "--input", '{"blob": "a"}', "--run-id", "src")
    assert made.returncode == 0, made.stderr
    forked = lw(data_dir, "fork", "src", "--at", "size", "--run-id", "")
    assert forked.returncode == 3, forked.stderr
    assert forked.stderr.splitlines()[-1] == "error: invalid_id: invalid run id '': it is empty"
    looped = lw(
        data_dir,
        "loop",
        str(FLOWS / "measure_cycle.yaml"),
        "--input",
        '{"blob": "a"}',
        "--max-cycles",
        "1",
        "--supervise",
        "tests.cli.flows.funcs:done_at_once",
        "--outer-loop-id",
        "",
    )
    line = _one_line(looped, 3)
    assert line == "error: invalid_id: invalid outer loop id '': it is empty"
    assert _runs(data_dir) == ["src"]


def test_a_supervise_function_with_the_wrong_signature_is_a_configuration_error(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    looped = lw(
        data_dir,
        "loop",
        str(FLOWS / "measure_cycle.yaml"),
        "--input",
        '{"blob": "a"}',
        "--max-cycles",
        "2",
        "--supervise",
        "tests.cli.flows.funcs:supervise_two",
    )
    line = _one_line(looped, 3)
    assert line.startswith(
        "error: supervise_invalid: supervise function "
        "tests.cli.flows.funcs:supervise_two(cycle: 'Cycle', verdict: 'str') cannot be "
        "called as supervise(cycle): missing a required argument: 'verdict'"
    ), line
    assert _runs(data_dir) == []  # refused before the first cycle ran


def test_long_values_are_shortened_in_messages(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    made = lw(data_dir, "run", MEASURE, "--input", '{"blob": "a"}', "--run-id", "src")
    assert made.returncode == 0, made.stderr
    quoted = repr(LONG)[:77] + "..."  # quoted values are cut to 80 characters
    for args, code in (
        (("fork", "src", "--at", LONG), "fork_unknown_step"),
        (("fork", LONG, "--at", "size"), "invalid_id"),
        (("run", MEASURE, "--input", '{"blob": "a"}', "--run-id", LONG), "invalid_id"),
        (("resume", LONG), "invalid_id"),
    ):
        refused = lw(data_dir, *args)
        assert refused.returncode == 3, refused.stderr
        assert refused.stdout == ""
        error = refused.stderr.splitlines()[-1]
        assert error.startswith(f"error: {code}: "), error
        assert quoted in error
        assert len(refused.stderr) < 600, refused.stderr  # not 10,000 characters, twice
    assert _runs(data_dir) == ["src"]


@pytest.mark.timeout(180)
def test_a_fork_killed_mid_way_said_its_id_first_and_is_resumed_by_it(tmp_path: Path) -> None:
    data_dir, mark, gate_open = tmp_path / "data", tmp_path / "mark", tmp_path / "open"
    env = {"LW_TEST_GATE_MARK": str(mark), "LW_TEST_GATE_OPEN": str(gate_open)}
    gate_open.touch()
    source = lw(
        data_dir, "run", str(FLOWS / "gated.yaml"), "--input", '{"blob": "a"}', "--run-id", "src",
        env=env,
    )  # fmt: skip
    assert source.returncode == 0, source.stderr
    gate_open.unlink()
    mark.unlink()

    fork = subprocess.Popen(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir),
         "fork", "src", "--at", "wait", "--input", '{"blob": "b"}'],
        cwd=REPO, env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # Held at the gate: the fork's run exists, its step is running. A real kill now.
    wait_for_file(mark, fork)
    fork.send_signal(signal.SIGKILL)
    out, err = fork.communicate(timeout=60)
    assert fork.returncode == -signal.SIGKILL
    assert out == ""
    first = err.splitlines()[0]
    assert first.startswith("forking run 'src' at 'wait' into run 'run_"), err
    new_id = first.rsplit("'", 2)[-2]
    assert set(_runs(data_dir)) == {"src", new_id}

    gate_open.touch()
    resumed = lw(data_dir, "resume", new_id, env=env)
    assert resumed.returncode == 0, resumed.stderr
    # The step before the fork point is the source's, kept; the gate ran on the new input.
    assert json.loads(resumed.stdout) == {
        "size": {"length": 1, "head": "a"},
        "wait": "passed b",
    }
