"""Commands for runs on workers: ``submit``, ``worker``, ``wait``, ``workers``.

They need a store with a run queue: the default SQLite file (workers on this machine) or
``postgresql://...`` (workers on any machine), given before the command
(``little-workflow --store URL worker``) or after it (``little-workflow worker --store
URL``), or by ``LITTLE_WORKFLOW_STORE``.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import (
    EXIT_CANCELLED,
    EXIT_RUN_FAILED,
    Options,
    execute,
    input_option,
    on_code_drift_option,
    print_json,
    read_input,
)
from little_workflow.cli._runs import _runtime
from little_workflow.cli._workflow_arg import workflow_argument


@click.command()
@workflow_argument
@input_option("The run's input")
@click.option("--run-id", default=None, help="Use this run id (queues it again if it exists).")
@click.option(
    "--queue",
    "queue_name",
    default="default",
    show_default=True,
    help="The queue whose limits the run is claimed under (see `queue set`).",
)
@click.pass_obj
def submit(
    options: Options,
    *,
    workflow: Path | str,
    input_text: str | None,
    run_id: str | None,
    queue_name: str,
) -> None:
    """Queue a run of WORKFLOW for the workers and print its id."""
    run_input = read_input(input_text)

    async def work() -> str:
        async with _runtime(options) as runtime:
            return str(await runtime.submit(workflow, run_input, run_id=run_id, queue=queue_name))

    click.echo(execute(options, work, result_on_stdout=True))


@click.command()
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Runs driven at once.",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="How long a claim lasts without renewal (renewed every third of it).",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=0.5,
    show_default=True,
    help="Seconds between claims while idle.",
)
@click.option(
    "--recover-every",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Seconds between looks for interrupted runs (started by `run`, their process "
    "dead) to resume here, the first at start; 0 switches recovery off.",
)
@click.option(
    "--schedule-every",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between looks for due schedule ticks to start (see `schedule`); 0 "
    "switches it off.",
)
@click.option("--worker-id", default=None, help="This worker's id [default: a new one].")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Threads for sync step, tool and hook functions, shared by the runs driven "
    "here; a call waits when all are busy [default: 32].",
)
@click.option(
    "--max-runs",
    type=click.IntRange(min=1),
    default=None,
    help="Stop after this many runs ended here [default: run until SIGTERM/SIGINT].",
)
@on_code_drift_option
@click.pass_obj
def worker(
    options: Options,
    *,
    on_code_drift: str,
    concurrency: int,
    lease_seconds: float,
    poll_interval: float,
    recover_every: float,
    schedule_every: float,
    worker_id: str | None,
    threads: int | None,
    max_runs: int | None,
) -> None:
    """Claim queued runs and drive them until stopped (SIGTERM/SIGINT release them);
    resume the runs whose process died (see --recover-every).

    What happens meanwhile (a claim the database refused, a run that ended in an error)
    is logged on stderr, one line per event; ``little-workflow --debug worker`` adds the
    tracebacks.
    """
    import signal

    # Handled from here on: a SIGTERM while the runtime is imported and the store opens
    # stops the worker before it claims anything, and it exits 0 like any stop.
    stop_requested: list[int] = []
    stopping: list[Any] = []

    def stop(signum: int = signal.SIGTERM, _frame: object = None) -> None:
        stop_requested.append(signum)
        for runner in stopping:
            runner.stop()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    click.echo("worker: starting", err=True)

    from little_workflow.cli._logs import log_to_stderr

    log_to_stderr(debug=options.debug)

    import asyncio

    from little_workflow.runtime import Worker, WorkerReport

    if threads is not None:
        options = dataclasses.replace(options, sync_threads=threads)
    options = dataclasses.replace(options, on_code_drift=on_code_drift)

    async def work() -> WorkerReport:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop)
        async with _runtime(options) as runtime:
            runner = Worker(
                runtime,
                worker_id=worker_id,
                concurrency=concurrency,
                lease_seconds=lease_seconds,
                poll_interval=poll_interval,
                recover_every=recover_every,
                schedule_every=schedule_every,
            )
            stopping.append(runner)
            if stop_requested:
                runner.stop()
            recovery = f"recovery every {recover_every:g} s" if recover_every else "no recovery"
            click.echo(
                f"worker {runner.worker_id}: up to {concurrency} run(s), "
                f"leases of {lease_seconds:g} s, {recovery}",
                err=True,
            )
            return await runner.run(max_runs=max_runs)

    report = execute(options, work)
    done = ", ".join(f"{count} {outcome}" for outcome, count in sorted(report.finished.items()))
    click.echo(
        f"worker {report.worker_id} stopped: {done or 'no run finished'}; "
        f"{report.recovered} recovered, {report.recovery_failures} failed to recover; "
        f"{report.leases_lost} lease(s) lost, {report.released} released, "
        f"{report.errors} error(s); {report.scheduled} scheduled tick(s) submitted; "
        f"{report.parked} parked at a wait, {report.woken} waiting run(s) woken",
        err=True,
    )


@click.command()
@click.argument("run_id")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0),
    default=None,
    help="Give up after this many seconds (exit 5) [default: wait as long as it takes].",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.01),
    default=0.2,
    show_default=True,
    help="Seconds between looks at the run.",
)
@click.pass_obj
def wait(
    options: Options,
    *,
    run_id: str,
    timeout: float | None,
    interval: float,
) -> None:
    """Wait until RUN_ID ends; print its output as JSON (exit 1 failed, 6 cancelled)."""
    import asyncio
    import sys

    from little_workflow.events import RunStatus
    from little_workflow.ids import validate_id

    async def work() -> Any:
        async with _runtime(options) as runtime:
            validate_id(run_id, what="run id")
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                state = await runtime.get_state(run_id)
                if state.finished:
                    return state
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                await asyncio.sleep(interval)

    state = execute(options, work)
    if state is None:
        click.echo(f"run {run_id} has not ended after {timeout:g} s", err=True)
        sys.exit(5)
    if state.status is RunStatus.COMPLETED:
        click.echo(f"run {run_id} completed", err=True)
        print_json(state.output)
        return
    if state.status is RunStatus.CANCELLED:
        click.echo(f"run {run_id} was cancelled", err=True)
        sys.exit(EXIT_CANCELLED)
    click.echo(f"run {run_id} failed ({state.failure_cause}): {state.failure_message}", err=True)
    sys.exit(EXIT_RUN_FAILED)


@click.command()
@click.option("--all", "include_stopped", is_flag=True, help="Include stopped workers.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.pass_obj
def workers(options: Options, *, include_stopped: bool, as_json: bool) -> None:
    """List the workers: host, pid, runs held and their lease ages, last heartbeat."""
    from little_workflow.cli._tables import print_table

    async def work() -> tuple[list[Any], float]:
        async with _runtime(options) as runtime:
            await runtime.open()
            found = await runtime.queue.workers(include_stopped=include_stopped)
            return found, time.time()

    found, now = execute(options, work)
    if as_json:
        print_json(
            [
                {
                    "workerId": info.worker_id,
                    "host": info.host,
                    "pid": info.pid,
                    "concurrency": info.concurrency,
                    "startedAt": info.started_at,
                    "heartbeatAt": info.heartbeat_at,
                    "stoppedAt": info.stopped_at,
                    "runs": [
                        {"runId": run, "leaseToken": token, "leaseExpiresAt": expires}
                        for run, token, expires in info.runs
                    ],
                }
                for info in found
            ]
        )
        return
    print_table(
        ["worker", "host", "pid", "runs", "leases end in", "heartbeat", "state"],
        [
            [
                info.worker_id,
                info.host,
                str(info.pid),
                " ".join(run for run, _, _ in info.runs) or "-",
                " ".join(f"{expires - now:.0f}s" for _, _, expires in info.runs) or "-",
                f"{now - info.heartbeat_at:.0f}s ago",
                "stopped" if info.stopped_at is not None else "running",
            ]
            for info in found
        ],
        "no workers",
    )
