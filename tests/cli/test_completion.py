"""Shell completion (issue 21): run ids, workflow files, ``fork --at`` step paths.

Each case runs the real program in a subprocess with click's completion variables set, as
the bash, zsh and fish scripts click generates do (``_LITTLE_WORKFLOW_COMPLETE``,
``COMP_WORDS``, ``COMP_CWORD``), and reads what it offers.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from little_workflow.cli._complete import RunIdType
from little_workflow.cli._main import cli
from tests.cli.test_stdout_and_input import FLOWS, lw
from tests.runtime.support import REPO

SETUP = ("--setup", "tests.cli.flows.funcs:research_setup")


def complete(shell: str, line: str, *, cwd: Path = REPO) -> list[tuple[str, str]]:
    """What ``little-workflow`` offers for the last word of ``line`` in ``shell``:
    ``(type, value)`` pairs."""
    words = line.split(" ")
    env = {
        **os.environ,
        "_LITTLE_WORKFLOW_COMPLETE": f"{shell}_complete",
        "COMP_WORDS": line,
        # fish passes the word being completed, bash and zsh its index.
        "COMP_CWORD": words[-1] if shell == "fish" else str(len(words) - 1),
    }
    done = subprocess.run(
        [sys.executable, "-m", "little_workflow"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    if shell == "zsh":  # type, value, help ("_" for none): three lines each
        lines = done.stdout.splitlines()
        return [(lines[i], lines[i + 1]) for i in range(0, len(lines), 3)]
    return [tuple(line.split(",", 1)) for line in done.stdout.splitlines() if line]  # type: ignore[misc]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory with runs ``alpha_1``, ``alpha_2`` and ``beta_1`` of ask.yaml."""
    folder = tmp_path_factory.mktemp("completion") / "data"
    for run_id in ("alpha_1", "alpha_2", "beta_1"):
        ran = lw(
            folder, *SETUP, "run", str(FLOWS / "ask.yaml"), "--input", '{"question": "q"}',
            "--run-id", run_id,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stderr
    return folder


def test_run_ids_complete_in_bash_zsh_and_fish(data: Path) -> None:
    for shell in ("bash", "zsh", "fish"):
        offered = complete(shell, f"little-workflow --data-dir {data} show al")
        assert sorted(offered) == [("plain", "alpha_1"), ("plain", "alpha_2")], shell
    everything = complete("bash", f"little-workflow --data-dir {data} resume ")
    assert sorted(value for _, value in everything) == ["alpha_1", "alpha_2", "beta_1"]


def test_run_ids_complete_with_the_data_dir_given_after_the_command(data: Path) -> None:
    offered = complete("zsh", f"little-workflow events --data-dir {data} b")
    assert offered == [("plain", "beta_1")]


def test_fork_at_completes_the_step_paths_of_the_run(data: Path) -> None:
    for shell in ("bash", "zsh", "fish"):
        offered = complete(shell, f"little-workflow --data-dir {data} fork alpha_1 --at ")
        assert offered == [("plain", "researcher")], shell
    partial = complete("bash", f"little-workflow fork alpha_2 --data-dir {data} --at res")
    assert partial == [("plain", "researcher")]
    assert complete("bash", f"little-workflow --data-dir {data} fork nope --at ") == []


def test_workflows_complete_as_files() -> None:
    assert complete("bash", "little-workflow run tests/cli/flows/gr") == [
        ("file", "tests/cli/flows/gr")
    ]
    assert complete("fish", "little-workflow fork r1 --workflow exa") == [("file", "exa")]


def test_a_data_dir_without_a_store_completes_nothing_and_creates_nothing(
    tmp_path: Path,
) -> None:
    assert complete("bash", "little-workflow show ", cwd=tmp_path) == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_documented_setup_prints_a_script(shell: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "little_workflow"],
        env={**os.environ, "_LITTLE_WORKFLOW_COMPLETE": f"{shell}_source"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "_LITTLE_WORKFLOW_COMPLETE" in done.stdout
    readme = (REPO / "README.md").read_text()
    assert f"_LITTLE_WORKFLOW_COMPLETE={shell}_source little-workflow" in readme


def test_every_run_id_argument_completes_run_ids() -> None:
    ctx = click.Context(cli)
    assert isinstance(cli, click.Group)
    found = []
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        for param in command.params:
            if isinstance(param, click.Argument) and param.name == "run_id":
                assert isinstance(param.type, RunIdType), name
                found.append(name)
    assert {"show", "events", "resume", "retry", "replay", "fork", "cancel", "wait"} <= set(found)
