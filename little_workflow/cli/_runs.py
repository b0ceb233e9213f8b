"""Commands that start and continue runs: ``run``, ``resume``, ``retry``, ``replay``."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import (
    Options,
    execute,
    input_option,
    on_code_drift_option,
    print_json,
    read_input,
)
from little_workflow.cli._results import (
    error_printer,
    json_option,
    print_replay,
    result_object,
    resume_line,
)
from little_workflow.cli._workflow_arg import workflow_argument


def _runtime(options: Options) -> Any:
    from little_workflow.runtime import Runtime, load_setup

    extra = {} if options.setup is None else load_setup(options.setup).runtime_options()
    if options.max_payload_bytes is not None:
        extra["max_payload_bytes"] = options.max_payload_bytes
    if options.sync_threads is not None:
        extra["sync_threads"] = options.sync_threads
    if options.on_code_drift != "accept":
        extra["on_code_drift"] = options.on_code_drift
    return Runtime(
        options.data_dir,
        store=options.store,
        lock_timeout=options.lock_timeout,
        crash_after_events=options.crash_after_events,
        faults=options.faults,
        import_functions=options.import_functions,
        **extra,
    )


def progress_option(function: Any) -> Any:
    """``--progress/--no-progress``: shown by default when stderr is a terminal."""
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Show the steps, and the model answers as they stream in, on stderr "
        "[default: on a terminal].",
    )(function)


@contextlib.asynccontextmanager
async def _progress(runtime: Any, run_id: str, wanted: bool | None) -> AsyncIterator[None]:
    if wanted is None:
        wanted = sys.stderr.isatty()
    if not wanted:
        yield
        return
    from little_workflow.cli._progress import show_progress

    # Watching the run's answers makes its model calls stream (docs/models.md#streaming).
    async with show_progress(runtime.events, run_id, deltas=runtime.deltas(run_id)):
        yield


@click.command()
@workflow_argument
@input_option("The run's input")
@click.option("--run-id", default=None, help="Use this run id (resumes it if it exists).")
@progress_option
@json_option
@click.pass_obj
def run(
    options: Options,
    *,
    workflow: Path | str,
    input_text: str | None,
    run_id: str | None,
    progress: bool | None,
    as_json: bool,
) -> None:
    """Run WORKFLOW (.json/.yaml) and print its output as JSON.

    WORKFLOW may also be module:function, naming a code-first @workflow (its input is the
    function's keyword arguments, as one JSON object).
    """
    from little_workflow.ids import new_id

    run_input = read_input(input_text)
    # Chosen here, not by the runtime, so the progress display knows which log to follow;
    # only a missing id is generated (an empty one is refused as invalid).
    chosen = new_id("run") if run_id is None else run_id

    async def work() -> Any:
        async with _runtime(options) as runtime, _progress(runtime, chosen, progress):
            return await runtime.run(workflow, run_input, run_id=chosen)

    result = execute(options, work, result_on_stdout=True, on_error=_on_error(as_json, chosen))
    if as_json:
        print_json(result_object(result))
        return
    click.echo(f"run {result.run_id} completed", err=True)
    print_json(result.output)


@click.command()
@click.argument("run_id")
@progress_option
@on_code_drift_option
@json_option
@click.pass_obj
def resume(
    options: Options, *, run_id: str, progress: bool | None, on_code_drift: str, as_json: bool
) -> None:
    """Continue RUN_ID from the end of its log and print its output as JSON."""
    options = dataclasses.replace(options, on_code_drift=on_code_drift)

    async def work() -> Any:
        async with _runtime(options) as runtime, _progress(runtime, run_id, progress):
            return await runtime.resume(run_id)

    result = execute(options, work, result_on_stdout=True, on_error=_on_error(as_json, run_id))
    if as_json:
        print_json(result_object(result))
        return
    click.echo(resume_line(result), err=True)
    print_json(result.output)


@click.command()
@click.argument("run_id")
@progress_option
@json_option
@click.pass_obj
def retry(options: Options, *, run_id: str, progress: bool | None, as_json: bool) -> None:
    """Run the failed RUN_ID again from its failed step (same workflow version and input)."""

    async def work() -> Any:
        async with _runtime(options) as runtime, _progress(runtime, run_id, progress):
            return await runtime.retry(run_id)

    result = execute(options, work, result_on_stdout=True, on_error=_on_error(as_json, run_id))
    if as_json:
        print_json(result_object(result))
        return
    click.echo(resume_line(result, verb="retried"), err=True)
    print_json(result.output)


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print the rebuilt state as JSON.")
@click.pass_obj
def replay(options: Options, *, run_id: str, as_json: bool) -> None:
    """Rebuild RUN_ID's state from its log (calls nothing) and print it (--json: as JSON).

    Says each step's status and attempts (a failed one's error), where a resume would
    continue, and the output of a completed run.
    """

    async def work() -> Any:
        async with _runtime(options) as runtime:
            return await runtime.replay(run_id)

    result = execute(options, work)
    if not as_json:
        print_replay(result)
        return
    state = result.state
    print_json(
        {
            "runId": result.run_id,
            "workflow": state.workflow_name,
            "status": state.status.value,
            "output": result.output,
            "replayedSteps": result.replayed_steps,
            "frontier": list(result.frontier),
            "unreached": list(result.unreached),
            "steps": {
                path: {
                    "status": record.status,
                    "attempts": record.attempts,
                    "output": record.output,
                    **({"route": record.route} if record.route is not None else {}),
                    **({"subRunId": record.sub_run_id} if record.sub_run_id else {}),
                }
                for path, record in state.steps.items()
            },
        }
    )


def _on_error(as_json: bool, run_id: str) -> Callable[[Exception], None] | None:
    return error_printer(run_id) if as_json else None
