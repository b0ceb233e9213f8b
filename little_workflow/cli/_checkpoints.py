"""The ``--checkpoints`` option of the commands that work on a harness execution's data."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from little_workflow.cli._main import Options
    from little_workflow.storage import ManagedStorage


def checkpoints_option(function: Any) -> Any:
    """``--checkpoints URL``: where the harness keeps its snapshots, ledger and answers."""
    return click.option(
        "--checkpoints",
        default=None,
        help="Store URL of the harness's checkpoint storage (file:///..., sqlite:///...; "
        "default: the data directory's store).",
    )(function)


@contextlib.asynccontextmanager
async def checkpoint_storage(
    options: Options, checkpoints: str | None
) -> AsyncIterator[tuple[ManagedStorage, str]]:
    """The checkpoint storage (``--checkpoints``, else the store's) and its URL, open."""
    from little_workflow.runtime import DataDir
    from little_workflow.storage import open_storage

    url = checkpoints or options.store or DataDir.at(options.data_dir).store_url
    storage = await open_storage(url)
    try:
        yield storage, url
    finally:
        await storage.close()
