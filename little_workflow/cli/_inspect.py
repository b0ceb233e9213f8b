"""Commands that look at runs without running anything: ``runs`` and ``events``.

Each prints a table for a person, or with ``--json`` one JSON document (``runs``) or one
JSON object per line (``events``) for a script.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

import click

from little_workflow.cli._main import Options, execute, print_json
from little_workflow.cli._runs import _runtime
from little_workflow.events import RecordedEvent, RunStatus

_TERMINAL = {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED}


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


@click.command()
@click.option(
    "--status",
    type=click.Choice([status.value for status in RunStatus]),
    default=None,
    help="Only runs with this status.",
)
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--limit", type=click.IntRange(min=1), default=50, help="At most this many.")
@click.option("--sub-runs", is_flag=True, help="Include sub-runs (hidden by default).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def runs(
    options: Options,
    *,
    status: str | None,
    workflow: str | None,
    limit: int,
    sub_runs: bool,
    as_json: bool,
) -> None:
    """List runs, most recent first: id, workflow, status, events, started, duration."""

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.events.list_runs(
                status=RunStatus(status) if status is not None else None,
                workflow=workflow,
            )

    found = [info for info in execute(options, work) if sub_runs or info.parent_run_id is None]
    found = found[:limit]
    rows = [
        {
            "runId": info.run_id,
            "workflow": info.workflow,
            "status": info.status.value if info.status is not None else None,
            "parentRunId": info.parent_run_id,
            "events": info.last_seq,
            "createdAt": info.created_at,
            "updatedAt": info.updated_at,
        }
        for info in found
    ]
    if as_json:
        print_json(rows)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for column in ("run", "workflow", "status", "events", "started", "duration"):
        table.add_column(column, justify="right" if column == "events" else "left")
    colours = {"completed": "green", "failed": "red", "running": "yellow", "cancelled": "dim"}
    for info in found:
        state = info.status.value if info.status is not None else "-"
        table.add_row(
            info.run_id,
            info.workflow or "-",
            f"[{colours.get(state, 'white')}]{state}[/]",
            str(info.last_seq),
            _when(info.created_at),
            _duration(info.updated_at - info.created_at),
        )
    console = Console()
    if not found:
        console.print("no runs")
    else:
        console.print(table)


def _event_row(record: RecordedEvent) -> dict[str, Any]:
    return {
        "seq": record.seq,
        "ts": record.ts,
        "type": record.type,
        "event": record.event.model_dump(mode="json", by_alias=True),
    }


@click.command()
@click.argument("run_id")
@click.option("--type", "types", multiple=True, help="Only events of this type (repeatable).")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Only events past this seq.")
@click.option("--follow", is_flag=True, help="Keep printing new events until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, for scripts.")
@click.pass_obj
def events(
    options: Options,
    *,
    run_id: str,
    types: tuple[str, ...],
    after: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Print RUN_ID's events in order (with --follow, as they are appended)."""

    async def work() -> None:
        async with _runtime(options) as runtime:
            log = runtime.events
            if await log.get_run(run_id) is None:
                raise click.ClickException(f"no run {run_id!r} in this store")
            position = after
            while True:
                for record in await log.read(run_id, after=position):
                    position = record.seq
                    if types and record.type not in types:
                        continue
                    _print_event(record, as_json)
                info = await log.get_run(run_id)
                if not follow or (info is not None and info.status in _TERMINAL):
                    if follow:
                        for record in await log.read(run_id, after=position):
                            position = record.seq
                            if not types or record.type in types:
                                _print_event(record, as_json)
                    return
                await asyncio.sleep(0.2)

    execute(options, work)


def _print_event(record: RecordedEvent, as_json: bool) -> None:
    row = _event_row(record)
    if as_json:
        click.echo(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        return
    detail = {
        key: value
        for key, value in row["event"].items()
        if key not in ("type",) and value not in (None, [], {})
    }
    text = json.dumps(detail, ensure_ascii=False, separators=(",", ":"))
    if len(text) > 160:
        text = text[:157] + "..."
    click.echo(f"{record.seq:>6}  {_when(record.ts)}  {record.type:<28} {text}")


def register(group: click.Group) -> None:
    """Add these commands to the CLI group."""
    for command in (runs, events):
        group.add_command(command)
