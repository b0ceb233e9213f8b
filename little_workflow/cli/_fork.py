"""``fork RUN_ID --at STEP_PATH``: a new run that keeps RUN_ID's work before a step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from little_workflow.cli._complete import complete_step_paths
from little_workflow.cli._main import (
    Options,
    execute,
    input_option,
    parse_json_option,
    print_json,
    read_input,
)
from little_workflow.cli._results import error_printer, json_option, result_object
from little_workflow.cli._runs import _progress, _runtime, progress_option
from little_workflow.cli._workflow_arg import WorkflowReference


@click.command()
@click.argument("run_id")
@click.option(
    "--at",
    "at",
    required=True,
    shell_complete=complete_step_paths,
    help="The step path to fork at (it runs anew).",
)
@click.option(
    "--workflow",
    type=WorkflowReference(),
    default=None,
    help="An edited workflow file (or module:function for a code-first run) to run from the "
    "fork point [default: RUN_ID's].",
)
@input_option("New input [default: RUN_ID's]")
@click.option(
    "--prompts",
    "prompts_text",
    default=None,
    help='New prompts, as JSON: {"<step id>": {"instructions": ..., "prompt": ...}}.',
)
@click.option(
    "--policy",
    "policy_text",
    default=None,
    help='New retry policies, as JSON: {"<step id>": {"attempts": 3, "backoff": 1}}.',
)
@click.option("--run-id", "new_run_id", default=None, help="The new run's id [default: a new one].")
@json_option
@progress_option
@click.pass_obj
def fork(
    options: Options,
    *,
    run_id: str,
    at: str,
    workflow: Path | str | None,
    input_text: str | None,
    prompts_text: str | None,
    policy_text: str | None,
    new_run_id: str | None,
    as_json: bool,
    progress: bool | None,
) -> None:
    """Start a new run from RUN_ID that keeps its completed steps before STEP_PATH.

    Those steps are replayed from RUN_ID's log (no function, model or tool is called
    for them); STEP_PATH and every step after it run anew. Says the new run's id on stderr
    first (a fork stopped mid-way is resumed by it), then prints the output as JSON.
    """
    from little_workflow.errors import shown
    from little_workflow.ids import new_id
    from little_workflow.runtime._fork import SAME_INPUT

    fork_input = SAME_INPUT if input_text is None else read_input(input_text)
    prompts = parse_json_option(prompts_text, "--prompts")
    policy = parse_json_option(policy_text, "--policy")
    for value, what in ((prompts, "--prompts"), (policy, "--policy")):
        if value is not None and not isinstance(value, dict):
            raise click.BadParameter("a JSON object keyed by step id", param_hint=what)
    # Chosen here, not by the runtime, so the progress display knows which log to follow,
    # and said first: a fork killed mid-way leaves a run the user can find and resume.
    # Only a missing id is generated (an empty one is refused as invalid).
    chosen = new_id("run") if new_run_id is None else new_run_id
    click.echo(f"forking run {shown(run_id)} at {shown(at)} into run {shown(chosen)}", err=True)

    async def work() -> Any:
        async with _runtime(options) as runtime, _progress(runtime, chosen, progress):
            return await runtime.fork(
                run_id,
                at=at,
                run_id=chosen,
                input=fork_input,
                workflow=workflow,
                prompts=prompts,
                policy=policy,
            )

    on_error = error_printer(chosen) if as_json else None
    result = execute(options, work, result_on_stdout=True, on_error=on_error)
    origin = result.state.forked_from
    at = origin.at if origin is not None else at  # as the log records it: canonical
    if as_json:
        print_json(
            {
                **result_object(result),
                "forkedFrom": {"runId": run_id, "at": at},
                # As before the common shape (``steps``): kept for scripts that read them.
                "keptSteps": result.replayed_steps,
                "executedSteps": result.executed_steps,
            }
        )
        return
    click.echo(
        f"run {result.run_id} (forked from {run_id} at {at}) completed: "
        f"{result.replayed_steps} step(s) kept, {result.executed_steps} executed",
        err=True,
    )
    print_json(result.output)
