"""Shell completion (bash, zsh, fish): run ids, workflow files, ``fork --at`` step paths.

click completes commands and options by itself; this module completes the values only
the store knows. Every command's ``RUN_ID`` argument gets ``RunIdType`` (the group sets
it, see ``LazyGroup``); ``fork --at`` completes the step paths of the run named before
it; a ``WORKFLOW`` completes as a file (``_workflow_arg.py``). Completing reads the
store of the data directory and ``--store`` on the line typed so far (before or after the
command), and never creates one: a data directory without a database completes nothing.
An error completes nothing rather than printing into the user's shell.

Set up (docs: README, "Shell completion")::

    eval "$(_LITTLE_WORKFLOW_COMPLETE=bash_source little-workflow)"   # ~/.bashrc
    eval "$(_LITTLE_WORKFLOW_COMPLETE=zsh_source little-workflow)"    # ~/.zshrc
    _LITTLE_WORKFLOW_COMPLETE=fish_source little-workflow | source    # fish config
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import click
from click.shell_completion import CompletionItem

if TYPE_CHECKING:
    from little_workflow.storage import EventLog

__all__ = ["RUN_ID", "RunIdType", "complete_step_paths"]

#: At most this many run ids offered (the most recent first).
_LIMIT = 500


class RunIdType(click.types.StringParamType):
    """A run id: any string, completed from the runs in the store."""

    name = "run_id"

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        async def ids(log: EventLog) -> list[str]:
            return [info.run_id for info in await log.list_runs(limit=_LIMIT)]

        return _items(_with_log(ctx, ids), incomplete)


RUN_ID = RunIdType()


def complete_step_paths(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """The step paths of the run named by the command's ``RUN_ID`` (``fork --at``)."""
    run_id = ctx.params.get("run_id") or _run_id_typed(ctx)
    if not isinstance(run_id, str) or not run_id:
        return []

    async def paths(log: EventLog) -> list[str]:
        found: dict[str, None] = {}
        for record in await log.read(run_id):
            path = getattr(record.event, "step_path", None)
            if isinstance(path, str):
                found.setdefault(path)
        return list(found)

    return _items(_with_log(ctx, paths), incomplete)


def _run_id_typed(ctx: click.Context) -> str | None:
    """The ``RUN_ID`` typed before ``--at``, read from the line being completed.

    click parses that line up to an option still waiting for its value (``--at`` and the
    cursor) and stops there, before the positional arguments: ``ctx.params`` has no run
    id then. So parse the command's words again without that last option.
    """
    import os

    from click.shell_completion import get_completion_class

    shell = os.environ.get("_LITTLE_WORKFLOW_COMPLETE", "").partition("_")[0]
    completion = get_completion_class(shell)
    name = ctx.info_name
    if completion is None or name is None:
        return None
    root = ctx.find_root().command
    args, _ = completion(
        root, {}, "little-workflow", "_LITTLE_WORKFLOW_COMPLETE"
    ).get_completion_args()
    if name not in args:
        return None
    words = args[args.index(name) + 1 :]
    if words and words[-1].startswith("-"):
        words = words[:-1]
    again = ctx.command.make_context(name, words, parent=ctx.parent, resilient_parsing=True)
    run_id = again.params.get("run_id")
    return run_id if isinstance(run_id, str) else None


def _items(values: list[str], incomplete: str) -> list[CompletionItem]:
    return [CompletionItem(value) for value in values if value.startswith(incomplete)]


def _with_log(ctx: click.Context, read: Callable[[EventLog], Awaitable[list[str]]]) -> list[str]:
    """``read`` on the store the line names, or ``[]`` (no store yet, or any error)."""
    # Imported here: `--help` imports this module, and must stay quick (tests/test_lazy_imports).
    import asyncio

    try:
        url = _store_url(ctx)
        if url is None:
            return []
        return asyncio.run(_read(url, read))
    except Exception:
        return []


async def _read(url: str, read: Callable[[EventLog], Awaitable[list[str]]]) -> list[str]:
    from little_workflow.storage import open_event_log

    log = await open_event_log(url)
    try:
        return await read(log)
    finally:
        await log.close()


def _store_url(ctx: click.Context) -> str | None:
    """The store of the options typed so far; ``None`` for a default one not created yet."""
    from little_workflow.cli._group import LazyGroup, global_values
    from little_workflow.cli._main import options_from
    from little_workflow.runtime import DataDir

    root = ctx.find_root().command
    if not isinstance(root, LazyGroup):
        return None
    names = [param.name for param in root.global_params() if param.name is not None]
    options = options_from(global_values(ctx, names))
    if options.store is not None:
        return options.store
    data = DataDir.at(options.data_dir)
    return data.store_url if data.database.is_file() else None
