"""``little-workflow db status`` and ``db upgrade``: the store's schema version."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from little_workflow.cli._main import Options, execute, print_json

if TYPE_CHECKING:
    from little_workflow.storage._schema import SchemaStatus


def _store(options: Options) -> str:
    from little_workflow.runtime import DataDir

    return options.store or DataDir(options.data_dir).store_url


def _describe(status: SchemaStatus) -> dict[str, object]:
    described: dict[str, object] = {
        "backend": status.backend,
        "where": status.where,
        "version": status.version,
        "latest": status.latest,
    }
    if status.unverified_events is not None:
        described["unverifiedEvents"] = status.unverified_events
    return described


@click.group()
def db() -> None:
    """The store's schema: its version, and migrating it to this program's."""


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def status(options: Options, *, as_json: bool) -> None:
    """Print the store's schema version and the latest this program knows; changes nothing."""
    from little_workflow.storage._schema import schema_status

    found = execute(options, lambda: schema_status(_store(options)))
    if as_json:
        print_json(_describe(found))
        return
    state = "up to date" if found.current else "behind: run 'little-workflow db upgrade'"
    if found.version == 0:
        state = "not created yet (any command that opens the store creates it)"
    click.echo(f"{found.where}: schema version {found.version} of {found.latest}, {state}")


@db.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def upgrade(options: Options, *, as_json: bool) -> None:
    """Create or migrate the store's schema to the latest version (safe to run again)."""
    from little_workflow.storage._schema import upgrade_schema

    before, after = execute(options, lambda: upgrade_schema(_store(options)))
    if as_json:
        print_json({"before": _describe(before), "after": _describe(after)})
        return
    if before.version == after.version:
        click.echo(f"{after.where}: schema already at version {after.version}; nothing to do")
    else:
        click.echo(
            f"{after.where}: schema upgraded from version {before.version} to {after.version}"
        )
    if after.unverified_events:
        click.echo(
            f"{after.where}: {after.unverified_events} event(s) written before event checksums "
            "have none and are read unverified (docs/faults.md)"
        )
