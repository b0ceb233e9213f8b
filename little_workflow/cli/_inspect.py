"""Commands that look at runs without running anything: ``runs``, ``show``, ``events``.

Each prints a table for a person, or with ``--json`` one JSON document (``runs``) or one
JSON object per line (``events``) for a script. What they print is built by
``little_workflow.views``, which the web UI reads runs through too.
"""

from __future__ import annotations

import datetime
import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from little_workflow.cli._main import Options, execute, print_json
from little_workflow.cli._runs import _runtime
from little_workflow.cli._tables import print_table, stdout_console
from little_workflow.cli._tree import SHOWN_CHILDREN
from little_workflow.cli._usage import prices_option, usage_lines

if TYPE_CHECKING:
    from collections.abc import Mapping

    from little_workflow.codec import JsonValue
    from little_workflow.events import RecordedEvent
    from little_workflow.runtime import Runtime
    from little_workflow.views import RunReader, RunSummary, RunView

#: ``RunStatus``'s values, in its order (a test checks them): spelled out so that a
#: command's ``--help`` does not import the event models.
RUN_STATUSES = ("running", "completed", "failed", "cancelled")
#: What ``runs`` and ``show`` report: a run's logged status, or ``interrupted`` for an
#: unfinished run nobody drives (``little_workflow.views.INTERRUPTED``).
REPORTED_STATUSES = (*RUN_STATUSES, "interrupted", "waiting")


#: Events ``events`` reads (and decodes) at once.
_EVENTS_PAGE = 1000


def _when(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _duration(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}m"


@click.command()
@click.option(
    "--status",
    type=click.Choice(REPORTED_STATUSES),
    default=None,
    help="Only runs with this status (interrupted: unfinished, and its process is gone; "
    "waiting: parked at a wait for an event or a timer).",
)
@click.option(
    "--waiting",
    is_flag=True,
    help="Only runs that wait for an event or a timer (the same as --status waiting).",
)
@click.option("--workflow", default=None, help="Only runs of this workflow.")
@click.option("--limit", type=click.IntRange(min=1), default=50, help="At most this many.")
@click.option(
    "--before",
    "before_run",
    default=None,
    metavar="RUN_ID",
    help="Only runs started before this one (the last of the page shown): the next page.",
)
@click.option("--sub-runs", is_flag=True, help="Include sub-runs (hidden by default).")
@click.option(
    "--stuck",
    is_flag=True,
    help="Only runs nobody drives that need a look: interrupted runs, expired worker leases, "
    "side-effect intents without outcome; each with the command that carries it on.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@prices_option("each run's usage in --json has")
@click.pass_obj
def runs(
    options: Options,
    *,
    status: str | None,
    workflow: str | None,
    limit: int,
    before_run: str | None,
    sub_runs: bool,
    stuck: bool,
    waiting: bool,
    as_json: bool,
    prices: Path | None,
) -> None:
    """List runs, most recent first: id, workflow, status, steps done, events, started, duration."""
    from little_workflow.views import reported_status

    if waiting:
        status = "waiting"

    if stuck:
        _stuck_runs(options, as_json=as_json)
        return

    async def work() -> list[RunSummary]:
        from little_workflow.errors import ConfigError
        from little_workflow.ids import validate_id

        async with _runtime(options) as runtime:
            before = None
            if before_run is not None:
                # A keyset cursor, as the UI's ``next``: the list's order is (started, id).
                validate_id(before_run, what="run id")
                info = await runtime.events.get_run(before_run)
                if info is None:
                    raise ConfigError(
                        f"there is no run {before_run!r} in this store (--before)",
                        code="run_not_found",
                    )
                before = (info.created_at, info.run_id)
            return await _reader(runtime, prices).summaries(
                status=None if status is None else reported_status(status),
                workflow=workflow,
                sub_runs=sub_runs,
                before=before,
                limit=limit,
            )

    found = execute(options, work)
    if as_json:
        print_json([summary.to_json() for summary in found])
        return
    rows = [
        (
            summary.run_id,
            summary.workflow or "-",
            _status_text(summary),
            "?" if summary.steps_done is None else str(summary.steps_done),
            str(summary.events),
            "?" if summary.usage is None else str(summary.usage.paid.total_tokens),
            _when(summary.created_at),
            _duration(summary.updated_at - summary.created_at),
        )
        for summary in found
    ]
    columns = (
        "run",
        "workflow",
        "status",
        "steps done",
        "events",
        "tokens",
        "started",
        "duration",
    )
    print_table(columns, rows, "no runs")


def _status_text(summary: RunSummary) -> str:
    """The status column: a waiting run says what it waits for."""
    waiting = summary.waiting
    if waiting is None or summary.finished:
        return summary.reported_status or "-"
    event = waiting.get("event")
    if waiting.get("kind") == "ask_user":
        return f"waiting (question {event})"
    return f"waiting ({'timer' if event is None else f'event {event}'})"


def waiting_line(options: Options, run_id: str, waiting: Mapping[str, JsonValue]) -> str:
    """One line on what a parked run waits for, since when, and how to answer it."""
    since = waiting.get("since")
    since_text = _when(float(since)) if isinstance(since, int | float) else "?"
    wake = waiting.get("wakeAt")
    wake_text = _when(float(wake)) if isinstance(wake, int | float) else None
    event = waiting.get("event")
    if event is None:
        return f"waiting: a timer (step {waiting.get('path')}) since {since_text}, due {wake_text}"
    target = str(waiting.get("runId") or run_id)
    if waiting.get("ready"):
        return (
            f"waiting: event {event!r} (step {waiting.get('path')}) arrived; a worker continues "
            f"the run, or by hand: little-workflow resume {target}"
        )
    words = ["little-workflow"]
    if options.data_dir != Path(".little-workflow"):
        words += ["--data-dir", str(options.data_dir)]
    if options.store is not None:
        words += ["--store", _without_password(options.store)]
    until = "" if wake_text is None else f" (times out {wake_text})"
    if waiting.get("kind") == "ask_user":
        # The answer is a JSON string: the command is shown ready to edit.
        command = shlex.join([*words, "send", target, str(event), "--data", '"YOUR ANSWER"'])
        return (
            f"waiting: the agent at {waiting.get('path')} asks: {waiting.get('question')!r} "
            f"(since {since_text}{until}); answer with: {command}"
        )
    command = shlex.join([*words, "send", target, str(event), "--data", "JSON"])
    return (
        f"waiting: event {event!r} (step {waiting.get('path')}) since {since_text}{until}; "
        f"answer with: {command}"
    )


def _reader(runtime: Runtime, prices: Path | None = None) -> RunReader:
    """The read model over ``runtime``'s store, telling interrupted runs from running ones
    (and costing model usage with the price table in the file ``prices``)."""
    from little_workflow.views import RunReader, load_prices

    return RunReader(
        runtime.events,
        interrupted=runtime.interrupted_runs,
        waiting=runtime.waiting_runs,
        prices=None if prices is None else load_prices(prices),
    )


def resume_command(options: Options, run_id: str) -> str:
    """The command line that resumes ``run_id`` in the store and data directory in use.

    The global options are repeated when they are not the defaults; a password in the
    store URL is shown as ``***`` (the command is printed, and printed output is kept).
    """
    words = ["little-workflow"]
    if options.data_dir != Path(".little-workflow"):
        words += ["--data-dir", str(options.data_dir)]
    if options.store is not None:
        words += ["--store", _without_password(options.store)]
    return shlex.join([*words, "resume", run_id])


def _without_password(url: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    if not password:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}"))


def _stuck_command(options: Options, reason: str, run_id: str) -> str:
    if reason == "lease_expired":
        # Workers claim such a run by themselves: what it lacks is one running.
        store = [] if options.store is None else ["--store", _without_password(options.store)]
        return shlex.join(["little-workflow", *store, "worker"])
    return resume_command(options, run_id)


def _stuck_runs(options: Options, *, as_json: bool) -> None:
    from little_workflow.runtime._stuck import StuckRun

    async def work() -> list[StuckRun]:
        async with _runtime(options) as runtime:
            found: list[StuckRun] = await runtime.stuck_runs()
            return found

    found = execute(options, work)
    if as_json:
        print_json(
            [
                {
                    "runId": item.run_id,
                    "reason": item.reason,
                    "detail": item.detail,
                    "workerId": item.worker_id,
                    "stepPath": item.step_path,
                    "key": item.key,
                    "command": _stuck_command(options, item.reason, item.run_id),
                }
                for item in found
            ]
        )
        return
    rows = [
        (item.run_id, item.reason, item.detail, _stuck_command(options, item.reason, item.run_id))
        for item in found
    ]
    print_table(("run", "reason", "detail", "command"), rows, "no stuck runs")


@click.command()
@click.argument("run_id")
@click.option("--type", "types", multiple=True, help="Only events of this type (repeatable).")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Only events past this seq.")
@click.option(
    "--follow",
    is_flag=True,
    help="Keep printing new events until the run ends (or is found interrupted).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line, for scripts.")
@click.pass_obj
def events(
    options: Options,
    *,
    run_id: str,
    types: tuple[str, ...],
    after: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Print RUN_ID's events in order (with --follow, as they are appended).

    ``--follow`` stops when the run ends, or when it is found interrupted (its process
    died: nobody will append to it until it is resumed), saying so on stderr.
    """
    import asyncio

    from little_workflow.errors import ConfigError
    from little_workflow.views import TERMINAL

    async def work() -> None:
        async with _runtime(options) as runtime:
            log = runtime.events
            position = after
            polls = 0
            while True:
                # The status first: once it is terminal, the read below has every event.
                info = await log.get_run(run_id)
                if info is None:
                    raise ConfigError(
                        f"there is no run {run_id!r} in this store", code="run_not_found"
                    )
                # A page at a time, printed as it comes: a run of 100,000 events is never
                # held whole.
                records = await log.read(run_id, after=position, limit=_EVENTS_PAGE)
                for record in records:
                    position = record.seq
                    if not types or record.type in types:
                        _print_event(record, as_json)
                if len(records) == _EVENTS_PAGE:
                    continue
                if not follow or info.status in TERMINAL:
                    return
                # Nobody will append to a run whose process died: say so and stop, about
                # once a second while nothing comes (as the UI's stream does).
                if not records and polls % 5 == 0:
                    interrupted = await runtime.interrupted_runs([info])
                    if run_id in interrupted:
                        click.echo(
                            f"run {run_id} is interrupted: {interrupted[run_id]}; resume it "
                            f"with: {resume_command(options, run_id)}",
                            err=True,
                        )
                        return
                polls += 1
                await asyncio.sleep(0.2)

    execute(options, work)


def _print_event(record: RecordedEvent, as_json: bool) -> None:
    from little_workflow.views import event_row

    row = event_row(record)
    if as_json:
        click.echo(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
        return
    detail = {
        key: value
        for key, value in row["event"].items()
        if key not in ("type",) and value not in (None, [], {})
    }
    text = json.dumps(detail, ensure_ascii=False, separators=(",", ":"))
    if len(text) > 160:
        text = text[:157] + "..."
    click.echo(f"{record.seq:>6}  {_when(record.ts)}  {record.type:<28} {text}")


@click.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts (every step).")
@click.option(
    "--all",
    "show_all",
    is_flag=True,
    help="Draw every step; without it, under each node past the first "
    f"{SHOWN_CHILDREN} children, the completed rest is one '… N more' line.",
)
@prices_option("the usage section shows")
@click.pass_obj
def show(
    options: Options, *, run_id: str, as_json: bool, show_all: bool, prices: Path | None
) -> None:
    """Show RUN_ID's steps as a tree: paths, visits, statuses, attempts, timings, and
    its model usage (tokens per slot and step, paid and replayed).

    A long run's tree is summarized: under each node, the first children are drawn,
    and every one with a step that did not complete (failed, running); the other
    completed ones are one '… N more' line. --all draws them all; --json has every step.
    """
    from little_workflow.errors import ConfigError

    async def work() -> RunView:
        async with _runtime(options) as runtime:
            view = await _reader(runtime, prices).view(run_id)
            if view is None:
                raise ConfigError(f"there is no run {run_id!r} in this store", code="run_not_found")
            return view

    view = execute(options, work)
    summary = view.summary
    if as_json:
        print_json(
            {
                "runId": run_id,
                "workflow": summary.workflow,
                "status": summary.reported_status,
                "interruption": summary.interruption,
                "waiting": summary.to_json()["waiting"],
                "resumeCommand": (resume_command(options, run_id) if summary.interrupted else None),
                "stepsDone": summary.steps_done,
                "steps": [row.to_json() for row in view.steps],
                "subRuns": [sub.to_json() for sub in view.sub_runs],
                "code": view.run.get("code"),
                "usage": view.usage.to_json(),
            }
        )
        return
    from little_workflow.cli._tree import collapsed, print_tree

    console = stdout_console()
    title = (run_id, summary.workflow or "-", summary.reported_status or "-")
    tree = view.tree.nodes
    print_tree(console, title, tree if show_all else collapsed(tree))
    if summary.waiting is not None:
        console.print(waiting_line(options, run_id, summary.waiting), markup=False)
    elif summary.interrupted:
        console.print(
            f"interrupted: {summary.interruption}; nobody drives it. Resume it with: "
            f"{resume_command(options, run_id)}",
            markup=False,
        )
    code = view.run.get("code")
    if code is not None:
        for line in _code_lines(code):
            console.print(line, markup=False)
    for line in usage_lines(view.usage):
        console.print(line, markup=False)
    # Sub-runs an agent started (an orchestrator's start_workflow) hang off no step path.
    by_step = {row.sub_run_id for row in view.steps if row.sub_run_id}
    started = [sub for sub in view.sub_runs if sub.run_id not in by_step]
    if started:
        console.print("sub-runs started by agents:")
        for sub in started:
            status = sub.reported_status or "-"
            console.print(f"  {sub.run_id}  {sub.workflow or '-'}  {status}", markup=False)


def _code_lines(code: dict[str, Any]) -> list[str]:
    """What ``show`` says about a code-first run's code: what it started with, and drift."""
    workflow = code["workflow"]
    lines = ["code (as the run started):", f"  workflow {workflow['name']}  {workflow['hash']}"]
    lines += [f"  step {step['name']}  {step['hash']}" for step in code["steps"]]
    for drift in code["drift"]:
        lines.append(f"code drift accepted on resume (seq {drift['seq']}):")
        lines += [
            f'  - {change["kind"]} {change["name"]}: "{change["old"]}" → "{change["new"]}"'
            for change in drift["changes"]
        ]
    return lines
