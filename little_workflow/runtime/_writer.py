"""``RunWriter``: how one run's events reach its log, and its state.

Two kinds of append, and why they differ:

* **Durable** (``sync=True``): a step's completion, a sub-run's id, the run's end. The
  events are committed, fsynced, and only then does the caller go on; nothing
  downstream ever sees a value a crash could take back.
* **Write-behind** (``sync=False``): ``StepAttemptStarted``, ``StepAttemptFailed`` and
  the like, which say what is under way. They are folded into the state at once, held
  in memory, and committed with the next durable append (one transaction, one fsync),
  or by a timer ``flush_delay`` seconds later if none comes (so a long step shows as
  running to anyone reading the log). A crash that loses them loses nothing a resume
  needs: the step they describe had not completed, and it runs again either way. The
  timer is armed by the first event held after it last fired and is not cancelled by a
  commit: it may fire with nothing held (and do nothing) or flush a later event early,
  never late, and a step pays no timer of its own.

A step therefore costs one commit, not two: the cost of its durability and little more.

**Group commit.** While map branches run side by side (``branches`` > 1), durable appends
queue and one leader task commits everything queued in one transaction, with one fsync;
each caller returns once the commit holding its events has returned, so the rule above
holds per caller. A SQLite commit of one run alone runs in the loop thread without
yielding (see ``storage/_sqlite_db.py``), so nothing can join a commit "in flight": the
batch forms instead from the branches that reach their completion in the same turn of the
loop (the leader is a task, so it first runs after all of them), and on an async backend
(Postgres) also from those that arrive while a commit awaits the server. Across runs the
grouping is the store's: on SQLite, appends of different runs ready at once share one
transaction and one fsync ("Grouped" in ``storage/_sqlite_db.py``); on Postgres the
server's own WAL flush already serves concurrent commits together. If a grouped
commit fails, each request is committed alone, so an error (a payload over the limit)
reaches its own caller only. A caller cancelled before its batch is taken writes
nothing; one cancelled after may still commit, and its events are folded as any other.
Rejected: grouping every durable append (one walk alone gains nothing and would pay a
task per step), and waiting a fixed time for more requests (it adds latency to every
commit and still misses the branches that take longer).

Rejected: committing the attempt without fsync (``synchronous=NORMAL``) before the step
runs. It is durable against a process kill, but a second commit per step still costs
about 35 µs plus a ``PRAGMA`` switch, a third of a step's whole budget, to record
something a resume does not need.

The state is always the fold of the committed events plus the held ones, in order:
held events get the sequence numbers the log will give them, because every append
passes ``expected_seq`` and the log numbers gap-free. ``expected_seq`` also makes a
second writer on the run (a broken lock) an error rather than an interleaving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from little_workflow._secrets import FAMILY_SECRETS, Secrets
from little_workflow.events import Event
from little_workflow.runtime._faults import CrashAfterEvents
from little_workflow.runtime._state import RunState, apply_event
from little_workflow.storage import EventLog

__all__ = ["DEFAULT_FLUSH_DELAY", "RunWriter"]

logger = logging.getLogger("little_workflow.runtime")

#: Seconds a write-behind event may wait for a durable append before it is flushed alone.
DEFAULT_FLUSH_DELAY = 0.05


class RunWriter:
    """Appends one run's events (see the module docstring) and folds them into its state."""

    def __init__(
        self,
        log: EventLog,
        state: RunState,
        *,
        crash: CrashAfterEvents | None = None,
        flush_delay: float = DEFAULT_FLUSH_DELAY,
    ) -> None:
        self.log = log
        self.state = state
        self.run_id = state.run_id
        self.crash = crash
        self.flush_delay = flush_delay
        #: The last sequence number known to be committed.
        self.committed_seq = state.last_seq
        self._held: list[Event] = []
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: asyncio.Task[None] | None = None
        #: Map branches of this run running now; durable appends are grouped while > 1.
        self.branches = 0
        #: Durable appends waiting for the leader (see "Group commit" above).
        self._queue: list[tuple[Sequence[Event], asyncio.Future[None]]] = []
        self._leader: asyncio.Task[None] | None = None
        #: Redacted values this run's tools gave up: scrubbed from every event appended
        #: (``little_workflow._secrets``), whichever event carries them.
        family = FAMILY_SECRETS.get()
        self.secrets = Secrets() if family is None else family

    def _fold(self, events: Sequence[Event], first_seq: int) -> None:
        now = time.time()
        state = self.state
        for offset, event in enumerate(events):
            apply_event(state, event, first_seq + offset, now)

    async def append(self, events: Sequence[Event], *, sync: bool) -> None:
        """Append ``events``: durably now (``sync=True``), or write-behind."""
        if self.secrets.active:
            # Before the fold too: the state is what a resume rebuilds from the log.
            events = self.secrets.scrub_events(events)
        if sync:
            if self.branches > 1 or self._leader is not None:
                await self._grouped(events)
            else:
                await self._commit(events, sync=True)
        elif self._lock.locked():
            # A commit is under way (waiting for another process): hold these after its
            # events, which it folds when it returns.
            async with self._lock:
                self._hold(events)
        else:
            self._hold(events)

    def _hold(self, events: Sequence[Event]) -> None:
        self._fold(events, self.state.last_seq + 1)
        self._held.extend(events)
        if self._timer is None and self._flushing is None:
            self._timer = asyncio.get_running_loop().call_later(self.flush_delay, self._flush_soon)

    def _flush_soon(self) -> None:
        # The timer is not cancelled when a commit takes the held events (see
        # ``_commit``): arming and cancelling one per step cost more than the rare
        # firing with nothing to do. Armed by the first event held since it last fired,
        # it fires at most ``flush_delay`` after any event still held.
        self._timer = None
        if not self._held:
            return
        task = asyncio.get_running_loop().create_task(self._commit((), sync=False))
        self._flushing = task
        task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushing = None
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            # The held events are kept and go out with the next durable append, which
            # reports the error to its caller if it persists.
            logger.warning("run %r: flushing held events failed: %s", self.run_id, error)
        elif self._held and self._timer is None:
            # Held while this flush was under way, after it took its batch.
            self._timer = asyncio.get_running_loop().call_later(self.flush_delay, self._flush_soon)

    async def _commit(self, events: Sequence[Event], *, sync: bool) -> None:
        async with self._lock:
            held, self._held = self._held, []
            batch = [*held, *events]
            if not batch:
                return
            expected = self.committed_seq
            try:
                seqs = await self.log.append(self.run_id, batch, sync=sync, expected_seq=expected)
            except asyncio.CancelledError:
                # Only a write that waited for another process's lock can be cancelled,
                # and it may still commit: learn from the log which, before going on.
                await asyncio.shield(self._settle(expected, held, events))
                raise
            except BaseException:
                self._held = held + self._held
                raise
            self.committed_seq = seqs[-1]
            if events:
                self._fold(events, seqs[len(held)])
            if self.crash is not None:
                self.crash.committed(len(batch))

    async def _grouped(self, events: Sequence[Event]) -> None:
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._queue.append((events, waiter))
        if self._leader is None:
            self._leader = loop.create_task(self._lead(), name=f"commits of run {self.run_id}")
        await waiter

    async def _lead(self) -> None:
        """Commit what is queued, one batch per commit, until the queue is empty."""
        try:
            while self._queue:
                # A caller cancelled while queued gave up its request: nothing of it is written.
                requests = [request for request in self._queue if not request[1].done()]
                self._queue = []
                if not requests:
                    continue
                try:
                    if len(requests) == 1:
                        await self._commit(requests[0][0], sync=True)
                    else:
                        await self._commit(
                            [event for events, _ in requests for event in events], sync=True
                        )
                except asyncio.CancelledError:
                    for _, waiter in requests:
                        waiter.cancel()
                    raise
                except Exception as error:
                    if len(requests) == 1:
                        _resolve(requests[0][1], error)
                    else:
                        await self._one_by_one(requests)
                    continue
                for _, waiter in requests:
                    _resolve(waiter, None)
        finally:
            self._leader = None
            for _, waiter in self._queue:
                waiter.cancel()
            self._queue = []

    async def _one_by_one(
        self, requests: list[tuple[Sequence[Event], asyncio.Future[None]]]
    ) -> None:
        """After a grouped commit failed: commit each request alone, errors to their callers."""
        for index, (events, waiter) in enumerate(requests):
            try:
                await self._commit(events, sync=True)
            except asyncio.CancelledError:
                for _, rest in requests[index:]:
                    rest.cancel()
                raise
            except Exception as error:
                _resolve(waiter, error)
            else:
                _resolve(waiter, None)

    async def _settle(self, expected: int, held: list[Event], events: Sequence[Event]) -> None:
        # Reads wait for this process's pending writes, so this sees the batch if it landed.
        landed = await self.log.last_seq(self.run_id)
        if landed >= expected + len(held) + len(events):
            self.committed_seq = expected + len(held) + len(events)
            self._fold(events, expected + len(held) + 1)
        else:
            self._held = held + self._held

    async def drain(self) -> None:
        """Commit any held events now (without fsync); wait for a flush or a group commit."""
        if self._held:
            await self._commit((), sync=False)
        if self._flushing is not None:
            await asyncio.gather(self._flushing, return_exceptions=True)
        if self._leader is not None:
            await asyncio.gather(self._leader, return_exceptions=True)

    def discard(self) -> None:
        """Stop the flush timer (the execution is being abandoned)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def _resolve(waiter: asyncio.Future[None], error: Exception | None) -> None:
    """Hand a queued caller its outcome, unless it stopped waiting (was cancelled)."""
    if waiter.done():
        return
    if error is None:
        waiter.set_result(None)
    else:
        waiter.set_exception(error)
