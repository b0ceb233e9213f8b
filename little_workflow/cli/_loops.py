"""Outer-loop commands: ``loop`` and ``loop-status``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import Options, execute, input_option, print_json, read_input
from little_workflow.cli._runs import _runtime
from little_workflow.cli._workflow_arg import workflow_argument


def _supervisor(reference: str) -> Any:
    from little_workflow.errors import ConfigError
    from little_workflow.references import import_reference

    try:
        target: Any = import_reference(reference, what="--supervise")
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint="--supervise") from exc
    if not callable(target):
        raise click.BadParameter(f"{reference} is not callable", param_hint="--supervise")
    return target


@click.command()
@workflow_argument
@input_option("The loop's input")
@click.option(
    "--max-cycles", type=click.IntRange(min=1), required=True, help="At most this many cycles."
)
@click.option(
    "--supervise",
    "supervise_reference",
    required=True,
    help="package.module:function called after each cycle; returns Done(...) or Continue(...).",
)
@click.option("--outer-loop-id", default=None, help="Resume (or start) this outer loop.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up after this many seconds (waiting for another caller included); "
    "the loop stays resumable.",
)
@click.pass_obj
def loop(
    options: Options,
    *,
    workflow: Path | str,
    input_text: str | None,
    max_cycles: int,
    supervise_reference: str,
    outer_loop_id: str | None,
    timeout: float | None,
) -> None:
    """Run WORKFLOW cycle after cycle until the supervisor is done; print its final output.

    WORKFLOW is an LWIR file or a code-first module:function, as for run.
    """
    loop_input = read_input(input_text)
    supervise = _supervisor(supervise_reference)

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.run_outer_loop(
                workflow,
                loop_input,
                max_outer_cycles=max_cycles,
                supervise=supervise,
                outer_loop_id=outer_loop_id,
                timeout=timeout,
            )

    outcome = execute(options, work, result_on_stdout=True)
    click.echo(
        f"outer loop {outcome.outer_loop_id} {outcome.kind} after {len(outcome.cycles)} cycle(s)",
        err=True,
    )
    print_json(outcome.final_output)


@click.command("loop-status")
@click.argument("outer_loop_id")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
@click.pass_obj
def loop_status(options: Options, *, outer_loop_id: str, as_json: bool) -> None:
    """Show OUTER_LOOP_ID: its goal, each cycle (run, status, summary) and its result."""

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return runtime.outer_loop_status(outer_loop_id)

    manifest = execute(options, work)
    if as_json:
        print_json(manifest.model_dump(mode="json", by_alias=True))
        return
    from little_workflow.cli._tables import print_table, stdout_console

    console = stdout_console()
    if manifest.result is not None:
        state = f"{manifest.result.kind} after {len(manifest.cycles)} cycle(s)"
    elif manifest.pending_cycle_run_id is not None:
        state = f"cycle {len(manifest.cycles) + 1} in progress ({manifest.pending_cycle_run_id})"
    else:
        state = f"{len(manifest.cycles)} cycle(s) done, not finished"
    goal = manifest.goal.description or manifest.goal.workflow_definition_hash[:16]
    console.print(f"[bold]{manifest.outer_loop_id}[/]  {state}  (at most {manifest.max_cycles})")
    console.print(f"goal: {goal}", markup=False)
    rows = [
        (str(cycle.cycle_number), cycle.run_id, cycle.status, cycle.summary or "")
        for cycle in manifest.cycles
    ]
    print_table(("cycle", "run", "status", "summary"), rows, "no cycle yet", console=console)
    if manifest.result is not None:
        console.print("final output:", markup=False)
        print_json(manifest.result.final_output)
