"""A click group that imports a command's module only when that command runs.

``little-workflow --help`` and every command's start used to import all the command
modules, and through them the runtime, pydantic and every event model (~0.25 s), because
click builds each command to print its one-line help. Here each command is named with its
module and its one-line help: the listing is printed from those, and a command's module is
imported when the command is resolved (to run it or print its own ``--help``). This is
click's documented "LazyGroup" pattern, plus a help listing that builds no command.
``tests/cli/test_lazy_group.py`` checks the one-line helps against the commands' own
docstrings, so they cannot drift.

The group's own options (``--setup``, ``--store``, ...) are accepted after any command
too, at any depth (``little-workflow run x.yaml --setup m:s``, ``little-workflow
schedule add ... --store URL``): when a command is resolved, a copy of each is added to
it (and, for a sub-group, to each of its commands), and its callback is wrapped so that
the values given on its command line are merged over the ones given before it, the
nearest winning, and the group's ``obj`` built again from them. Done here once, for
every command: no command declares them itself (a command that did would clash, and
``tests/cli/test_global_options.py`` would say so).
"""

from __future__ import annotations

import copy
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

__all__ = ["LazyCommand", "LazyGroup", "global_values"]

#: Set on a command once the global options were added to it.
_MARK = "_little_workflow_globals"


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

    def __init__(
        self,
        *args: Any,
        lazy: Mapping[str, LazyCommand],
        global_options: Callable[[click.Context, dict[str, Any]], Any] | None = None,
        argument_types: Callable[[], Mapping[str, click.ParamType[Any]]] | None = None,
        **kwargs: Any,
    ) -> None:
        """``global_options``: builds the context's ``obj`` from the global options'
        values (by parameter name) when a command is given some after its name.
        ``argument_types``: the type of every command's string argument of that name
        (``run_id``: one that completes run ids in the shell); called when the first
        command is resolved, so that listing the commands imports none of it."""
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy)
        self.make_obj = global_options
        self.argument_types = argument_types or dict

    def global_params(self) -> list[click.Option]:
        """The options a command accepts after its name: the group's own, but help and
        ``--version`` (eager: they act as they are parsed, before any command)."""
        return [
            param for param in self.params if isinstance(param, click.Option) and not param.is_eager
        ]

    def _add_globals(self, command: click.Command) -> None:
        if self.make_obj is None or getattr(command, _MARK, False):
            return
        setattr(command, _MARK, True)
        types = self.argument_types()
        for param in command.params:
            wanted = types.get(param.name or "")
            if (
                wanted is not None
                and isinstance(param, click.Argument)
                and param.type is click.STRING
            ):
                param.type = wanted
        taken = {opt for param in command.params for opt in param.opts + param.secondary_opts}
        added = []
        for param in self.global_params():
            clash = taken.intersection(param.opts + param.secondary_opts)
            if clash:
                raise TypeError(
                    f"command {command.name!r} declares {sorted(clash)}, a global option"
                )
            added.append(copy.copy(param))
        command.params.extend(added)
        names = [param.name for param in added if param.name is not None]
        make_obj = self.make_obj
        original = command.callback

        @functools.wraps(original or (lambda: None))
        def callback(*args: Any, **kwargs: Any) -> Any:
            for name in names:
                kwargs.pop(name, None)
            ctx = click.get_current_context()
            if any(_given(ctx, name) for name in names):
                ctx.obj = make_obj(ctx, global_values(ctx, names))
            return None if original is None else original(*args, **kwargs)

        command.callback = callback
        if isinstance(command, click.Group):
            for sub in command.commands.values():
                self._add_globals(sub)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = self._resolve(ctx, cmd_name)
        if command is not None:
            self._add_globals(command)
        return command

    def _resolve(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
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


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def global_values(ctx: click.Context, names: list[str]) -> dict[str, Any]:
    """The global options' values for ``ctx``: the root's (given, from the environment or
    defaults), then those given on the command line of each command below it, in order."""
    chain = []
    current: click.Context | None = ctx
    while current is not None:
        chain.append(current)
        current = current.parent
    root, *below = reversed(chain)
    values = {name: root.params.get(name) for name in names}
    for level in below:
        values.update({name: level.params.get(name) for name in names if _given(level, name)})
    return values
