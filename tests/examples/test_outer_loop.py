"""The outer-loop example, run as its README says: ``loop`` and ``loop-status``, and a
loop killed mid-cycle and started again with the same command."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.examples.support import REPO, Example, committed, kill_when, normalized

SETUP = "examples.outer_loop.setup:setup"
WORKFLOW = "examples/outer_loop/workflow.yaml"
#: The same cycle written as code: ``loop`` takes ``module:function`` too.
CODE = "examples.outer_loop.workflow:announcement"
SUPERVISE = "examples.outer_loop.setup:supervise"
INPUT = (REPO / "examples/outer_loop/input.json").read_text(encoding="utf-8")


def _loop_args(loop_id: str, workflow: str = WORKFLOW) -> list[str]:
    return [
        "--setup",
        SETUP,
        "loop",
        workflow,
        "--input",
        INPUT,
        "--max-cycles",
        "5",
        "--supervise",
        SUPERVISE,
        "--outer-loop-id",
        loop_id,
    ]


def _models_and_supervisors(calls: Counter[str]) -> Counter[str]:
    return Counter({key: n for key, n in calls.items() if key.startswith(("model ", "supervise "))})


@pytest.fixture(scope="module")
def uncrashed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Counter[str], str]:
    """The final output, the calls and the stderr of a loop that nobody interrupts."""
    example = Example(tmp_path_factory.mktemp("uncrashed"))
    done = example.run(*_loop_args("ol_announce"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), normalized(example.calls()), done.stderr


def test_three_cycles_until_the_checker_is_satisfied(
    uncrashed: tuple[Any, Counter[str], str],
) -> None:
    output, calls, stderr = uncrashed
    assert "outer loop ol_announce done after 3 cycle(s)" in stderr
    assert output["cycles"] == 3
    assert "kill -9" in output["announcement"]
    assert "pip install little-workflow" in output["announcement"]
    assert len(output["announcement"]) <= 200
    assert Counter(line.split(" ", 1)[0] for line in calls.elements()) == {
        "model": 3,
        "tool": 3,
        "supervise": 3,
    }
    assert {key for key in calls if key.startswith("supervise ")} == {
        f"supervise ol_announce#{n}" for n in (1, 2, 3)
    }


def test_loop_status_shows_the_feedback_of_each_cycle(tmp_path: Path) -> None:
    example = Example(tmp_path)
    assert example.run(*_loop_args("ol_status")).returncode == 0
    status = example.run("loop-status", "ol_status", "--json")
    assert status.returncode == 0, status.stderr
    manifest = json.loads(status.stdout)
    assert [cycle["summary"] for cycle in manifest["cycles"]] == [
        'missing "kill -9"; missing "pip install little-workflow"',
        "too long: 268 characters, at most 200",
        None,
    ]
    assert manifest["result"]["kind"] == "done"


@pytest.mark.parametrize("workflow", [WORKFLOW, CODE], ids=["lwir", "code"])
def test_sigkill_mid_cycle_then_the_same_command_finishes_the_loop(
    uncrashed: tuple[Any, Counter[str], str], tmp_path: Path, workflow: str
) -> None:
    expected_output, expected_calls, _ = uncrashed
    example = Example(tmp_path)
    manifest = example.data_dir / "outer-loops" / "ol_announce.json"
    process = example.start(
        *_loop_args("ol_announce", workflow), env=example.env(EXAMPLE_DELAY="0.3")
    )

    def cycle_one_recorded() -> bool:
        try:
            return len(json.loads(manifest.read_text(encoding="utf-8"))["cycles"]) == 1
        except (OSError, ValueError):
            return False  # not written yet

    kill_when(process, cycle_one_recorded)
    listed = example.run("runs", "--json")
    paid = sum(
        (committed(example.events(run["runId"])) for run in json.loads(listed.stdout)),
        Counter[str](),
    )
    before = normalized(example.calls())

    again = example.run(*_loop_args("ol_announce", workflow))
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == expected_output
    after = normalized(example.calls()) - before
    # Cycle 1 was not run again, supervise() was asked once per cycle, and only the
    # model call in flight at the kill was made again.
    assert "supervise ol_announce#1" in paid
    assert _models_and_supervisors(after) == _models_and_supervisors(expected_calls - paid)
