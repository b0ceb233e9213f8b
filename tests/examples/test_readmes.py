"""Every command the examples' READMEs give, run as written (scripted models, no delay).

Each README runs in a fresh directory holding only a link to ``examples/``, as a fresh
clone's root would: its runs, its working copies and its data directory land there.
Commands with a placeholder (``...``) are the real-provider ones; the provider switch
is tested against a local server in the other modules.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.examples.support import COMMAND, REPO, Example

_PROGRAM = ".venv/bin/little-workflow "
_SH_BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)
_IN_TABLE = re.compile(r"`(\.venv/bin/little-workflow [^`]+)`")


def _block_commands(readme: Path) -> list[str]:
    lines = [
        line.split(" # ", 1)[0].strip()
        for block in _SH_BLOCK.findall(readme.read_text(encoding="utf-8"))
        for line in block.splitlines()
    ]
    return [line for line in lines if line.startswith(_PROGRAM) and "..." not in line]


def _run_all(commands: list[str], cwd: Path) -> None:
    (cwd / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    env = Example(cwd).env()
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", str(COMMAND) + " " + command.removeprefix(_PROGRAM)],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{command}\n{done.stderr}"


@pytest.mark.parametrize("example", ["review_pipeline", "orchestrator", "outer_loop"])
def test_an_examples_readme_commands_work(example: str, tmp_path: Path) -> None:
    commands = _block_commands(REPO / "examples" / example / "README.md")
    assert len(commands) >= 3
    _run_all(commands, tmp_path)


def test_the_index_commands_work(tmp_path: Path) -> None:
    commands = _IN_TABLE.findall((REPO / "examples" / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 3
    _run_all(commands, tmp_path)


def test_the_code_forms_commands_work(tmp_path: Path) -> None:
    text = (REPO / "examples" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Written as code", 1)[1].split("\n## ", 1)[0]
    commands = [
        line
        for block in _SH_BLOCK.findall(section)
        for line in block.splitlines()
        if line.startswith(_PROGRAM)
    ]
    assert [command.split()[3:5] for command in commands] == [
        ["run", "examples.review_pipeline.workflow:review_pipeline"],
        ["run", "examples.orchestrator.workflow:tech_choice"],
        ["loop", "examples.outer_loop.workflow:announcement"],
    ]
    _run_all(commands, tmp_path)
