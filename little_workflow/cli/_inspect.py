"""Commands that look at runs without running anything: ``runs``, ``show``, ``events``.

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
            position = after
            while True:
                # The status first: once it is terminal, the read below has every event.
                info = await log.get_run(run_id)
                if info is None:
                    raise click.ClickException(f"no run {run_id!r} in this store")
                for record in await log.read(run_id, after=position):
                    position = record.seq
                    if not types or record.type in types:
                        _print_event(record, as_json)
                if not follow or info.status in _TERMINAL:
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


def _step_rows(records: list[RecordedEvent]) -> list[dict[str, Any]]:
    """One row per step visit (path and visit), in the order they started."""
    rows: dict[tuple[str, int | None], dict[str, Any]] = {}

    def row(path: str, visit: int | None, ts: float) -> dict[str, Any]:
        key = (path, visit)
        if key not in rows:
            rows[key] = {
                "path": path,
                "visit": visit,
                "kind": None,
                "status": "running",
                "attempts": 0,
                "startedAt": ts,
                "endedAt": None,
            }
        return rows[key]

    last_visit: dict[str, int | None] = {}
    for record in records:
        event: Any = record.event
        if record.type == "StepAttemptStarted":
            entry = row(event.step_path, event.visit, record.ts)
            entry["kind"] = event.kind
            entry["attempts"] = max(entry["attempts"], event.attempt)
            last_visit[event.step_path] = event.visit
        elif record.type == "StepCompleted":
            entry = row(event.step_path, event.visit, record.ts)
            entry.update(kind=event.kind, status="completed", endedAt=record.ts)
            entry["attempts"] = max(entry["attempts"], 1)
            if event.route is not None:
                entry["route"] = event.route
        elif record.type == "StepFailed":
            entry = row(event.step_path, last_visit.get(event.step_path), record.ts)
            entry.update(status="failed", endedAt=record.ts, cause=event.cause_code)
    return list(rows.values())


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def show(options: Options, *, run_id: str, as_json: bool) -> None:
    """Show RUN_ID's steps as a tree: paths, visits, statuses, attempts, timings."""

    async def work() -> Any:
        async with _runtime(options) as runtime:
            info = await runtime.events.get_run(run_id)
            if info is None:
                raise click.ClickException(f"no run {run_id!r} in this store")
            return info, await runtime.events.read(run_id)

    info, records = execute(options, work)
    rows = _step_rows(records)
    if as_json:
        print_json(
            {
                "runId": run_id,
                "workflow": info.workflow,
                "status": info.status.value if info.status is not None else None,
                "steps": rows,
            }
        )
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree

    state = info.status.value if info.status is not None else "-"
    tree = Tree(f"[bold]{escape(run_id)}[/]  {escape(info.workflow or '-')}  {state}")
    nodes: dict[str, Tree] = {"": tree}
    colours = {"completed": "green", "failed": "red", "running": "yellow"}
    for entry in rows:
        path: str = entry["path"]
        parts = _segments(path)
        for depth in range(1, len(parts) + 1):
            prefix = "".join(parts[:depth])
            if prefix not in nodes:
                parent = nodes["".join(parts[: depth - 1])]
                nodes[prefix] = parent.add(escape(parts[depth - 1].lstrip(".")))
        took = (
            f"{(entry['endedAt'] - entry['startedAt']) * 1000:.0f} ms"
            if entry["endedAt"] is not None
            else "..."
        )
        route = f" -> {entry['route']}" if entry.get("route") else ""
        colour = colours.get(entry["status"], "white")
        nodes[path].label = (
            f"{escape(parts[-1].lstrip('.'))}  [dim]{entry['kind'] or ''}[/]  "
            f"[{colour}]{entry['status']}[/]{escape(route)}  attempts {entry['attempts']}  {took}"
        )
    Console().print(tree)


def _segments(path: str) -> list[str]:
    """``a.b[x].c`` as ``["a", ".b", "[x]", ".c"]``: joined, each prefix is a path."""
    parts: list[str] = []
    current = ""
    depth = 0
    for char in path:
        if char == "." and depth == 0 and current:
            parts.append(current)
            current = char
            continue
        if char == "[" and depth == 0 and current:
            parts.append(current)
            current = ""
        depth += char == "["
        depth -= char == "]"
        current += char
    if current:
        parts.append(current)
    merged: list[str] = []
    for part in parts:  # a decision loop's ``.visit[n]`` is one level, not two
        if merged and merged[-1] == ".visit" and part.startswith("["):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


def register(group: click.Group) -> None:
    """Add these commands to the CLI group."""
    for command in (runs, show, events):
        group.add_command(command)
