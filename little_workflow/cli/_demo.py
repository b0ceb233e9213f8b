"""``little-workflow demo``: start a run in a child process, SIGKILL it, resume it.

The demo is the seed's "Alpha Demo": a multi-step workflow (a tool call, a map of model
calls over four candidates, a ranking call, a judge in a decision loop) runs in a real
child process, which is killed with SIGKILL mid-flight. A second process resumes the
run from ``.little-workflow/``. The step functions log every call to a file outside
both processes, so the demo can say exactly what was replayed from the log and what
was called anew, and check the output against an uncrashed run computed first.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import EXIT_RUN_FAILED, Options, execute

# What each demo step "costs" at speed 1, to tell the time a resume did not spend again.
_SECONDS = {"fetch": 0.3, "worker": 0.9, "summarize": 0.6, "judge": 0.6, "revise": 0.3}
_INPUT = {"role": "compilers and math"}


def _cost(path: str) -> float:
    step = path.rsplit(".", 1)[-1] if "]." in path else path.split(".", 1)[0]
    return _SECONDS.get(step, 0.0)


def _calls(folder: Path) -> list[tuple[str, str, str]]:
    log = folder / "calls.log"
    if not log.exists():
        return []
    return [tuple(line.split(" ", 2)) for line in log.read_text().splitlines()]  # type: ignore[misc]


async def _reference_output() -> Any:
    """The uncrashed run's output, computed in memory at full speed."""
    from little_workflow.demo import WORKFLOW
    from little_workflow.runtime import Runtime

    speed = os.environ.get("LITTLE_WORKFLOW_DEMO_SPEED")
    os.environ["LITTLE_WORKFLOW_DEMO_SPEED"] = "0"
    try:
        with tempfile.TemporaryDirectory() as scratch:
            async with Runtime(scratch, store="memory:") as runtime:
                return (await runtime.run(WORKFLOW, _INPUT)).output
    finally:
        if speed is None:
            os.environ.pop("LITTLE_WORKFLOW_DEMO_SPEED", None)
        else:
            os.environ["LITTLE_WORKFLOW_DEMO_SPEED"] = speed


class _Watcher:
    """Reads the run's committed steps from the store, through one open event log."""

    def __init__(self, store: str, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    async def completed(self) -> list[str]:
        from little_workflow.events import StepCompleted
        from little_workflow.storage import open_event_log

        log = await open_event_log(self.store)
        try:
            return [
                record.event.step_path
                for record in await log.read(self.run_id)
                if isinstance(record.event, StepCompleted)
            ]
        finally:
            await log.close()

    async def watch(self, process: subprocess.Popen[str], until: int, show: Any) -> list[str]:
        """Report newly committed steps until ``until`` of them or the process ends."""
        import asyncio

        from little_workflow.events import StepCompleted
        from little_workflow.storage import open_event_log

        log = await open_event_log(self.store)
        seen: list[str] = []
        after = 0
        try:
            while len(seen) < until and process.poll() is None:
                for record in await log.read(self.run_id, after=after):
                    after = record.seq
                    if isinstance(record.event, StepCompleted):
                        seen.append(record.event.step_path)
                        show(record.event.step_path)
                await asyncio.sleep(0.02)
        finally:
            await log.close()
        return seen


def _child(options: Options, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "little_workflow", "--data-dir", str(options.data_dir)]
    if options.store:
        command += ["--store", options.store]
    return subprocess.Popen(
        [*command, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@click.command()
@click.option(
    "--kill-after",
    type=click.IntRange(min=1, max=8),
    default=3,
    show_default=True,
    help="Kill the first process once this many steps have completed.",
)
@click.option(
    "--speed",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Scale the simulated model and tool latencies (0: instant).",
)
@click.pass_obj
def demo(options: Options, kill_after: int, speed: float) -> None:
    """Run a workflow, kill it with SIGKILL mid-flight, resume it, and show what was saved."""
    from rich.console import Console
    from rich.markup import escape

    from little_workflow.demo import WORKFLOW
    from little_workflow.ids import new_id
    from little_workflow.runtime import DataDir

    console = Console(highlight=False)
    data_dir = DataDir.at(options.data_dir).create()
    run_id = new_id("demo")
    watcher = _Watcher(options.store or data_dir.store_url, run_id)
    folder = data_dir.run_dir(run_id) / "demo"
    folder.mkdir(parents=True, mode=0o700)
    env = {
        **os.environ,
        "LITTLE_WORKFLOW_DEMO_DIR": str(folder),
        "LITTLE_WORKFLOW_DEMO_SPEED": str(speed),
    }
    env.pop("LITTLE_WORKFLOW_CRASH_AFTER_EVENTS", None)

    def committed(path: str) -> None:
        console.print(f"   [green]✓[/] {escape(path)}{' ' * max(1, 37 - len(path))}committed")

    console.print("[bold]little-workflow demo[/]: kill a run mid-flight, then resume it\n")
    expected = execute(options, _reference_output)
    console.print(f"  workflow  {WORKFLOW.name}: a tool call, 4 model calls in a map (2 at a")
    console.print("            time), a ranking call, a judge that asks for one revision")
    console.print(f"  data      {data_dir.root}")
    console.print(f"  run id    {run_id}\n")

    started = time.monotonic()
    arguments = ["run", str(WORKFLOW), "--input", json.dumps(_INPUT), "--run-id", run_id]
    first = _child(options, env, *arguments)
    console.print(f"[bold]1.[/] process {first.pid} starts the run")
    seen = execute(options, lambda: watcher.watch(first, kill_after, committed))
    if first.poll() is not None:
        console.print("[red]the run ended before it could be killed; try a lower --kill-after[/]")
        sys.exit(EXIT_RUN_FAILED)
    os.kill(first.pid, signal.SIGKILL)
    first.communicate()
    calls_before = _calls(folder)
    killed_at = time.monotonic()
    in_flight = sorted({path for _, _, path in calls_before} - set(seen))
    console.print(
        f"   [bold red]✗ SIGKILL[/] to process {first.pid} after {killed_at - started:.1f} s: "
        f"{len(seen)} steps committed, {len(in_flight)} in flight "
        f"({escape(', '.join(in_flight)) or 'none'})\n"
    )

    console.print("[bold]2.[/] a new process resumes the run from the log")
    second = _child(options, env, "resume", run_id)
    out, err = second.communicate()
    resumed_in = time.monotonic() - killed_at
    if second.returncode != 0:
        console.print(f"[red]resume failed ({second.returncode}):[/] {escape(err.strip())}")
        sys.exit(EXIT_RUN_FAILED)
    output = json.loads(out)
    for path in execute(options, watcher.completed)[len(seen) :]:
        committed(path)
    ok = _report(
        console,
        output=output,
        expected=expected,
        replayed=seen,
        calls_before=calls_before,
        calls=_calls(folder),
        speed=speed,
        seconds=resumed_in,
    )
    console.print(
        f"\nLook inside: [bold]little-workflow show {run_id}[/] (its steps), "
        f"[bold]little-workflow events {run_id}[/] (its log), "
        "[bold]little-workflow ui[/] (in a browser)"
    )
    if not ok:
        sys.exit(EXIT_RUN_FAILED)


def _report(
    console: Any,
    *,
    output: Any,
    expected: Any,
    replayed: list[str],
    calls_before: list[tuple[str, str, str]],
    calls: list[tuple[str, str, str]],
    speed: float,
    seconds: float,
) -> bool:
    """Print what the resume replayed and called; whether the demo held its promises."""
    from rich.markup import escape

    calls_after = calls[len(calls_before) :]
    before_paths = {path for _, _, path in calls_before}
    again = [path for _, _, path in calls_after if path in before_paths]
    kinds = Counter(kind for kind, _, _ in calls_after)
    saved = sum(_cost(path) for path in replayed) * speed
    console.print(
        f"\n[bold]3.[/] the resume took {seconds:.1f} s:\n"
        f"   replayed from the log, not called again   {len(replayed)} steps "
        f"(≈{saved:.1f} s of model and tool time not paid twice)\n"
        f"   calls made after the restart              {len(calls_after)} "
        f"({kinds['model']} model, {kinds['tool']} tool)\n"
        f"   of which re-issued, in flight at the kill {len(again)}"
        + (f" ({escape(', '.join(again))})" if again else "")
    )
    repeated = [path for _, _, path in calls_after if path in set(replayed)]
    same = output == expected
    console.print(
        f"\n[bold]4.[/] the output {'[green]equals[/]' if same else '[red]differs from[/]'} "
        "an uncrashed run's, and "
        + (
            "[green]no committed step ran twice[/]"
            if not repeated
            else f"[red]{len(repeated)} committed steps ran again[/]"
        )
    )
    console.print_json(data=output)
    return same and not repeated
