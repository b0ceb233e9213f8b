"""Calling user code without blocking the event loop: ``call_user`` and ``SyncThreads``.

Every callable a user hands the library (a step or decision function, a tool, a
``supervise`` or ``reconcile`` hook, a harness code step) is called through
``call_user``. A coroutine function is called on the loop and awaited, as before, and
pays one dictionary lookup more. Any other callable runs in a worker thread of a
bounded pool, so that while it blocks the loop goes on renewing leases, noticing
cancellations and running the other branches of a ``map``. A sync function that
returns an awaitable has it awaited on the loop.

The pool is the one bound to the current context (``SyncThreads.bound``: a ``Runtime``
binds its own for each run it drives), else a process-wide default of
``DEFAULT_SYNC_THREADS`` threads. When every thread is busy, further calls wait their
turn. The thread runs the callable in a copy of the caller's ``contextvars`` context,
as ``asyncio.to_thread`` does.

A thread cannot be stopped from outside. When the awaiting task is cancelled, the
cancellation reaches it at once; the thread runs on until the callable returns, and
what it returns or raises is dropped (nothing waits for it any more). The threads are
daemon threads: a process that exits while one is still blocked does not wait for it
(``concurrent.futures`` and the loop's default executor join theirs at exit, which
would hang a CLI that was told to cancel such a run).

Whatever the callable raises, ``BaseException`` included, is raised again in the
awaiting coroutine as it was raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import itertools
import queue
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DEFAULT_SYNC_THREADS", "SyncThreads", "call_user", "is_async_callable"]

#: Threads of the default pool (and of a ``Runtime`` given no ``sync_threads``): enough
#: for a ``map`` of blocking SDK calls at a few dozen at once, each thread idle when not
#: in use.
DEFAULT_SYNC_THREADS = 32


class _Call:
    """One queued call: the function, its context, and where its outcome goes."""

    __slots__ = ("args", "context", "function", "future", "kwargs", "loop")

    def __init__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[tuple[bool, Any]],
    ) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.loop = loop
        self.future = future
        self.context = contextvars.copy_context()


def _settle(future: asyncio.Future[tuple[bool, Any]], outcome: tuple[bool, Any]) -> None:
    # On the loop: a cancelled waiter has gone; its outcome is dropped.
    if not future.done():
        future.set_result(outcome)


class SyncThreads:
    """A bounded pool of daemon threads for sync user code (see the module docstring).

    Threads start on demand, up to ``size``, and stay for later calls; ``close`` lets
    the idle ones end (a busy one ends when its call returns).
    """

    def __init__(self, size: int = DEFAULT_SYNC_THREADS, *, name: str = "lw-sync") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"sync_threads must be a positive integer, not {size!r}")
        self.size = size
        self._name = name
        self._numbers = itertools.count(1)
        # The hand-over is a C queue and a C lock: ``threading.Condition`` is Python and
        # cost a sync step about 100k instructions more (``python -m bench.instructions``).
        self._lock = threading.Lock()
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._threads = 0
        #: Threads waiting in ``get`` for a call no ``_submit`` has promised them yet.
        self._idle = 0
        self._closed = False

    async def call(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in one of the pool's threads; its result or error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
        self._submit(_Call(function, args, kwargs, loop, future))
        ok, value = await future
        if ok:
            return value
        try:
            raise value
        finally:
            del value  # no cycle through this frame's traceback

    def _submit(self, call: _Call) -> None:
        with self._lock:
            self._calls.put(call)
            if self._idle:
                self._idle -= 1  # a waiting thread takes it
                return
            if self._threads >= self.size:
                return  # every thread is busy: the call waits its turn
            # A closed pool still serves a late call (a run its runtime was closed
            # under): a thread starts for it and ends after it.
            self._threads += 1
        name = f"{self._name}-{next(self._numbers)}"
        threading.Thread(target=self._work, name=name, daemon=True).start()

    def _work(self) -> None:
        while True:
            # Under the lock, so that a thread that finds no call is counted idle before
            # the next ``_submit`` looks: each idle thread is promised one call.
            with self._lock:
                try:
                    call: _Call | None = self._calls.get_nowait()
                except queue.Empty:
                    if self._closed:
                        self._threads -= 1
                        return
                    self._idle += 1
                    waiting = True
                else:
                    # A ``None`` here is a wake-up ``close`` queued for an idle thread,
                    # taken by this one first: it ends in its place (the idle one then
                    # gets what follows, or the next ``None``).
                    if call is None:
                        self._threads -= 1
                        return
                    waiting = False
            if waiting:
                call = self._calls.get()
                if call is None:  # ``close`` wakes idle threads with ``None``
                    with self._lock:
                        self._threads -= 1
                    return
            assert call is not None
            self._run(call)
            del call

    @staticmethod
    def _run(call: _Call) -> None:
        if call.future.cancelled():
            return  # its waiter was cancelled before the call started: skip it
        outcome: tuple[bool, Any]
        try:
            outcome = (True, call.context.run(call.function, *call.args, **call.kwargs))
        except BaseException as exc:  # user code: handed to the waiter as is
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            call.loop.call_soon_threadsafe(_settle, call.future, outcome)
        del outcome

    def close(self) -> None:
        """Let the threads end once no call is queued (idle ones at once)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for _ in range(self._idle):
                self._calls.put(None)
            self._idle = 0

    @contextlib.contextmanager
    def bound(self) -> Iterator[SyncThreads]:
        """Make this pool the one ``call_user`` uses in the current context, for the block."""
        token = _bound.set(self)
        try:
            yield self
        finally:
            _bound.reset(token)


_bound: contextvars.ContextVar[SyncThreads | None] = contextvars.ContextVar(
    "little_workflow_sync_threads", default=None
)


@functools.cache
def _default_pool() -> SyncThreads:
    return SyncThreads(name="lw-sync-default")


def _pool() -> SyncThreads:
    pool = _bound.get()
    return _default_pool() if pool is None else pool


#: ``id(target)`` -> ``(target, is async)``: asked on every call, and ``inspect`` walks
#: wrappers and partials each time. The target is kept so that its id cannot be reused
#: by another object while the entry lives (as ``durable._side_effects`` does).
_ASYNC: dict[int, tuple[object, bool]] = {}


def is_async_callable(target: Callable[..., Any]) -> bool:
    """Whether calling ``target`` gives a coroutine to await (function, method or object)."""
    # A bound method is a new object at each attribute access: key on its function. (Not
    # ``getattr(target, "__func__", ...)``: a missing attribute costs an exception.)
    key: object = target.__func__ if type(target) is types.MethodType else target
    cached = _ASYNC.get(id(key))
    if cached is not None and cached[0] is key:
        return cached[1]
    # A callable object keeps its coroutine-ness on its class.
    found = inspect.iscoroutinefunction(target) or (
        callable(target) and inspect.iscoroutinefunction(type(target).__call__)
    )
    if len(_ASYNC) < 10_000:
        _ASYNC[id(key)] = (key, found)
    return found


async def call_user(function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call user code without blocking the loop; its result, awaited if it is awaitable.

    An async callable is called and awaited here; a sync one runs in a thread of the
    bound pool (see the module docstring). Exceptions come back as raised.
    """
    if is_async_callable(function):
        return await function(*args, **kwargs)
    result = await _pool().call(function, *args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result
