"""A click group that imports a command's module only when that command runs.

``little-workflow --help`` and every command's start used to import all the command
modules, and through them the runtime, pydantic and every event model (~0.25 s), because
click builds each command to print its one-line help. Here each command is named with its
module and its one-line help: the listing is printed from those, and a command's module is
imported when the command is resolved (to run it or print its own ``--help``). This is
click's documented "LazyGroup" pattern, plus a help listing that builds no command.
``tests/cli/test_lazy_group.py`` checks the one-line helps against the commands' own
docstrings, so they cannot drift.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

__all__ = ["LazyCommand", "LazyGroup"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LazyCommand:
    """Where a command is defined, and what the group's help says of it."""

    #: The module defining the command (imported when the command is resolved).
    module: str
    #: The command object's attribute name in that module.
    attr: str
    #: The command's one-line help: the first paragraph of its docstring.
    summary: str


class LazyGroup(click.Group):
    """A group whose commands are imported by name, on first use."""

    def __init__(self, *args: Any, lazy: Mapping[str, LazyCommand], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.lazy or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        spec = self.lazy[cmd_name]
        command = getattr(importlib.import_module(spec.module), spec.attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{spec.module}.{spec.attr} is not a click command")
        # Kept, so a command resolved twice (help, then completion) is imported once.
        self.commands[cmd_name] = command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # click's own listing, with a stand-in per command that carries only its help
        # (truncated to the terminal by the same `get_short_help_str`), so that listing
        # the commands imports none of them.
        stand_ins = {
            name: self.commands.get(name) or click.Command(name, help=self.lazy[name].summary)
            for name in self.list_commands(ctx)
            if name in self.lazy or name in self.commands
        }
        listing = click.Group(self.name, commands=stand_ins)
        listing.format_commands(ctx, formatter)
