"""Commands that stop or discard work: ``cancel`` and ``clear``."""

from __future__ import annotations

import sys
from typing import Any

import click

from little_workflow.cli._checkpoints import checkpoint_storage, checkpoints_option
from little_workflow.cli._main import EXIT_BUSY, Options, describe_error, execute, print_json
from little_workflow.cli._runs import _runtime


@click.command()
@click.argument("run_id")
@click.option("--reason", default=None, help="Why (recorded in RunCancelled).")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds to wait for the process running it to stop.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def cancel(
    options: Options, *, run_id: str, reason: str | None, wait: float, as_json: bool
) -> None:
    """Cancel RUN_ID and its unfinished sub-runs.

    A run no process is executing is cancelled at once. A running one is stopped by
    its own process before its next step (steps in flight are abandoned). A cancelled
    run cannot be resumed. Exits 5 if the running process did not stop within --wait
    (the request stands; it stops, or the next resume records it).
    """
    from little_workflow.events import RunStatus

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.cancel(run_id, reason=reason, wait=wait)

    outcome = execute(options, work)
    cancelled = outcome.status is RunStatus.CANCELLED
    if as_json:
        print_json(
            {
                "runId": outcome.run_id,
                "status": outcome.status.value,
                "recordedByOwner": outcome.recorded_by_owner,
                "subRunIds": list(outcome.sub_run_ids),
            }
        )
    elif cancelled:
        by = "by the process running it" if outcome.recorded_by_owner else "(it was not running)"
        subs = f", with {len(outcome.sub_run_ids)} sub-run(s)" if outcome.sub_run_ids else ""
        click.echo(f"run {outcome.run_id} cancelled {by}{subs}")
    else:
        click.echo(
            f"cancellation of run {outcome.run_id} requested, but the process running it "
            f"has not stopped within {wait:g}s (it is {outcome.status.value}); it stops "
            "before its next step, or the next resume records the cancellation",
            err=True,
        )
    if not cancelled:
        sys.exit(EXIT_BUSY)


@click.command()
@click.argument("execution_id")
@checkpoints_option
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.pass_obj
def clear(
    options: Options, *, execution_id: str, checkpoints: str | None, yes: bool, as_json: bool
) -> None:
    """Discard the recovery data of a harness execution: snapshot, ledger, answers.

    The next execution with EXECUTION_ID starts fresh: every model and tool call is made
    again. Asks first unless --yes (without a terminal, --yes is required).
    """
    from little_workflow.errors import ConfigError, LittleWorkflowError
    from little_workflow.ids import validate_id

    try:
        validate_id(execution_id, what="execution id")
    except LittleWorkflowError as exc:
        # Before asking: reported as every command reports a bad id (invalid input, 3).
        message, code = describe_error(exc)
        click.echo(message, err=True)
        sys.exit(code)
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("clear discards recovery data: pass --yes to confirm")
        click.confirm(
            f"Discard every checkpoint, ledger entry and answer of {execution_id}?", abort=True
        )

    async def work() -> Any:
        from little_workflow.harness import clear_execution

        async with checkpoint_storage(options, checkpoints) as (storage, url):
            cleared = await clear_execution(storage, execution_id)
        if cleared.empty:
            raise ConfigError(
                f"there is no recovery data of execution {execution_id!r} in {url}",
                code="execution_not_found",
            )
        return cleared

    cleared = execute(options, work)
    if as_json:
        print_json(
            {
                "executionId": cleared.execution_id,
                "snapshot": cleared.snapshot,
                "ledgerEntries": cleared.ledger_entries,
                "answers": cleared.answers,
            }
        )
        return
    click.echo(
        f"cleared execution {cleared.execution_id}: "
        f"{'a snapshot, ' if cleared.snapshot else 'no snapshot, '}"
        f"{cleared.ledger_entries} ledger entr{'y' if cleared.ledger_entries == 1 else 'ies'}, "
        f"{cleared.answers} answer(s)"
    )
