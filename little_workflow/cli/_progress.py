"""The progress display of ``run`` and ``resume``: what the run does, as its log grows.

It reads the run's own log (the events this process commits, a few milliseconds after
it commits them), not a hook inside the runtime: what it shows is what a crash would
leave, and the runtime pays nothing for it when the display is off. On a terminal it is a
live status line (a spinner, the steps running, counts) under a line per finished step;
elsewhere, asked for with ``--progress``, just the lines, for logs. Given the run's
``Runtime.deltas``, it shows the model answers as they stream in too (``_answers``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from little_workflow.cli._answers import AnswerView
from little_workflow.events import (
    HarnessModelResponded,
    RecordedEvent,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    StepAttemptFailed,
    StepAttemptStarted,
    StepCompleted,
    StepFailed,
    SubRunStarted,
)

if TYPE_CHECKING:
    from little_workflow._deltas import DeltaStream
    from little_workflow.storage import EventLog

__all__ = ["ProgressView", "show_progress"]

#: Seconds between two reads of the log.
POLL = 0.1


class ProgressView:
    """Turns a run's events into lines and a status (kept apart from I/O for tests)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.started_at = time.monotonic()
        self.running: dict[str, float] = {}
        self.done = 0
        self.failures = 0
        #: The last sequence number shown.
        self.position = 0
        #: The streamed answers, when the display follows them.
        self.answers: AnswerView | None = None

    def feed(self, record: RecordedEvent) -> list[Text]:
        """Lines to print for ``record`` (updating the status)."""
        event = record.event
        # The commit times in the log, not when this display read them (it reads in
        # batches, a poll apart).
        now = record.ts
        line: Text | None = None
        match event:
            case RunStarted():
                line = Text.assemble(("▶ ", "cyan"), f"run {self.run_id} ({event.workflow_name})")
            case RunResumed():
                line = Text.assemble(
                    ("↻ ", "cyan"), f"run {self.run_id} resumed: {self.done} step(s) in the log"
                )
            case StepAttemptStarted():
                self.running[event.step_path] = now
            case StepCompleted():
                self.done += 1
                # A step that started in an earlier process has no duration here.
                started = self.running.pop(event.step_path, None)
                took = "" if started is None else f"{now - started:.1f}s"
                line = Text.assemble(
                    ("  ✓ ", "green"),
                    (event.step_path, "bold"),
                    f"  {event.kind}  ",
                    (took, "dim"),
                )
            case StepAttemptFailed():
                self.failures += 1
                self.running.pop(event.step_path, None)
                retry = "will retry" if event.will_retry else "gives up"
                line = Text.assemble(
                    ("  ! ", "yellow"),
                    (event.step_path, "bold"),
                    f"  attempt {event.attempt} failed ({event.error_code}, {retry}): ",
                    (_short(event.message), "yellow"),
                )
            case StepFailed():
                self.running.pop(event.step_path, None)
                line = Text.assemble(("  ✗ ", "red"), (event.step_path, "bold"), " failed")
            case SubRunStarted():
                line = Text.assemble(
                    ("  ↳ ", "cyan"),
                    (event.step_path, "bold"),
                    f"  sub-run {event.sub_run_id} ({event.workflow_name})",
                )
            case RunCompleted():
                line = Text.assemble(("■ ", "green"), f"completed in {self.elapsed():.1f}s")
            case RunFailed():
                line = Text.assemble(("■ ", "red"), f"failed: {_short(event.message)}")
            case RunCancelled():
                line = Text.assemble(("■ ", "yellow"), "cancelled")
            case HarnessModelResponded() if self.answers is not None:
                return self.answers.committed(self.run_id, event.call_id)
            case _:
                pass
        return [] if line is None else [line]

    def replayed(self, record: RecordedEvent) -> None:
        """Count an event that was in the log before this process started."""
        if isinstance(record.event, StepCompleted):
            self.done += 1

    def elapsed(self) -> float:
        return time.monotonic() - self.started_at

    def status(self) -> Text:
        running = list(self.running)
        shown = ", ".join(running[:3]) + (f" +{len(running) - 3}" if len(running) > 3 else "")
        status = Text.assemble(
            (f"{self.done} step(s) done", "bold"),
            f"  {self.elapsed():.1f}s",
            *((f"  running: {shown}",) if shown else ()),
            *((("  " + f"{self.failures} failed attempt(s)"), "yellow"),) if self.failures else (),
        )
        writing = None if self.answers is None else self.answers.status()
        return status if writing is None else Text.assemble(status, "\n", writing)


def _short(text: str, limit: int = 120) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


async def _catch_up(
    log: EventLog, view: ProgressView, console: Console, deltas: DeltaStream | None
) -> None:
    # The deltas first: a call's are all buffered before its answer is committed, so its
    # last line is printed before the commit that ends it.
    if deltas is not None and view.answers is not None:
        for item in deltas.pending():
            for line in view.answers.feed(item):
                console.print(line)
    for record in await log.read(view.run_id, after=view.position):
        view.position = record.seq
        for line in view.feed(record):
            console.print(line)


async def _follow(
    log: EventLog, view: ProgressView, console: Console, deltas: DeltaStream | None
) -> None:
    status = console.status(view.status(), spinner="dots") if console.is_terminal else None
    try:
        if status is not None:
            status.start()
        while True:
            await _catch_up(log, view, console, deltas)
            if status is not None:
                status.update(view.status())
            await asyncio.sleep(POLL)
    finally:
        if status is not None:
            status.stop()


@contextlib.asynccontextmanager
async def show_progress(
    log: EventLog,
    run_id: str,
    *,
    console: Console | None = None,
    deltas: DeltaStream | None = None,
) -> AsyncIterator[ProgressView]:
    """Show ``run_id``'s progress on stderr while the block runs.

    Call it before the run starts or resumes: what the log holds then is counted as
    done before, not shown. A live status on a terminal, plain lines otherwise; the
    events committed after the last look (the run's end) are shown when the block exits.
    With ``deltas`` (``Runtime.deltas(run_id)``, made before the run starts), the model
    answers are shown as they stream in.
    """
    if console is None:
        from little_workflow.cli._tables import stdout_console

        console = stdout_console(stderr=True)
    view = ProgressView(run_id)
    for record in await log.read(run_id):
        view.replayed(record)
        view.position = record.seq
    if deltas is not None:
        view.answers = AnswerView(run_id)
    task = asyncio.get_running_loop().create_task(_follow(log, view, console, deltas))
    try:
        yield view
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(Exception):
            await _catch_up(log, view, console, deltas)
        if deltas is not None and view.answers is not None:
            deltas.close()
            for line in view.answers.end():
                console.print(line)
