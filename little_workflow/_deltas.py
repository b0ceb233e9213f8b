"""Streamed model answers, from the call that streams them to whoever watches the run.

A model call of an agent step streams only when someone in this process watches its
run (``Runtime.deltas``): then each piece of the answer is published here as a
``RunDelta``, and the call still commits only its completed message, exactly as an
unwatched call does. Nothing here is journaled: a watcher that joins late, or a
process that dies, loses the deltas and never the answer.

The route to the hub travels in a context variable set by each run's walk
(``DurableRun``), so the one place that calls a model (``GraphRun.call_model``) needs
no new parameter, and a sub-run's walk, started from its parent's, knows its lineage:
a watcher of a run sees its sub-runs' deltas too.

Publishing never waits: each watcher has a bounded buffer, and a delta that finds it
full is dropped and counted (``DeltaStream.dropped``), so a slow watcher can neither
slow a run nor grow its memory.

Watchers in other processes (the web UI) are reached through a ``DeltaRelay``
(``_live.LiveRelay``, on the data directory), asked once per model call, at ``sink()``,
whether anyone watches the run from outside: never per durable step.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, Self

if TYPE_CHECKING:
    from little_workflow.harness.models import ModelDelta

__all__ = [
    "DELTA_ROUTE",
    "DeltaHub",
    "DeltaOutlet",
    "DeltaRelay",
    "DeltaRoute",
    "DeltaStream",
    "RunDelta",
    "RunSink",
]

#: How many deltas a watcher may fall behind before new ones are dropped.
DEFAULT_BUFFER = 10_000


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDelta:
    """A piece of a model answer as it streams in, and which call it belongs to.

    ``attempt`` counts this process's streams of the call at ``path`` from 1: a higher
    one means the call was made again (a retry after a cut stream), so a watcher
    showing the answer starts it over. ``lineage`` is the run ids from the root run down
    to ``run_id``.
    """

    run_id: str
    lineage: tuple[str, ...]
    path: str
    slot: str
    attempt: int
    delta: ModelDelta


class DeltaOutlet(Protocol):
    """One stream of one model call, to watchers in other processes."""

    def send(self, delta: RunDelta) -> None:
        """Pass ``delta`` on, or drop it; never waits, never raises."""
        ...

    def end(self) -> None:
        """The stream ended: send anything still held back."""
        ...


class DeltaRelay(Protocol):
    """Watchers of runs in other processes (``_live.LiveRelay``)."""

    def outlet(self, lineage: tuple[str, ...]) -> DeltaOutlet | None:
        """Where a new stream of a call of ``lineage``'s run goes; ``None``: nobody watches."""
        ...

    def close(self) -> None:
        """Release what the relay holds (its socket)."""
        ...


class _End:
    """Put in a watcher's buffer when its run's pass in this process is over."""


_END = _End()


class DeltaStream:
    """The deltas of one run (and its sub-runs), or of every run when ``run_id`` is None.

    An async iterator, subscribed from the moment it is made (make it before starting
    the run, to miss nothing). For one run it ends when the run's pass in this process
    ends (completed, failed, cancelled, waiting or interrupted); ``close()`` (or leaving
    ``async with``) ends it at any time.
    """

    def __init__(self, hub: DeltaHub, run_id: str | None, buffer: int) -> None:
        if buffer < 1:
            raise ValueError(f"buffer must be at least 1, not {buffer!r}")
        self.run_id = run_id
        #: Deltas dropped because this watcher's buffer was full.
        self.dropped = 0
        self._hub = hub
        self._buffer = buffer
        self._queue: asyncio.Queue[RunDelta | _End] = asyncio.Queue()
        self._closed = False

    def _offer(self, item: RunDelta | _End) -> None:
        if self._closed:
            return
        if isinstance(item, _End):
            self._closed = True
            self._hub._streams.discard(self)
            self._queue.put_nowait(item)  # unbounded: the end is never dropped
        elif self._queue.qsize() >= self._buffer:
            self.dropped += 1
        else:
            self._queue.put_nowait(item)

    def close(self) -> None:
        """Stop watching; iteration ends after what is buffered."""
        self._offer(_END)

    def pending(self) -> list[RunDelta]:
        """What is buffered now, taken without waiting (for a display that polls)."""
        items: list[RunDelta] = []
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if not isinstance(item, _End):  # a closed, empty stream stops iterating anyway
                items.append(item)
        return items

    def __aiter__(self) -> AsyncIterator[RunDelta]:
        return self

    async def __anext__(self) -> RunDelta:
        if self._queue.empty() and self._closed:
            raise StopAsyncIteration
        item = await self._queue.get()
        if isinstance(item, _End):
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class DeltaHub:
    """The runtime's watchers, and the publishing side the model calls use."""

    def __init__(self, relay: DeltaRelay | None = None) -> None:
        self._streams: set[DeltaStream] = set()
        self._attempts: dict[tuple[str, str], int] = {}
        #: Watchers in other processes, if any can be reached.
        self.relay = relay

    def close(self) -> None:
        """Release the relay's resources (the runtime closes)."""
        if self.relay is not None:
            self.relay.close()

    def subscribe(self, run_id: str | None = None, *, buffer: int = DEFAULT_BUFFER) -> DeltaStream:
        """A new watcher of ``run_id`` (every run if ``None``)."""
        stream = DeltaStream(self, run_id, buffer)
        self._streams.add(stream)
        return stream

    def watched(self, lineage: tuple[str, ...]) -> bool:
        """Whether a call of the run at the end of ``lineage`` has anyone to stream to."""
        return any(stream.run_id is None or stream.run_id in lineage for stream in self._streams)

    def next_attempt(self, run_id: str, path: str) -> int:
        """The attempt number of a new stream of the call at ``path``."""
        key = (run_id, path)
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        return attempt

    def publish(self, delta: RunDelta) -> None:
        """Hand ``delta`` to every watcher of its run (never waits, never raises)."""
        for stream in tuple(self._streams):
            if stream.run_id is None or stream.run_id in delta.lineage:
                stream._offer(delta)

    def ended(self, run_id: str) -> None:
        """``run_id``'s pass in this process is over: end the streams watching it alone."""
        for key in [key for key in self._attempts if key[0] == run_id]:
            del self._attempts[key]
        for stream in tuple(self._streams):
            if stream.run_id == run_id:
                stream._offer(_END)


@dataclass(frozen=True, slots=True)
class DeltaRoute:
    """Where the model calls of the current run publish: the hub and the run's lineage."""

    hub: DeltaHub
    lineage: tuple[str, ...]

    @property
    def run_id(self) -> str:
        return self.lineage[-1]

    def child(self, run_id: str) -> DeltaRoute:
        """The route of a run started inside this one."""
        return DeltaRoute(self.hub, (*self.lineage, run_id))

    def sink(self, path: str, slot: str) -> RunSink | None:
        """What one stream of the model call at ``path`` hands its deltas to; ``None``
        when nobody watches (the call is then made whole, as if nobody ever could)."""
        relay = self.hub.relay
        outlet = None if relay is None else relay.outlet(self.lineage)
        if outlet is None and not self.hub.watched(self.lineage):
            return None
        attempt = self.hub.next_attempt(self.run_id, path)
        return RunSink(self, path, slot, attempt, outlet)


class RunSink:
    """The deltas of one stream of one call, to this process's watchers and the relay's.

    ``end()`` (the stream is over, before its answer commits) sends what the relay holds.
    """

    def __init__(
        self, route: DeltaRoute, path: str, slot: str, attempt: int, outlet: DeltaOutlet | None
    ) -> None:
        self.route = route
        self.path = path
        self.slot = slot
        self.attempt = attempt
        self.outlet = outlet

    async def __call__(self, delta: ModelDelta) -> None:
        item = RunDelta(
            run_id=self.route.run_id,
            lineage=self.route.lineage,
            path=self.path,
            slot=self.slot,
            attempt=self.attempt,
            delta=delta,
        )
        self.route.hub.publish(item)
        if self.outlet is not None:
            self.outlet.send(item)

    def end(self) -> None:
        if self.outlet is not None:
            self.outlet.end()


#: The current run's route; ``None`` outside a run (a harness used on its own).
DELTA_ROUTE: contextvars.ContextVar[DeltaRoute | None] = contextvars.ContextVar(
    "little_workflow_delta_route", default=None
)
