"""``little-workflow demo``: start a run in a child process, SIGKILL it, resume it.

The demo is the seed's "Alpha Demo": a multi-step workflow (a step, a map of reviewer
agents over four candidates, each a harness session making a model call, a tool call and
a model call on the scripted provider, a ranking step, a judge in a decision loop) runs
in a real child process, which is killed with SIGKILL inside a reviewer session, once
some of its model and tool calls are committed. A second process resumes the run from
``.little-workflow/``. The log says what was committed before the kill (replayed by the
resume); the step functions, the model and the tool log every call to a file outside
both processes, so the demo can say exactly what was called anew, and check the output
against an uncrashed run computed first.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from little_workflow.cli._main import EXIT_RUN_FAILED, Options, execute

_INPUT = {"role": "compilers and math"}
_SETUP = "little_workflow.demo:setup"
_MAP = "review-candidates"


def _calls(folder: Path) -> list[tuple[str, str]]:
    """The ``(kind, key)`` of every call the demo's functions, model and tool logged."""
    log = folder / "calls.log"
    if not log.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in log.read_text().splitlines()]  # type: ignore[misc]


async def _reference_output() -> Any:
    """The uncrashed run's output, computed in memory at full speed."""
    from little_workflow.demo import WORKFLOW, setup
    from little_workflow.runtime import Runtime

    speed = os.environ.get("LITTLE_WORKFLOW_DEMO_SPEED")
    folder = os.environ.pop("LITTLE_WORKFLOW_DEMO_DIR", None)
    os.environ["LITTLE_WORKFLOW_DEMO_SPEED"] = "0"
    try:
        with tempfile.TemporaryDirectory() as scratch:
            options = setup().runtime_options()
            async with Runtime(scratch, store="memory:", **options) as runtime:
                return (await runtime.run(WORKFLOW, _INPUT)).output
    finally:
        if speed is None:
            os.environ.pop("LITTLE_WORKFLOW_DEMO_SPEED", None)
        else:
            os.environ["LITTLE_WORKFLOW_DEMO_SPEED"] = speed
        if folder is not None:
            os.environ["LITTLE_WORKFLOW_DEMO_DIR"] = folder


@dataclass
class _Committed:
    """What a stretch of the run's log committed: steps, and model and tool calls."""

    steps: list[str] = field(default_factory=list)
    #: Committed model responses and tool results, per session (an agent step's path).
    model: Counter[str] = field(default_factory=Counter)
    tool: Counter[str] = field(default_factory=Counter)

    def add(self, event: Any) -> str | None:
        """Count ``event``; the step path it completed, if it is a ``StepCompleted``."""
        from little_workflow.events import (
            HarnessModelResponded,
            HarnessToolCallSucceeded,
            StepCompleted,
        )

        if isinstance(event, StepCompleted):
            self.steps.append(event.step_path)
            return event.step_path
        if isinstance(event, HarnessModelResponded):
            self.model[event.session_id] += 1
        elif isinstance(event, HarnessToolCallSucceeded):
            self.tool[event.session_id] += 1
        return None

    def open_sessions(self) -> list[str]:
        """Sessions with committed calls whose step is not committed: killed in one."""
        done = set(self.steps)
        return sorted(path for path in {*self.model, *self.tool} if path not in done)


class _Watcher:
    """Reads the run's log from the store, through one open event log."""

    def __init__(self, store: str, run_id: str) -> None:
        self.store = store
        self.run_id = run_id

    async def split(self) -> tuple[_Committed, _Committed]:
        """The log before the (first) resume, and after it."""
        from little_workflow.events import RunResumed
        from little_workflow.storage import open_event_log

        log = await open_event_log(self.store)
        try:
            records = await log.read(self.run_id)
        finally:
            await log.close()
        before, after = _Committed(), _Committed()
        part = before
        for record in records:
            if isinstance(record.event, RunResumed):
                part = after
            part.add(record.event)
        return before, after

    async def watch(self, process: subprocess.Popen[str], steps: int, show: Any) -> _Committed:
        """Report committed steps until ``steps`` of them are committed and a reviewer
        session is under way with a committed call (or the process ends)."""
        import asyncio

        from little_workflow.storage import open_event_log

        log = await open_event_log(self.store)
        seen = _Committed()
        after = 0
        try:
            while process.poll() is None:
                for record in await log.read(self.run_id, after=after):
                    after = record.seq
                    path = seen.add(record.event)
                    if path is not None:
                        show(path)
                if len(seen.steps) >= steps and seen.open_sessions():
                    break
                await asyncio.sleep(0.02)
        finally:
            await log.close()
        return seen


def _show_kill(console: Any, pid: int, seconds: float, before: _Committed) -> None:
    from rich.markup import escape

    open_sessions = before.open_sessions()
    console.print(
        f"   [bold red]✗ SIGKILL[/] to process {pid} after {seconds:.1f} s: "
        f"{_plural(len(before.steps), 'step')} committed, "
        f"{_plural(len(open_sessions), 'session')} cut off"
    )
    for path in open_sessions:
        console.print(
            f"     {escape(path)}{' ' * max(1, 35 - len(path))}"
            f"{_plural(before.model[path], 'model call')}, "
            f"{_plural(before.tool[path], 'tool call')} committed"
        )
    console.print()


def _plural(count: int, what: str) -> str:
    return f"{count} {what}{'' if count == 1 else 's'}"


def _child(options: Options, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "little_workflow", "--data-dir", str(options.data_dir)]
    if options.store:
        command += ["--store", options.store]
    return subprocess.Popen(
        [*command, "--setup", _SETUP, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@click.command()
@click.option(
    "--kill-after",
    type=click.IntRange(min=1, max=3),
    default=3,
    show_default=True,
    help="Kill the first process once this many steps have completed and a reviewer "
    "session in flight has committed a model or tool call.",
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
    from rich.markup import escape

    from little_workflow.cli._tables import stdout_console
    from little_workflow.demo import WORKFLOW
    from little_workflow.ids import new_id
    from little_workflow.runtime import DataDir
    from little_workflow.storage._dirs import make_private_dirs

    console = stdout_console()
    data_dir = DataDir.at(options.data_dir).create()
    run_id = new_id("demo")
    watcher = _Watcher(options.store or data_dir.store_url, run_id)
    folder = data_dir.run_dir(run_id) / "demo"
    make_private_dirs(folder)
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
    console.print(
        f"  workflow  {WORKFLOW.name}: a step, 4 reviewer agents in a map (2 at a\n"
        "            time; each a model call, a tool call, a model call), a\n"
        "            ranking step, a judge that asks for one revision\n"
        f"  data      {data_dir.root}\n"
        f"  run id    {run_id}\n"
    )

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
    killed_at = time.monotonic()
    calls_before = _calls(folder)
    # What the log holds is what was committed before the kill: a commit may have landed
    # between the watcher's last look and the signal.
    before, _ = execute(options, watcher.split)
    for path in before.steps[len(seen.steps) :]:
        committed(path)
    _show_kill(console, first.pid, killed_at - started, before)
    console.print("[bold]2.[/] a new process resumes the run from the log")
    second = _child(options, env, "resume", run_id)
    out, err = second.communicate()
    resumed_in = time.monotonic() - killed_at
    if second.returncode != 0:
        console.print(f"[red]resume failed ({second.returncode}):[/] {escape(err.strip())}")
        sys.exit(EXIT_RUN_FAILED)
    output = json.loads(out)
    before, after = execute(options, watcher.split)
    for path in after.steps:
        committed(path)
    ok = _report(
        console,
        output=output,
        expected=expected,
        before=before,
        after=after,
        calls_before=calls_before,
        calls=_calls(folder),
        speed=speed,
        seconds=resumed_in,
    )
    _closing(console, options, run_id)
    if not ok:
        sys.exit(EXIT_RUN_FAILED)


def _closing(console: Any, options: Options, run_id: str) -> None:
    """The commands to look further, as they can be typed here, and the worker's job."""
    from rich.markup import escape

    me = _as_typed(options)
    console.print(
        f"\nLook inside: [bold]{escape(me)} show {run_id}[/] (its steps), "
        f"[bold]{escape(me)} events {run_id}[/] (its log), "
        f"[bold]{escape(me)} ui[/] (in a browser)"
    )
    if _in_a_venv(me):
        console.print(
            "(little-workflow is not on your PATH: it is in the venv. "
            f"[bold]source {escape(str(_program(me).parent))}/activate[/] puts it there; "
            "then plain [bold]little-workflow[/] works.)"
        )
    console.print(
        "The demo resumed the run itself. In production, leave "
        f"[bold]{escape(me)} worker[/] running (on this same SQLite file, no server): "
        "it resumes runs whose process died, drives submitted runs and starts scheduled "
        "ones (docs/workers.md)."
    )


def _as_typed(options: Options) -> str:
    """This program as the user can type it again in this shell, with the data
    directory and store the demo used (when they are not the defaults).

    ``little-workflow`` when that name on the PATH is this program; else the path it was
    started by (``.venv/bin/little-workflow`` after the README's install, whose venv is
    not activated), or ``PYTHON -m little_workflow``.
    """
    import shlex
    import shutil

    started = Path(sys.argv[0])
    if started.name == "little-workflow":
        found = shutil.which("little-workflow")
        if found is not None and Path(found).resolve() == started.resolve():
            words = ["little-workflow"]
        else:
            words = [_shown_path(started)]
    else:
        python = Path(sys.executable)
        found = shutil.which(python.name)
        same = found is not None and Path(found).resolve() == python.resolve()
        words = [python.name if same else _shown_path(python), "-m", "little_workflow"]
    if options.data_dir != Path(".little-workflow"):
        words += ["--data-dir", str(options.data_dir)]
    if options.store is not None:
        words += ["--store", options.store]
    return shlex.join(words)


def _shown_path(path: Path) -> str:
    """``path`` relative to the current directory when it is below it (``./x``, not ``x``:
    a bare name would be looked up on the PATH)."""
    try:
        relative = path.absolute().relative_to(Path.cwd())
    except ValueError:
        return str(path.absolute())
    return str(relative) if len(relative.parts) > 1 else f"./{relative}"


def _program(command: str) -> Path:
    import shlex

    return Path(shlex.split(command)[0])


def _in_a_venv(command: str) -> bool:
    first = _program(command)
    return len(first.parts) > 1 and (first.parent / "activate").exists()


def _report(
    console: Any,
    *,
    output: Any,
    expected: Any,
    before: _Committed,
    after: _Committed,
    calls_before: list[tuple[str, str]],
    calls: list[tuple[str, str]],
    speed: float,
    seconds: float,
) -> bool:
    """Print what the resume replayed and called; whether the demo held its promises."""
    from little_workflow.demo import SECONDS

    calls_after = calls[len(calls_before) :]
    made = Counter(kind for kind, _ in calls_after)
    # A call logged before the kill whose response or result was not committed was in
    # flight: the resume makes it again. More calls made again than were in flight
    # would mean a committed one was paid for twice.
    called = Counter(kind for kind, _ in calls_before)
    replayed = {"model": before.model.total(), "tool": before.tool.total()}
    earlier = set(calls_before)
    again = Counter(kind for kind, key in calls_after if (kind, key) in earlier)
    in_flight = {kind: called[kind] - replayed[kind] for kind in ("model", "tool")}
    paid_twice = sum(max(0, again[kind] - in_flight[kind]) for kind in ("model", "tool"))
    steps_again = [key for kind, key in calls_after if kind == "step" and key in before.steps]
    plain = [path for path in before.steps if not path.startswith(_MAP)]
    saved = speed * (
        SECONDS["model"] * replayed["model"]
        + SECONDS["tool"] * replayed["tool"]
        + SECONDS["step"] * len(plain)
    )

    def row(what: str, old: int, new: int, kind: str | None = None) -> str:
        line = f"\n   {what:<12}{old:>9}{new:>11}"
        if kind is not None:
            line += f"   ({again[kind]} of them in flight at the kill)"
        return line

    console.print(
        f"\n[bold]3.[/] the resume took {seconds:.1f} s; "
        f"≈{saved:.1f} s of calls were not paid for twice\n"
        f"   {'':<12}{'replayed':>9}{'run anew':>11}"
        + row("steps", len(before.steps), len(after.steps))
        + row("model calls", replayed["model"], made["model"], "model")
        + row("tool calls", replayed["tool"], made["tool"], "tool")
        + "\n   replayed: committed before the kill, read back from the log, not called again"
    )
    same = output == expected
    repeated = len(steps_again) + paid_twice
    console.print(
        f"\n[bold]4.[/] the output {'[green]equals[/]' if same else '[red]differs from[/]'} "
        "an uncrashed run's; "
        + (
            "[green]nothing committed ran twice[/]"
            if not repeated
            else f"[red]{repeated} committed steps or calls ran again[/]"
        )
    )
    console.print_json(data=output)
    return same and not repeated
