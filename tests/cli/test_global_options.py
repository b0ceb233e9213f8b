"""The global options are accepted after any command too (issue 21), the nearest winning.

``little-workflow run x.yaml --setup mod:setup`` used to fail with "No such option"; the
group adds its own options to every command it resolves (``cli/_group.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from little_workflow.cli._main import cli
from tests.cli.test_stdout_and_input import FLOWS, lw

#: A value each global option that takes one accepts (a flag takes none).
SAMPLES = {
    "data_dir": "somewhere",
    "store": "sqlite:///somewhere.db",
    "lock_timeout": "1",
    "setup": "tests.cli.flows.funcs:research_setup",
    "max_payload_bytes": "1000",
}


def _globals() -> list[click.Option]:
    return [p for p in cli.params if isinstance(p, click.Option) and not p.is_eager]


def _commands() -> Iterator[tuple[str, ...]]:
    """Every command's words, sub-commands of groups included, resolved as a user's are."""
    ctx = click.Context(cli)
    assert isinstance(cli, click.Group)
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        assert command is not None
        yield (name,)
        if isinstance(command, click.Group):
            for sub in command.list_commands(click.Context(command, parent=ctx)):
                yield (name, sub)


def test_the_globals_are_every_option_of_the_root_but_help_and_version() -> None:
    names = {p.name for p in _globals()}
    assert names == {*SAMPLES, "debug", "no_import_functions"}


@pytest.mark.parametrize("words", list(_commands()), ids=" ".join)
def test_every_command_accepts_every_global_option_after_its_name(words: tuple[str, ...]) -> None:
    runner = CliRunner()
    for param in _globals():
        assert param.name is not None
        given = [param.opts[0]] if param.is_flag else [param.opts[0], SAMPLES[param.name]]
        # --help is eager: it ends the command once the line parsed, before any work.
        result = runner.invoke(cli, [*words, *given, "--help"], prog_name="little-workflow")
        assert result.exit_code == 0, (words, given, result.output)
        assert "Usage: little-workflow " + " ".join(words) in result.output


def test_run_with_setup_and_data_dir_after_the_command(tmp_path: Path) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    ran = lw(
        before,
        "run", str(FLOWS / "ask.yaml"), "--input", '{"question": "q"}', "--run-id", "r1",
        "--setup", "tests.cli.flows.funcs:research_setup", "--data-dir", str(after),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == "an answer"
    # The data directory given after the command wins over the one before it.
    assert [run["runId"] for run in json.loads(lw(after, "runs", "--json").stdout)] == ["r1"]
    assert json.loads(lw(before, "runs", "--json").stdout) == []


def test_validate_and_a_sub_command_of_a_group_take_them_after(tmp_path: Path) -> None:
    checked = lw(
        tmp_path, "validate", str(FLOWS / "ask.yaml"), "--setup",
        "tests.cli.flows.funcs:research_setup", "--json",
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["setup"] == "tests.cli.flows.funcs:research_setup"
    store = tmp_path / "other.db"
    listed = lw(tmp_path, "schedule", "list", "--store", f"sqlite:///{store}", "--json")
    assert listed.returncode == 0, listed.stderr
    assert store.exists()
    assert not (tmp_path / "little-workflow.db").exists()


def test_debug_after_the_command_shows_the_traceback(tmp_path: Path) -> None:
    plain = lw(tmp_path, "run", str(FLOWS / "greet.yaml"))
    debug = lw(tmp_path, "run", str(FLOWS / "greet.yaml"), "--debug")
    assert plain.returncode == debug.returncode == 3
    assert "Traceback" not in plain.stderr
    assert "Traceback (most recent call last)" in debug.stderr
    assert "error: run_input_invalid" in debug.stderr
