"""The lazy command group lists and runs the same commands as an eager one would."""

from __future__ import annotations

import importlib

import click
import pytest

from little_workflow.cli._group import LazyGroup
from little_workflow.cli._inspect import RUN_STATUSES
from little_workflow.cli._main import COMMANDS, cli
from little_workflow.events import RunStatus


def _real(name: str) -> click.Command:
    spec = COMMANDS[name]
    command = getattr(importlib.import_module(spec.module), spec.attr)
    assert isinstance(command, click.Command)
    return command


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_summary_is_the_first_paragraph_of_the_commands_help(name: str) -> None:
    command = _real(name)
    assert command.name == name
    assert COMMANDS[name].summary == command.get_short_help_str(limit=10_000)


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_listing_is_what_click_prints_for_the_built_commands(width: int) -> None:
    # A fresh lazy group (the module's `cli` may have built some commands already).
    lazy = LazyGroup("little-workflow", lazy=COMMANDS)
    eager = click.Group("little-workflow", commands={name: _real(name) for name in COMMANDS})
    printed = []
    for group in (lazy, eager):
        formatter = click.HelpFormatter(width=width)
        group.format_commands(click.Context(group), formatter)
        printed.append(formatter.getvalue())
    assert printed[0] == printed[1]
    assert all(f"  {name} " in printed[0] for name in COMMANDS)
    assert lazy.commands == {}  # listing built none of them


def test_a_command_resolves_to_its_own_object_once() -> None:
    group = LazyGroup("little-workflow", lazy=COMMANDS)
    context = click.Context(group)
    assert group.get_command(context, "runs") is _real("runs")
    assert group.get_command(context, "runs") is group.commands["runs"]
    assert group.get_command(context, "nonexistent") is None
    assert group.list_commands(context) == sorted(COMMANDS)


def test_the_cli_is_the_lazy_group_of_every_command() -> None:
    assert isinstance(cli, LazyGroup)
    assert cli.lazy == COMMANDS


def test_the_status_choices_are_the_run_statuses_in_order() -> None:
    assert tuple(status.value for status in RunStatus) == RUN_STATUSES
