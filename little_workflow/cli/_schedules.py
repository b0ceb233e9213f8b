"""``schedule``: add, list, remove, pause and resume the schedules the workers start.

A schedule lives in the store (``runtime/_schedules.py``); only ``little-workflow
worker`` processes start its runs, so at least one must run against the same store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import Options, execute, input_option, print_json, read_input
from little_workflow.cli._runs import _runtime
from little_workflow.cli._workflow_arg import workflow_argument


@click.group()
def schedule() -> None:
    """Runs started on a cron expression by the workers: add, list, remove, pause, resume."""


@schedule.command()
@click.argument("name")
@click.option(
    "--cron",
    required=True,
    help="Cron expression: 5 fields, or 6 with seconds last ('* * * * * */10').",
)
@workflow_argument
@input_option("Each run's input")
@click.option("--tz", default="UTC", show_default=True, help="Time zone of the cron expression.")
@click.option(
    "--catch-up",
    type=click.Choice(["latest", "skip"]),
    default="latest",
    show_default=True,
    help="Ticks missed by more than 60 s (no worker ran): start only the latest, or none.",
)
@click.pass_obj
def add(
    options: Options,
    *,
    name: str,
    cron: str,
    workflow: Path | str,
    input_text: str | None,
    tz: str,
    catch_up: str,
) -> None:
    """Add schedule NAME: a run of WORKFLOW at each tick of --cron, started by a worker."""
    run_input = read_input(input_text)

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.add_schedule(
                name, cron=cron, workflow=workflow, input=run_input, tz=tz, catch_up=catch_up
            )

    added = execute(options, work)
    click.echo(f"schedule {added.name} added: {added.cron} ({added.tz}), {added.workflow}")


@schedule.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def list_(options: Options, *, as_json: bool) -> None:
    """List the schedules: name, cron, time zone, workflow, catch-up, state."""
    from little_workflow.cli._tables import print_table

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.list_schedules()

    found = execute(options, work)
    if as_json:
        print_json([item.to_json() for item in found])
        return
    print_table(
        ["name", "cron", "tz", "workflow", "catch-up", "state"],
        [
            [
                item.name,
                item.cron,
                item.tz,
                item.workflow,
                item.catch_up,
                "paused" if item.paused else "active",
            ]
            for item in found
        ],
        "no schedules",
    )


def _change(verb: str, action: str) -> Any:
    @schedule.command(name=verb)
    @click.argument("name")
    @click.pass_obj
    def command(options: Options, *, name: str) -> None:

        async def work() -> None:
            async with _runtime(options) as runtime:
                await getattr(runtime, action)(name)

        execute(options, work)
        click.echo(f"schedule {name} {verb}d")

    return command


remove = _change("remove", "remove_schedule")
remove.help = "Remove schedule NAME (the runs it started stay)."
pause = _change("pause", "pause_schedule")
pause.help = "Pause schedule NAME: no tick starts until it is resumed."
resume = _change("resume", "resume_schedule")
resume.help = "Resume schedule NAME from now on (the ticks missed while paused never run)."
