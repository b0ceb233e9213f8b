"""Model answers as they stream in, for the progress display of ``run`` and ``resume``.

Fed with ``Runtime.deltas`` of the run (its sub-runs' too), it prints each answer's text a
line at a time as the line completes, under the call's step path, and keeps the line
still being written for the live status. A call's last partial line is printed when the
log says its answer was committed (``harness.model.responded``), when the same call starts
a new attempt (the stream was cut and the call made again: what was shown is marked as
dropped), or when the display ends. Thinking is shown dimmed, a tool call by its name.
Nothing here is recorded: the log holds the committed answer, and ``show`` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.text import Text

if TYPE_CHECKING:
    from little_workflow._deltas import RunDelta

__all__ = ["AnswerView"]

#: Characters of the line being written that the status shows.
TAIL = 60


@dataclass(slots=True)
class _Call:
    label: str
    attempt: int
    kind: str = "text"
    pending: str = ""
    shown: bool = False


@dataclass(slots=True)
class AnswerView:
    """Turns deltas into lines (kept apart from I/O for tests)."""

    run_id: str
    calls: dict[tuple[str, str], _Call] = field(default_factory=dict)
    #: The call whose line the status shows: the one that streamed last.
    latest: tuple[str, str] | None = None

    def feed(self, item: RunDelta) -> list[Text]:
        """Lines to print for ``item``."""
        key = (item.run_id, item.path)
        lines: list[Text] = []
        call = self.calls.get(key)
        if call is not None and call.attempt != item.attempt:
            lines += self._flush(call)
            if call.shown:
                lines.append(_line(call.label, "(stream cut: asked again)", "yellow"))
            call = None
        if call is None:
            # A new call: the calls before it have most likely ended (a sub-run's commits
            # are not in the log this display reads), so their last lines are printed now.
            # Calls that stream side by side (map branches) may see a line broken in two.
            for other in self.calls.values():
                lines += self._flush(other)
            label = item.path if item.run_id == self.run_id else f"{item.run_id}/{item.path}"
            call = self.calls[key] = _Call(label=label, attempt=item.attempt)
        self.latest = key
        delta = item.delta
        if delta.kind == "tool_call":
            lines += self._flush(call)
            if delta.name:
                lines.append(_line(call.label, f"calls {delta.name}", "cyan"))
                call.shown = True
            return lines
        if delta.kind != call.kind:
            lines += self._flush(call)
            call.kind = delta.kind
        *done, call.pending = (call.pending + delta.text).split("\n")
        for text in done:
            lines.append(_line(call.label, text, "dim" if call.kind == "reasoning" else ""))
            call.shown = True
        return lines

    def committed(self, run_id: str, call_id: str) -> list[Text]:
        """Lines to print now that the log holds the answer of ``call_id``."""
        call = self.calls.pop((run_id, call_id), None)
        return [] if call is None else self._flush(call)

    def end(self) -> list[Text]:
        """What is left to print when the display stops."""
        lines = [line for call in self.calls.values() for line in self._flush(call)]
        self.calls.clear()
        return lines

    def status(self) -> Text | None:
        """The line being written, for the live status; ``None`` if nothing streams."""
        call = None if self.latest is None else self.calls.get(self.latest)
        if call is None or not call.pending:
            return None
        tail = call.pending[-TAIL:]
        return Text.assemble(("✎ ", "cyan"), (call.label, "bold"), ": ", ("…" + tail, "dim"))

    def _flush(self, call: _Call) -> list[Text]:
        if not call.pending:
            return []
        text, call.pending = call.pending, ""
        call.shown = True
        return [_line(call.label, text, "dim" if call.kind == "reasoning" else "")]


def _line(label: str, text: str, style: str) -> Text:
    return Text.assemble(("  │ ", "cyan"), (label, "bold"), ": ", (text, style))
