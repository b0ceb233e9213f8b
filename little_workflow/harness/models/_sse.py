"""Parse a Server-Sent Events stream, fed in arbitrary byte chunks, into events.

The WHATWG "event stream" interpretation rules, as the OpenAI and Anthropic streaming
APIs use them: lines end in ``\\n``, ``\\r\\n`` or ``\\r``; ``data:`` lines are joined
with ``\\n``; one space after the colon is dropped; a line starting with ``:`` is a
comment; a blank line dispatches the event, unless it had no ``data``; a UTF-8 byte
order mark at the very start is dropped.

Lines are split on bytes, before decoding: ``\\r`` and ``\\n`` never occur inside a UTF-8
multibyte sequence, so a character split across two chunks is whole again by the time
its line is decoded, and the byte offsets in error messages are exact. Invalid UTF-8 is
replaced with U+FFFD, as the spec says, rather than refused.

One event is bounded (``max_event_bytes``): a server that never sends a blank line must
not be able to grow the buffer without end.

At the end of the stream an event that was never finished by a blank line is dropped,
as the spec says; ``SseParser.finish`` reports it, so a caller can tell a stream that
was cut from one that ended where it should.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from little_workflow.errors import ModelProviderError

__all__ = ["DEFAULT_MAX_EVENT_BYTES", "SseEvent", "SseParser", "iter_sse"]

#: The default bound on one event's size: far above any delta a model sends, far below
#: what would hurt a process to buffer.
DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True, kw_only=True)
class SseEvent:
    """One dispatched event.

    ``id`` is the stream's last event id when this event was dispatched (the spec keeps
    it from one event to the next); ``None`` if the stream never set one, ``""`` if it
    reset it with an empty ``id:``.
    """

    data: str
    event: str = "message"
    id: str | None = None


class SseParser:
    """Feed it bytes with ``feed``; call ``finish`` once the stream has ended."""

    def __init__(
        self, *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES, provider: str = "sse"
    ) -> None:
        if max_event_bytes <= 0:
            raise ValueError(f"max_event_bytes must be positive, not {max_event_bytes!r}")
        self.max_event_bytes = max_event_bytes
        self.provider = provider
        #: The reconnection time a ``retry:`` field asked for, in milliseconds.
        self.retry: int | None = None
        #: How many events have been dispatched.
        self.events = 0
        #: How many bytes have been fed.
        self.offset = 0
        self._pending = bytearray()  # the current line, without its terminator yet
        self._started_bom = False  # whether the first bytes were checked for a BOM
        self._skip_lf = False  # the last line ended in a \r that may be half of \r\n
        self._data: list[str] = []
        self._type = ""
        self._last_id: str | None = None
        self._event_bytes = 0  # bytes of the field lines of the event being built
        self._event_start = 0  # the stream offset where that event's first field began
        self._in_event = False  # a field line has been seen since the last dispatch

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events that ``chunk`` completes, in order; ``ModelProviderError`` if too big."""
        start = self.offset
        self.offset += len(chunk)
        if not self._started_bom:
            # The BOM may itself arrive split across chunks: hold bytes until three are
            # seen or they stop looking like one.
            self._pending += chunk
            if len(self._pending) < len(_BOM) and _BOM.startswith(self._pending):
                return []
            self._started_bom = True
            head = bytes(self._pending)
            self._pending.clear()
            if head.startswith(_BOM):
                head = head[len(_BOM) :]
            start = self.offset - len(head)
            chunk = head
        return self._scan(chunk, start)

    def _scan(self, chunk: bytes, start: int) -> list[SseEvent]:
        out: list[SseEvent] = []
        position = 0
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                position = 1
        for match in _LINE_END.finditer(chunk, position):
            line_start = start + position - len(self._pending)
            self._pending += chunk[position : match.start()]
            line = bytes(self._pending)
            self._pending.clear()
            self._line(line, line_start, out)
            position = match.end()
            # A \r at the very end of a chunk may be the first half of a \r\n.
            if match.group() == b"\r" and position == len(chunk):
                self._skip_lf = True
        self._pending += chunk[position:]
        if self._pending:
            self._check_size(len(self._pending), self.offset - len(self._pending))
        return out

    def _check_size(self, more: int, where: int) -> None:
        if self._event_bytes + more <= self.max_event_bytes:
            return
        begin = self._event_start if self._in_event else where
        raise ModelProviderError(
            f"server-sent event {self.events + 1} of the stream, starting at byte {begin}, "
            f"is larger than {self.max_event_bytes} bytes without ending",
            provider=self.provider,
            retryable=False,
        )

    def _line(self, raw: bytes, line_start: int, out: list[SseEvent]) -> None:
        if not raw:
            self._dispatch(out)
            return
        if raw.startswith(b":"):
            return
        self._check_size(len(raw), line_start)
        if not self._in_event:
            self._in_event = True
            self._event_start = line_start
        self._event_bytes += len(raw)
        line = raw.decode("utf-8", errors="replace")
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        elif field == "event":
            self._type = value
        elif field == "id":
            # The spec ignores an id with a NUL in it (it could not be sent back in a
            # Last-Event-ID header).
            if "\0" not in value:
                self._last_id = value
        elif field == "retry" and value.isascii() and value.isdigit():
            self.retry = int(value)
        # Any other field name is ignored, as the spec says.

    def _dispatch(self, out: list[SseEvent]) -> None:
        if self._data:
            out.append(
                SseEvent(
                    data="\n".join(self._data), event=self._type or "message", id=self._last_id
                )
            )
            self.events += 1
        self._data = []
        self._type = ""
        self._event_bytes = 0
        self._in_event = False

    def finish(self) -> str | None:
        """End of stream: ``None`` if it ended between events, else what was left unfinished.

        The unfinished event is dropped (the spec's rule); the text says how much was
        left and where, for the caller's message about a cut stream.
        """
        left = len(self._pending)
        partial = self._in_event or left > 0
        where = self.offset - left
        begin = self._event_start if self._in_event else where
        self._pending.clear()
        self._data = []
        self._type = ""
        self._event_bytes = 0
        self._in_event = False
        self._skip_lf = False
        if not partial:
            return None
        return (
            f"the stream ended inside event {self.events + 1}, which began at byte {begin} "
            f"of {self.offset}, after {self.events} complete events"
        )


async def iter_sse(
    chunks: AsyncIterator[bytes],
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    provider: str = "sse",
    strict: bool = False,
) -> AsyncGenerator[SseEvent, None]:
    """The events of a byte stream, each as soon as its blank line arrives.

    With ``strict``, a stream that ends inside an event raises a retryable
    ``ModelProviderError`` instead of dropping the event quietly: for a model's answer
    that means the connection was cut.
    """
    parser = SseParser(max_event_bytes=max_event_bytes, provider=provider)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event
    left = parser.finish()
    if left is not None and strict:
        raise ModelProviderError(left, provider=provider, retryable=True)
