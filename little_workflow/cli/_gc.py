"""``little-workflow gc``: delete finished runs, then the blobs and artifacts nothing needs."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import click

from little_workflow.cli._main import Options, execute, print_json
from little_workflow.cli._runs import _runtime

__all__ = ["Duration", "gc"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_STATUSES = ("completed", "failed", "cancelled")


class Duration(click.ParamType[timedelta]):
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w``: a number and one unit."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> timedelta:
        if isinstance(value, timedelta):
            return value
        match = _DURATION.fullmatch(str(value).strip())
        if match is None:
            self.fail(
                f"{value!r} is not a duration: write a number and a unit, "
                "s, m, h, d or w (30d, 12h, 90m)",
                param,
                ctx,
            )
        number, unit = match.groups()
        try:
            return timedelta(**{_UNITS[unit]: float(number)})
        except OverflowError:
            self.fail(f"{value!r} is too long a duration", param, ctx)


def _size(count: int) -> str:
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


@click.command()
@click.option(
    "--older-than",
    type=Duration(),
    default=None,
    help="Delete runs last updated longer ago than this (30d, 12h, 90m).",
)
@click.option(
    "--status",
    "statuses",
    type=click.Choice(_STATUSES),
    multiple=True,
    help="Only runs that ended so (repeatable) [default: completed, failed and cancelled].",
)
@click.option(
    "--keep-last",
    type=click.IntRange(min=0),
    default=None,
    help="Keep the N most recent matching top-level runs (with --workflow: of that workflow).",
)
@click.option("--workflow", default=None, help="Only runs of this workflow (by name).")
@click.option(
    "--grace",
    type=Duration(),
    default="1h",
    show_default=True,
    help="Spare blobs and artifact files written this recently (a live run may be about "
    "to refer to them).",
)
@click.option("--dry-run", is_flag=True, help="Delete nothing; report what would go.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def gc(
    options: Options,
    *,
    older_than: timedelta | None,
    statuses: tuple[str, ...],
    keep_last: int | None,
    workflow: str | None,
    grace: timedelta,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete finished runs' events, scratch and artifacts, then unreferenced blobs.

    A top-level run goes with its sub-runs. Never a run a process holds, one being
    cancelled, a cycle of an unfinished outer loop, or one a remaining run refers to
    (a fork's kept sub-run step; a fork's source when it made artifacts): those are
    listed as kept. Needs --older-than or --keep-last (or both: a run goes only if
    both allow it).
    """
    from little_workflow.events import RunStatus

    if older_than is None and keep_last is None:
        raise click.UsageError(
            "gc needs a limit: --older-than DURATION, --keep-last N, or both "
            "(it never deletes every finished run by default)"
        )
    chosen = {RunStatus(value) for value in statuses or _STATUSES}

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.gc(
                older_than,
                status=chosen,
                keep_last=keep_last,
                workflow=workflow,
                grace=grace,
                dry_run=dry_run,
            )

    report = execute(options, work)
    if as_json:
        print_json(report.to_json())
        return
    verb = "would delete" if report.dry_run else "deleted"
    click.echo(
        f"{verb} {len(report.runs_deleted)} run(s) ({report.events_deleted} events), "
        f"{report.blobs_deleted} blob(s) ({_size(report.blob_bytes_freed)}), "
        f"{report.artifacts_deleted} artifact(s) and {report.artifact_objects_deleted} "
        f"artifact file(s) ({_size(report.artifact_bytes_freed)})"
        + (f"; kept {len(report.kept)} run(s)" if report.kept else "")
    )
    for kept in report.kept:
        click.echo(f"kept {kept.run_id} ({kept.reason}): {kept.detail}", err=True)
