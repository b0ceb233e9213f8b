"""What ``run``, ``resume``, ``retry``, ``fork`` and ``replay`` print about a run.

``--json`` on the first four prints one object, the same shape for each, whether the run
completed or not (see ``result_object``); without it the output is printed as JSON and a
line on stderr says how the run ended and what was replayed versus run anew.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from little_workflow.cli._main import print_json

__all__ = [
    "error_printer",
    "json_option",
    "plural",
    "print_replay",
    "result_object",
    "resume_line",
]


def json_option(function: Any) -> Any:
    """``--json``: the run's id, status, output or error, and counts, as one object."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print one JSON object: runId, status, output, error, steps and calls "
        "replayed and made (on failure too, with the exit code of the failure).",
    )(function)


def plural(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def result_object(result: Any) -> dict[str, Any]:
    """A finished ``RunResult`` as ``--json`` prints it."""
    return {
        "runId": result.run_id,
        "status": result.status.value,
        "output": result.output,
        "error": None,
        "steps": {"replayed": result.replayed_steps, "executed": result.executed_steps},
        "calls": {"replayed": result.replayed_calls, "made": result.made_calls},
    }


def error_printer(run_id: str) -> Callable[[Exception], None]:
    """``execute``'s ``on_error`` for ``--json``: the error as the same object, on stdout.

    ``status`` is the run's when the error is its end (``failed``, ``cancelled``) or its
    pause (``waiting``: ``error`` says what it waits for), else ``null`` (the command was
    refused: the run did not end, or was never created). The counts are ``null``: a
    failure does not say what it replayed.
    """

    def report(exc: Exception) -> None:
        from little_workflow.errors import LittleWorkflowError, RunFailedError, RunWaitingError

        status: str | None = None
        cause: str | None = None
        if isinstance(exc, RunWaitingError):
            status, run = "waiting", exc.run_id or run_id
        elif isinstance(exc, RunFailedError):
            status = "cancelled" if exc.cause_code == "cancelled" else "failed"
            cause = exc.cause_code
            run = exc.run_id or run_id
        else:
            run = run_id
        if isinstance(exc, LittleWorkflowError):
            error = {"code": exc.code, "cause": cause, "message": exc.message}
        else:
            error = {"code": "internal_error", "cause": None, "message": f"{exc}"}
        print_json(
            {
                "runId": run,
                "status": status,
                "output": None,
                "error": error,
                "steps": None,
                "calls": None,
            }
        )

    return report


def resume_line(result: Any, *, verb: str = "resumed") -> str:
    """What a resume (or retry) did, steps and calls apart, for stderr.

    A resume that replayed calls but no whole step (killed inside the first agent step)
    says so: it does not read ``0 step(s) replayed`` as if nothing was kept.
    """
    if result.replayed_steps:
        steps = f"{plural(result.replayed_steps, 'step')} replayed from the log"
    else:
        steps = "no completed step in the log"
    if result.executed_steps or result.made_calls:
        steps += f", {plural(result.executed_steps, 'step')} run anew"
    else:
        steps += ", nothing left to run"
    calls = ""
    if result.replayed_calls or result.made_calls:
        calls = (
            f"; model and tool calls: {result.replayed_calls} replayed from the log, "
            f"{result.made_calls} made"
        )
    return f"run {result.run_id} {verb}, completed: {steps}{calls}"


def print_replay(result: Any) -> None:
    """``replay``'s human form: the rebuilt state, step by step, then the output."""
    state = result.state
    click.echo(
        f"run {result.run_id}  workflow {state.workflow_name}  {state.status.value}  "
        f"(rebuilt from its log; nothing was called)"
    )
    click.echo(f"steps ({plural(result.replayed_steps, 'step')} replayed):")
    for path, record in state.steps.items():
        route = f"  -> {record.route}" if record.route is not None else ""
        sub = f"  sub-run {record.sub_run_id}" if record.sub_run_id else ""
        click.echo(f"  {path}  {record.status}  {plural(record.attempts, 'attempt')}{route}{sub}")
        if record.status == "failed" and record.last_error:
            click.echo(f"    error: {record.last_error}")
    if result.frontier:
        click.echo(f"a resume would continue at: {', '.join(result.frontier)}")
    if result.unreached:
        click.echo(
            f"in the log but not reached by the workflow (log and workflow disagree): "
            f"{', '.join(result.unreached)}"
        )
    if state.status.value == "completed":
        click.echo("output:")
        print_json(result.output)
