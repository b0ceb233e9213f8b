"""What the commands print where, and inputs too long for a command line (issue 17, 5).

stdout carries a command's result alone: whatever a step writes to stdout (``print``,
from the loop's thread or another, ``os.write(1, ...)``, a child process) reaches stderr.
``--input @FILE`` and ``--input -`` (stdin) carry an input of any size to ``run``,
``fork`` and ``loop`` (``submit``: ``tests/cli/test_worker_logs.py``, which has a
PostgreSQL store); a file or stdin that cannot be read or is not JSON is invalid input
(exit 3) naming it, and nothing is stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.cli.flows.funcs import CHATTER
from tests.runtime.support import REPO

FLOWS = Path(__file__).with_name("flows")
#: Over the ~128 KiB a single command-line argument may be on Linux (MAX_ARG_STRLEN).
BIG = 200_000


def lw(
    data_dir: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m little_workflow --data-dir DATA_DIR ARGS``, with ``stdin`` as its input."""
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _runs(data_dir: Path) -> list[object]:
    listed = lw(data_dir, "runs", "--json")
    assert listed.returncode == 0, listed.stderr
    return list(json.loads(listed.stdout))


def test_what_a_step_writes_to_stdout_goes_to_stderr(tmp_path: Path) -> None:
    ran = lw(tmp_path, "run", str(FLOWS / "chatty.yaml"), "--input", '{"topic": "t"}')
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"topic": "t"}  # the output, and nothing else
    for said in CHATTER:
        assert f"{said}\n" in ran.stderr
        assert said not in ran.stdout


def test_resume_fork_and_loop_keep_stdout_for_the_result(tmp_path: Path) -> None:
    chatty = str(FLOWS / "chatty.yaml")
    # Killed once its first event is committed: the step runs in the resume.
    first = lw(
        tmp_path, "run", chatty, "--input", '{"topic": "a"}', "--run-id", "src",
        env={"LITTLE_WORKFLOW_CRASH_AFTER_EVENTS": "1"},
    )  # fmt: skip
    assert first.returncode != 0
    assert CHATTER[0] not in first.stderr
    resumed = lw(tmp_path, "resume", "src")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"topic": "a"}
    assert all(said in resumed.stderr for said in CHATTER)
    forked = lw(tmp_path, "fork", "src", "--at", "talk", "--input", '{"topic": "b"}')
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == {"topic": "b"}
    assert CHATTER[2] in forked.stderr
    looped = lw(
        tmp_path,
        "loop",
        str(FLOWS / "chatty_cycle.yaml"),
        "--input",
        '{"topic": "c"}',
        "--max-cycles",
        "1",
        "--supervise",
        "tests.cli.flows.funcs:done_at_once",
    )
    assert looped.returncode == 0, looped.stderr
    assert json.loads(looped.stdout) == {"topic": "c"}
    assert all(said in looped.stderr for said in CHATTER)


def test_an_input_too_long_for_a_command_line_comes_from_a_file_or_stdin(tmp_path: Path) -> None:
    big = {"blob": "b" * BIG}
    document = tmp_path / "input.json"
    document.write_text(json.dumps(big))
    expected = {"length": BIG, "head": "b" * 8}

    from_file = lw(tmp_path, "run", str(FLOWS / "measure.yaml"), "--input", f"@{document}")
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout) == expected
    from_stdin = lw(
        tmp_path, "run", str(FLOWS / "measure.yaml"), "--input", "-", stdin=json.dumps(big)
    )
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert json.loads(from_stdin.stdout) == expected

    # fork and loop read it the same way.
    small = lw(
        tmp_path,
        "run",
        str(FLOWS / "measure.yaml"),
        "--input",
        '{"blob": "s"}',
        "--run-id",
        "small",
    )
    assert small.returncode == 0, small.stderr
    forked = lw(tmp_path, "fork", "small", "--at", "size", "--input", f"@{document}")
    assert forked.returncode == 0, forked.stderr
    assert json.loads(forked.stdout) == expected
    looped = lw(
        tmp_path,
        "loop",
        str(FLOWS / "measure_cycle.yaml"),
        "--input",
        "-",
        "--max-cycles",
        "1",
        "--supervise",
        "tests.cli.flows.funcs:done_at_once",
        stdin=json.dumps(big),
    )
    assert looped.returncode == 0, looped.stderr
    assert json.loads(looped.stdout) == expected


def test_an_input_file_that_is_missing_unreadable_or_not_json_is_invalid_input(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    flow = str(FLOWS / "measure.yaml")
    missing = tmp_path / "missing.json"
    broken = tmp_path / "broken.json"
    broken.write_text('{"blob": ')
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    cases = [
        (f"@{missing}", None, f"'{missing}'", "No such file or directory"),
        (f"@{tmp_path}", None, f"'{tmp_path}'", "Is a directory"),
        (f"@{binary}", None, f"'{binary}'", "utf-8"),
        (f"@{broken}", None, f"'{broken}'", "is not valid JSON"),
        ("-", '{"blob": ', "stdin", "is not valid JSON"),
    ]
    for given, stdin, named, reason in cases:
        refused = lw(data_dir, "run", flow, "--input", given, stdin=stdin)
        assert refused.returncode == 3, (given, refused.stderr)
        assert refused.stdout == ""
        lines = refused.stderr.splitlines()
        assert len(lines) == 1, refused.stderr
        assert lines[0].startswith("error: invalid_input: ")
        assert named in lines[0], lines[0]
        assert reason in lines[0], lines[0]
    assert _runs(data_dir) == []
