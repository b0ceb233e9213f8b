"""The ``little-workflow`` command: parse options at the edge, call the runtime, print.

Exit codes (stable, for scripts):

====  =========================================================================
0     success
1     the run failed (stderr names its cause code)
2     usage error (a bad option or argument)
3     invalid input or configuration (a bad workflow file, id, input, store URL; a
      resume refused with ``CapabilityDriftError``)
4     storage error (unreadable, corrupt or unavailable store)
5     busy: another process holds the run's lock past ``--lock-timeout``, or a
      ``cancel`` was not acted on within ``--wait``
6     the run was cancelled (by ``cancel``, now or before)
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

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from little_workflow import __version__
from little_workflow.errors import (
    CapabilityDriftError,
    LittleWorkflowError,
    LockTimeoutError,
    RunFailedError,
    StorageError,
)

T = TypeVar("T")

EXIT_RUN_FAILED = 1
EXIT_INVALID = 3
EXIT_STORAGE = 4
EXIT_BUSY = 5
EXIT_CANCELLED = 6
EXIT_INTERNAL = 70
#: Library errors with an exit code of their own; any other is invalid input (3).
_EXIT_CODES: tuple[tuple[type[LittleWorkflowError], int], ...] = (
    (LockTimeoutError, EXIT_BUSY),
    (StorageError, EXIT_STORAGE),
)


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


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def describe_error(exc: BaseException) -> tuple[str, int]:
    """The one line a user sees for ``exc``, and the exit code (see the module docstring)."""
    if isinstance(exc, RunFailedError):
        if exc.cause_code == "cancelled":
            return f"error: {exc.message}", EXIT_CANCELLED
        cause = exc.cause_code if exc.reason is None else f"{exc.cause_code}: {exc.reason}"
        return f"error: run failed ({cause}): {exc.message}", EXIT_RUN_FAILED
    if isinstance(exc, CapabilityDriftError):
        # The seed's own form: the error's name, then its message, which already says
        # what changed and the two ways out.
        return f"CapabilityDriftError: {exc.message}", EXIT_INVALID
    if isinstance(exc, LittleWorkflowError):
        code = next((code for kind, code in _EXIT_CODES if isinstance(exc, kind)), EXIT_INVALID)
        return f"error: {exc.code}: {exc.message}", code
    return (
        f"error: internal error: {type(exc).__name__}: {exc} (run with --debug for details)",
        EXIT_INTERNAL,
    )


def execute(options: Options, work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` on a fresh event loop, turning errors into one line and an exit code."""
    try:
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
        message, code = describe_error(exc)
        click.echo(message, err=True)
        sys.exit(code)


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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.pass_context
def cli(
    ctx: click.Context,
    *,
    data_dir: Path | None,
    store: str | None,
    lock_timeout: float,
    setup: str | None,
    max_payload_bytes: int | None,
    debug: bool,
) -> None:
    """Durable execution for LLM-agent workflows."""
    from little_workflow.runtime import CRASH_ENV, FAULT_ENV

    crash = os.environ.get(CRASH_ENV)
    if crash is not None and not crash.isdigit():
        raise click.BadParameter(f"{CRASH_ENV} must be a positive integer, not {crash!r}")
    ctx.obj = Options(
        data_dir=data_dir or Path(os.environ.get("LITTLE_WORKFLOW_DATA_DIR", ".little-workflow")),
        store=store or os.environ.get("LITTLE_WORKFLOW_STORE") or None,
        debug=debug,
        lock_timeout=lock_timeout,
        crash_after_events=int(crash) if crash else None,
        setup=setup or os.environ.get("LITTLE_WORKFLOW_SETUP") or None,
        faults=os.environ.get(FAULT_ENV) or None,
        max_payload_bytes=max_payload_bytes,
    )
    # Like `python -m`, make modules in the current directory importable, so that a
    # workflow's `fn: mymodule:function` finds mymodule.py next to the user.
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


def main() -> None:
    """Run the command line."""
    from little_workflow.cli import (
        _answer,
        _artifacts,
        _demo,
        _gc,
        _inspect,
        _loops,
        _manage,
        _runs,
    )
    from little_workflow.cli._fork import register as register_fork
    from little_workflow.cli._ui import register as register_ui

    _runs.register(cli)
    _artifacts.register(cli)
    _manage.register(cli)
    _inspect.register(cli)
    _loops.register(cli)
    _answer.register(cli)
    _demo.register(cli)
    register_ui(cli)
    register_fork(cli)
    _gc.register(cli)
    cli()
