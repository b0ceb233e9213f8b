"""Commands that check workflows and write nothing: ``validate`` and ``schema``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import Options, input_option, print_json, read_input, refuse
from little_workflow.cli._workflow_arg import workflow_argument


@click.command()
@workflow_argument
@input_option("Also check this input, as run would")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print what was found as one JSON object ({"valid": false, "error": ...} '
    "when refused, with the problems).",
)
@click.pass_obj
def validate(
    options: Options,
    *,
    workflow: Path | str,
    input_text: str | None,
    as_json: bool,
) -> None:
    """Check WORKFLOW as a run would before it starts, and print what it uses; writes nothing.

    Loads and validates the document and its sub-workflows, resolves every function, tool
    and model slot against the setup (--setup, before or after the command), and with
    --input checks the input (the workflow's input: schema, and the fields every
    completed run reads). Exit 0 when a run could
    start, 3 when it would be refused. WORKFLOW may be module:function (a @workflow).
    """
    import sys

    from little_workflow.runtime import Runtime, load_setup
    from little_workflow.runtime._check import check_workflow_definition

    run_input = read_input(input_text)
    reference = options.setup
    try:
        extra = {} if reference is None else load_setup(reference).runtime_options()
        # Never opened: its data directory is not created, its store not touched.
        runtime = Runtime(options.data_dir, import_functions=options.import_functions, **extra)
        given: dict[str, Any] = {} if input_text is None else {"input": run_input}
        report = check_workflow_definition(runtime, workflow, **given)
    except Exception as exc:
        if options.debug:
            import traceback

            traceback.print_exc()
        if as_json:
            _print_refusal(exc, reference)
        refuse(exc)
    if as_json:
        print_json({**report.to_json(), "setup": reference})
        return
    _print_report(report, reference)
    sys.stdout.flush()


def _print_refusal(exc: Exception, setup: str | None) -> None:
    """With ``--json``, a refusal is a JSON object too (stdout), beside its line (stderr)."""
    from little_workflow.errors import LittleWorkflowError

    if not isinstance(exc, LittleWorkflowError):
        return
    problems = getattr(exc, "problems", ())
    print_json(
        {
            "valid": False,
            "setup": setup,
            "error": {
                "code": exc.code,
                "message": exc.message,
                "problems": [{"path": p.path, "message": p.message} for p in problems],
            },
        }
    )


def _print_report(report: Any, setup: str | None) -> None:
    where = f" ({report.source})" if report.source else ""
    click.echo(f"workflow {report.name!r}{where}: valid")
    if report.kind == "code":
        click.echo("  code-first @workflow; its steps, tools and slots are known only as it runs")
        click.echo(f"  parameters: {', '.join(report.parameters) or 'none'}")
    else:
        click.echo(f"  steps ({len(report.steps)}):")
        for step in report.steps:
            click.echo(f"    {'  ' * step.depth}{step.id} ({step.kind})")
    against = f"resolved against --setup {setup}" if setup else "no --setup given"
    if report.kind == "lwir":
        click.echo(f"  functions: {', '.join(report.functions) or 'none'}")
        click.echo(f"  tools: {', '.join(report.tools) or 'none'} ({against})")
        click.echo(f"  model slots: {', '.join(report.model_slots) or 'none'} ({against})")
        if report.workflows:
            click.echo(f"  sub-workflows: {', '.join(report.workflows)}")
        schema = "an input: schema" if report.input_schema else "no input: schema"
        reads = ", ".join(report.input_reads) or "no field"
        click.echo(f"  input: {schema}; every completed run reads {reads}")
    if report.input_checked:
        click.echo("  the input given fits")
    else:
        click.echo("  no --input given: the input was not checked")


@click.command()
def schema() -> None:
    """Print the JSON Schema of an LWIR workflow document (for editors and other tools).

    Generated from the models, so it matches this version; the repository keeps a copy in
    docs/lwir.schema.json (regenerate it with: little-workflow schema >
    docs/lwir.schema.json).
    """
    from little_workflow.lwir._schema import lwir_json_schema_text

    click.echo(lwir_json_schema_text(), nl=False)
