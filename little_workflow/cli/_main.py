"""The ``little-workflow`` command: parse options at the edge, call the runtime, print.

Exit codes (stable, for scripts):

====  =========================================================================
0     success
1     the run failed (stderr names its cause code), or a loop's supervise() raised
2     usage error (a bad option or argument)
3     invalid input or configuration (a bad workflow file, id, input, store URL; a
      resume refused with ``CapabilityDriftError``)
4     storage error (unreadable, corrupt or unavailable store)
5     busy: another process holds the run's lock past ``--lock-timeout``, a
      ``cancel`` was not acted on within ``--wait``, a ``wait`` timed out, or a
      worker's lease on the run was lost
6     the run was cancelled (by ``cancel``, now or before)
7     the run waits (for an event or a timer, docs/waits.md): it stopped cleanly, and
      stderr says what it waits for and the ``send`` command that answers it
70    internal error (a bug: please report it with ``--debug`` output)
====  =========================================================================

Environment variables are read here and nowhere deeper: ``LITTLE_WORKFLOW_DATA_DIR``,
``LITTLE_WORKFLOW_STORE``, ``LITTLE_WORKFLOW_SETUP``, ``LITTLE_WORKFLOW_MAX_PAYLOAD_BYTES``
and, for crash tests,
``LITTLE_WORKFLOW_CRASH_AFTER_EVENTS`` and ``LITTLE_WORKFLOW_FAULT``. (Model providers
read their API keys from the environment variables their slots name, when the setup
builds them.)
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from little_workflow import __version__
from little_workflow._environment import CRASH_ENV, FAULT_ENV
from little_workflow.cli._group import LazyCommand, LazyGroup

# Nothing here imports the runtime, pydantic or asyncio at module level: `--help` and a
# command's `--help` import this module and the one command's module only (see
# `_group.py`); each command imports what it runs in its body.

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

EXIT_RUN_FAILED = 1
EXIT_INVALID = 3
EXIT_STORAGE = 4
EXIT_BUSY = 5
EXIT_CANCELLED = 6
EXIT_WAITING = 7
EXIT_INTERNAL = 70

_CLI = "little_workflow.cli."
#: Every command: its module, its object there, and its one-line help (the first paragraph
#: of its docstring, which `tests/cli/test_lazy_group.py` checks), listed by `--help`
#: without importing the module.
COMMANDS: dict[str, LazyCommand] = {
    "answer": LazyCommand(
        module=_CLI + "_answer",
        attr="answer",
        summary="Answer PROMPT_ID of EXECUTION_ID with TEXT; the next resume continues with it.",
    ),
    "artifacts": LazyCommand(
        module=_CLI + "_artifacts",
        attr="artifacts",
        summary="List the artifacts (of RUN_ID, or of every run), oldest first.",
    ),
    "cancel": LazyCommand(
        module=_CLI + "_manage",
        attr="cancel",
        summary="Cancel RUN_ID and its unfinished sub-runs.",
    ),
    "clear": LazyCommand(
        module=_CLI + "_manage",
        attr="clear",
        summary="Discard the recovery data of a harness execution: snapshot, ledger, answers.",
    ),
    "db": LazyCommand(
        module=_CLI + "_db",
        attr="db",
        summary="The store's schema: its version, and migrating it to this program's.",
    ),
    "demo": LazyCommand(
        module=_CLI + "_demo",
        attr="demo",
        summary="Run a workflow, kill it with SIGKILL mid-flight, resume it, and show what "
        "was saved.",
    ),
    "events": LazyCommand(
        module=_CLI + "_inspect",
        attr="events",
        summary="Print RUN_ID's events in order (with --follow, as they are appended).",
    ),
    "export-artifact": LazyCommand(
        module=_CLI + "_artifacts",
        attr="export_artifact",
        summary="Write ARTIFACT_ID's content to DEST (a file, a directory, or - for stdout).",
    ),
    "fork": LazyCommand(
        module=_CLI + "_fork",
        attr="fork",
        summary="Start a new run from RUN_ID that keeps its completed steps before STEP_PATH.",
    ),
    "gc": LazyCommand(
        module=_CLI + "_gc",
        attr="gc",
        summary="Delete finished runs' events, scratch and artifacts, then unreferenced blobs.",
    ),
    "loop": LazyCommand(
        module=_CLI + "_loops",
        attr="loop",
        summary="Run WORKFLOW cycle after cycle until the supervisor is done; print its final "
        "output.",
    ),
    "loop-status": LazyCommand(
        module=_CLI + "_loops",
        attr="loop_status",
        summary="Show OUTER_LOOP_ID: its goal, each cycle (run, status, summary) and its result.",
    ),
    "memory": LazyCommand(
        module=_CLI + "_artifacts",
        attr="memory",
        summary="Show the agents' memory: the namespaces; NAMESPACE's keys and values; or "
        "KEY's value.",
    ),
    "model-limit": LazyCommand(
        module=_CLI + "_queues",
        attr="model_limit",
        summary="Limits of the model calls through a model slot, in every process: set, list, "
        "remove.",
    ),
    "queue": LazyCommand(
        module=_CLI + "_queues",
        attr="queue",
        summary="Named queues of submitted runs and their limits: set, list, remove.",
    ),
    "replay": LazyCommand(
        module=_CLI + "_runs",
        attr="replay",
        summary="Rebuild RUN_ID's state from its log (calls nothing) and print it (--json: "
        "as JSON).",
    ),
    "resume": LazyCommand(
        module=_CLI + "_runs",
        attr="resume",
        summary="Continue RUN_ID from the end of its log and print its output as JSON.",
    ),
    "retry": LazyCommand(
        module=_CLI + "_runs",
        attr="retry",
        summary="Run the failed RUN_ID again from its failed step (same workflow version and "
        "input).",
    ),
    "run": LazyCommand(
        module=_CLI + "_runs",
        attr="run",
        summary="Run WORKFLOW (.json/.yaml) and print its output as JSON.",
    ),
    "runs": LazyCommand(
        module=_CLI + "_inspect",
        attr="runs",
        summary="List runs, most recent first: id, workflow, status, steps done, events, "
        "started, duration.",
    ),
    "schedule": LazyCommand(
        module=_CLI + "_schedules",
        attr="schedule",
        summary="Runs started on a cron expression by the workers: add, list, remove, pause, "
        "resume.",
    ),
    "schema": LazyCommand(
        module=_CLI + "_validate",
        attr="schema",
        summary="Print the JSON Schema of an LWIR workflow document (for editors and other tools).",
    ),
    "show": LazyCommand(
        module=_CLI + "_inspect",
        attr="show",
        summary=(
            "Show RUN_ID's steps as a tree: paths, visits, statuses, attempts, timings, "
            "and its model usage (tokens per slot and step, paid and replayed)."
        ),
    ),
    "send": LazyCommand(
        module=_CLI + "_send",
        attr="send",
        summary="Send EVENT (with --data) to RUN_ID; committed before this returns.",
    ),
    "submit": LazyCommand(
        module=_CLI + "_workers",
        attr="submit",
        summary="Queue a run of WORKFLOW for the workers and print its id.",
    ),
    "ui": LazyCommand(
        module=_CLI + "_ui",
        attr="ui",
        summary="Serve the web UI (runs, steps, events, model and tool calls) until interrupted.",
    ),
    "validate": LazyCommand(
        module=_CLI + "_validate",
        attr="validate",
        summary="Check WORKFLOW as a run would before it starts, and print what it uses; "
        "writes nothing.",
    ),
    "wait": LazyCommand(
        module=_CLI + "_workers",
        attr="wait",
        summary="Wait until RUN_ID ends; print its output as JSON (exit 1 failed, 6 cancelled).",
    ),
    "worker": LazyCommand(
        module=_CLI + "_workers",
        attr="worker",
        summary="Claim queued runs and drive them until stopped (SIGTERM/SIGINT release them); "
        "resume the runs whose process died (see --recover-every).",
    ),
    "workers": LazyCommand(
        module=_CLI + "_workers",
        attr="workers",
        summary="List the workers: host, pid, runs held and their lease ages, last heartbeat.",
    ),
}


@dataclass(slots=True)
class Options:
    """Global options, parsed once."""

    data_dir: Path
    store: str | None
    debug: bool
    lock_timeout: float
    crash_after_events: int | None
    setup: str | None
    faults: str | None
    #: The largest payload a run may store (``None``: the runtime's default, 64 MiB).
    max_payload_bytes: int | None = None
    #: Whether a workflow file's ``fn`` may name a function to import (not only the
    #: setup's); ``--no-import-functions`` turns it off.
    import_functions: bool = True
    #: Threads for sync user code (``None``: the runtime's default; ``worker --threads``).
    sync_threads: int | None = None
    #: What resuming a code-first run whose code changed does (``--on-code-drift``).
    on_code_drift: str = "accept"


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def describe_error(exc: BaseException) -> tuple[str, int]:
    """The one line a user sees for ``exc``, and the exit code (see the module docstring)."""
    from little_workflow.errors import (
        CapabilityDriftError,
        CodeDriftError,
        LeaseLostError,
        LittleWorkflowError,
        LockTimeoutError,
        RunFailedError,
        StorageError,
        SupervisorError,
    )

    # Library errors with an exit code of their own; any other is invalid input (3).
    exit_codes: tuple[tuple[type[LittleWorkflowError], int], ...] = (
        (LockTimeoutError, EXIT_BUSY),
        (LeaseLostError, EXIT_BUSY),
        (StorageError, EXIT_STORAGE),
        # User code failed, as a step does: not the user's input.
        (SupervisorError, EXIT_RUN_FAILED),
    )
    if isinstance(exc, RunFailedError):
        if exc.cause_code == "cancelled":
            return f"error: {exc.message}", EXIT_CANCELLED
        cause = exc.cause_code if exc.reason is None else f"{exc.cause_code}: {exc.reason}"
        return f"error: run failed ({cause}): {exc.message}", EXIT_RUN_FAILED
    if isinstance(exc, CapabilityDriftError):
        # The seed's own form: the error's name, then its message, which already says
        # what changed and the two ways out.
        return f"CapabilityDriftError: {exc.message}", EXIT_INVALID
    if isinstance(exc, CodeDriftError):
        return f"CodeDriftError: {exc.message}", EXIT_INVALID
    if isinstance(exc, LittleWorkflowError):
        code = next((code for kind, code in exit_codes if isinstance(exc, kind)), EXIT_INVALID)
        return f"error: {exc.code}: {exc.message}", code
    return (
        f"error: internal error: {type(exc).__name__}: {exc} (run with --debug for details)",
        EXIT_INTERNAL,
    )


def execute(
    options: Options,
    work: Callable[[], Coroutine[Any, Any, T]],
    *,
    result_on_stdout: bool = False,
    on_error: Callable[[Exception], None] | None = None,
) -> T:
    """Run ``work`` on a fresh event loop, turning errors into one line and an exit code.

    With ``result_on_stdout`` (a command whose stdout is its result: run, resume, fork,
    ...), whatever the run's code writes to stdout goes to stderr instead (see
    ``_stdout_to_stderr``), so stdout carries the result alone. ``on_error`` is called
    with an error before it is reported (``--json``: the error as JSON on stdout).
    """
    import asyncio

    try:
        with _stdout_to_stderr() if result_on_stdout else contextlib.nullcontext():
            return asyncio.run(work())
    except KeyboardInterrupt:
        _fail("interrupted; the run can be resumed", 130)
    except (click.ClickException, BrokenPipeError):
        # Click reports its own (usage errors), and a reader that went away (`| head`)
        # is not a bug: click exits quietly for it.
        raise
    except Exception as exc:
        if options.debug:
            traceback.print_exc()
        from little_workflow.errors import RunWaitingError

        if on_error is not None:
            on_error(exc)
        if isinstance(exc, RunWaitingError):
            _waiting(options, exc)
        refuse(exc)


def _waiting(options: Options, exc: Any) -> NoReturn:
    """A run that parked at a wait: what it waits for and how to answer; exit 7."""
    from little_workflow.cli._inspect import waiting_line

    click.echo(f"run {exc.run_id} is waiting (nothing failed; no process holds it):", err=True)
    for wait in exc.waits:
        click.echo(f"  {waiting_line(options, exc.run_id, wait)}", err=True)
    click.echo(
        "  a worker (little-workflow worker) wakes it when it is due or answered; "
        f"or continue it by hand: little-workflow resume {exc.run_id}",
        err=True,
    )
    sys.exit(EXIT_WAITING)


def refuse(exc: BaseException) -> NoReturn:
    """Print ``exc`` as its one line (``describe_error``) and exit with its code."""
    message, code = describe_error(exc)
    click.echo(message, err=True)
    sys.exit(code)


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point stdout at stderr for the duration, at both levels, for every thread.

    ``sys.stdout`` (a step's ``print``, from any thread) and file descriptor 1 (a C
    extension, ``os.write(1, ...)``, a subprocess the step starts) both lead to stderr
    meanwhile; afterwards both lead to the original stdout again, for the result.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 (closed by the caller): nothing to keep apart
        saved = None
    if saved is not None:
        os.dup2(2, 1)
    original, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout = original
        sys.stderr.flush()
        if saved is not None:
            os.dup2(saved, 1)
            os.close(saved)


def on_code_drift_option(function: Any) -> Any:
    """``--on-code-drift accept|refuse``: what resuming a changed code-first run does."""
    return click.option(
        "--on-code-drift",
        type=click.Choice(["accept", "refuse"]),
        default="accept",
        show_default=True,
        help="When a code-first run's code changed since it was pinned: go on with the "
        "new code (recorded as code.drifted), or refuse (CodeDriftError, nothing written).",
    )(function)


def print_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (pretty on a terminal, compact otherwise)."""
    if sys.stdout.isatty():
        click.echo(json.dumps(value, indent=2, ensure_ascii=False))
    else:
        click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def parse_json_option(text: str | None, what: str) -> Any:
    """Parse a JSON command-line value, or exit with a usage error naming ``what``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint=what) from exc


#: ``--input``'s help, shared by ``run``, ``submit``, ``fork`` and ``loop``.
INPUT_HELP = (
    "as JSON; @FILE reads it from FILE, - from stdin (for inputs too long for a command "
    "line; JSON never starts with @, so a value starting with @ is always a file)"
)


def input_option(what: str) -> Callable[[F], F]:
    """``--input``: JSON text, ``@FILE`` or ``-`` (stdin); read it with ``read_input``."""
    return click.option(
        "--input", "input_text", default=None, metavar="JSON|@FILE|-", help=f"{what}, {INPUT_HELP}."
    )


def read_input(text: str | None) -> Any:
    """``--input``'s value: inline JSON, or the JSON of ``@FILE`` or of stdin (``-``).

    Inline JSON that does not parse is a usage error (exit 2), as before; a file or stdin
    that cannot be read or does not hold JSON is invalid input (``InvalidInputError``,
    exit 3) naming it. An input too long for the argument list (about 128 KiB on Linux)
    can only come this way.
    """
    if text is None:
        return None
    if text != "-" and not text.startswith("@"):
        return parse_json_option(text, "--input")
    from little_workflow.errors import InvalidInputError, shown

    # A path is what the user needs to see whole; PATH_MAX bounds it.
    source = "stdin" if text == "-" else f"file {shown(text[1:], limit=4096)}"
    try:
        if text == "-":
            content = sys.stdin.buffer.read().decode("utf-8")
        else:
            content = Path(text[1:]).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        refuse(InvalidInputError(f"cannot read --input from {source}: {reason}"))
    try:
        return json.loads(content)
    except ValueError as exc:
        refuse(InvalidInputError(f"--input from {source} is not valid JSON: {exc}"))


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    global_options=lambda ctx, values: options_from(values),
    argument_types=lambda: {"run_id": run_id_type()},
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="little-workflow")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The data directory [env LITTLE_WORKFLOW_DATA_DIR; default .little-workflow].",
)
@click.option(
    "--store",
    default=None,
    help="Store URL (sqlite:///..., postgresql://...) [env LITTLE_WORKFLOW_STORE; "
    "default: SQLite in the data directory].",
)
@click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds to wait for a run held by another process.",
)
@click.option(
    "--setup",
    default=None,
    metavar="MODULE:ATTR",
    help="package.module:attr naming a RuntimeSetup (model slots, tools, workflows) "
    "[env LITTLE_WORKFLOW_SETUP].",
)
@click.option(
    "--max-payload-bytes",
    type=click.IntRange(min=1),
    default=None,
    envvar="LITTLE_WORKFLOW_MAX_PAYLOAD_BYTES",
    help="The largest step output, tool result or model request a run stores, in bytes "
    "of JSON; a larger one stops the run at its step, resumable [env "
    "LITTLE_WORKFLOW_MAX_PAYLOAD_BYTES; default 67108864 (64 MiB)].",
)
@click.option(
    "--no-import-functions",
    is_flag=True,
    help="Call only the setup's functions: a workflow file's fn naming any other is refused "
    "(function_not_allowed), nothing imported. For workflow files you did not write; a "
    "workflow computed at run time (a planner's) is held to this always.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks (of an error, and in a worker's log).")
@click.pass_context
def cli(ctx: click.Context, /, **values: Any) -> None:
    """Durable execution for LLM-agent workflows.

    The options below may also be given after the command (little-workflow run x.yaml
    --setup mod:setup); there they win over the same option given before it.
    """
    ctx.obj = options_from(values)
    # Like `python -m`, make modules in the current directory importable, so that a
    # workflow's `fn: mymodule:function` finds mymodule.py next to the user.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def run_id_type() -> click.ParamType[Any]:
    """The type of every ``RUN_ID`` argument: it completes run ids in the shell."""
    from little_workflow.cli._complete import RUN_ID

    return RUN_ID


def options_from(values: dict[str, Any]) -> Options:
    """``Options`` from the global options' values (by parameter name) and the environment.

    The root group calls it with its own values; a command given global options after
    its name calls it again with those merged over the root's (``LazyGroup``).
    """
    crash = os.environ.get(CRASH_ENV)
    if crash is not None and not crash.isdigit():
        raise click.BadParameter(f"{CRASH_ENV} must be a positive integer, not {crash!r}")
    data_dir: Path | None = values.get("data_dir")
    return Options(
        data_dir=data_dir or Path(os.environ.get("LITTLE_WORKFLOW_DATA_DIR", ".little-workflow")),
        store=values.get("store") or os.environ.get("LITTLE_WORKFLOW_STORE") or None,
        debug=bool(values.get("debug")),
        lock_timeout=float(values.get("lock_timeout", 60.0)),
        crash_after_events=int(crash) if crash else None,
        setup=values.get("setup") or os.environ.get("LITTLE_WORKFLOW_SETUP") or None,
        faults=os.environ.get(FAULT_ENV) or None,
        max_payload_bytes=values.get("max_payload_bytes"),
        import_functions=not values.get("no_import_functions"),
    )


def main() -> None:
    """Run the command line."""
    # Named, not taken from argv[0]: `python -m little_workflow` says and completes as
    # `little-workflow` too (the completion variable is _LITTLE_WORKFLOW_COMPLETE).
    cli(prog_name="little-workflow")
