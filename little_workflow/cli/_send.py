"""``little-workflow send``: send an event to a run that waits for it (docs/waits.md)."""

from __future__ import annotations

from typing import Any

import click

from little_workflow.cli._main import (
    Options,
    execute,
    parse_json_option,
    print_json,
    read_input,
)
from little_workflow.cli._runs import _runtime


@click.command()
@click.argument("run_id")
@click.argument("event")
@click.option(
    "--data",
    "data_text",
    default=None,
    metavar="JSON|@FILE|-",
    help="The event's payload: JSON text, @FILE or - (stdin) [default: null].",
)
@click.option(
    "--key",
    default=None,
    help="Idempotency key: sending the same key again delivers nothing more.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
@click.pass_obj
def send(
    options: Options,
    *,
    run_id: str,
    event: str,
    data_text: str | None,
    key: str | None,
    as_json: bool,
) -> None:
    """Send EVENT (with --data) to RUN_ID; committed before this returns.

    Refused, with nothing written (exit 3), when the payload fails the wait's schema
    (invalid_event_payload), when the run no longer waits for the event (not_waiting: it
    finished, or the wait timed out) or when there is no such run (run_not_found).
    """
    # Inline JSON is parsed here so that an error names --data; @FILE and - as --input.
    inline = data_text is not None and data_text != "-" and not data_text.startswith("@")
    data = parse_json_option(data_text, "--data") if inline else read_input(data_text)

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.send(run_id, event, data, key=key)

    result = execute(options, work)
    if as_json:
        print_json(
            {
                "runId": result.run_id,
                "event": result.event,
                "key": result.key,
                "outcome": result.outcome,
            }
        )
        return
    said = {
        "delivered": "delivered: recorded in the run's log",
        "kept": "kept: the run takes it when it reaches the wait",
        "duplicate": "already sent with this key: nothing more delivered",
    }[result.outcome]
    click.echo(f"event {result.event} to run {result.run_id} (key {result.key}): {said}", err=True)
