"""Subprocess adapters: where a spawned child runs, and how a restarted host finds it again.

``SubprocessAdapter`` is the plug-in point: ``spawn(spec)`` starts a child, ``list_live()``
and ``reattach(handle_id)`` find the children still running after the host restarted.
With a ``storage``, every spawn writes a **manifest entry** under ``subprocess:`` (the
handle id, the step id, the serialized input, the execution id, how to reach the child,
caller metadata) that a new host reads back. Without storage, ``list_live()`` is empty and
``reattach()`` returns ``None``: every surface degrades to "fresh start".

A child runs a **target**: ``package.module:attr`` naming a callable
``target(child, input) -> JSON`` (sync or async; ``run_code``'s ``fn(ctx, input)``
order). ``child`` is a ``ChildContext``: its ``emit(frame)`` streams a JSON frame to the
host (durably, for an out-of-process child), and it carries the ids, the working
directory and the caller metadata. A spec may name a **runner** instead of calling the
target directly: ``runner(target, child, input)``, also by reference, so that a layer
above this one (the harness runs agents this way) decides what a target means without
this layer importing it.

``InProcessAdapter`` runs the target as a task of this process (it dies with it);
``LocalSubprocessAdapter`` (``_local``) runs it as its own OS process.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import ConfigError, SubprocessError
from little_workflow.ids import new_id, validate_id
from little_workflow.platform._threads import call_user
from little_workflow.references import import_reference

__all__ = [
    "MANIFEST_PREFIX",
    "ChildContext",
    "InProcessAdapter",
    "InProcessHandle",
    "SpawnSpec",
    "SubprocessAdapter",
    "SubprocessHandle",
    "manifest_key",
    "reference_of",
    "resolve_reference",
    "resolve_target",
    "run_target",
]

MANIFEST_PREFIX = "subprocess:handle:"


def manifest_key(handle_id: str) -> str:
    """The storage key of a child's manifest entry."""
    return MANIFEST_PREFIX + validate_id(handle_id, what="handle id")


@dataclass(frozen=True, slots=True, kw_only=True)
class SpawnSpec:
    """What to run in a child, and what to remember about it."""

    #: ``package.module:attr``: a callable ``target(child, input) -> JSON``.
    target: str
    input: JsonValue = None
    #: ``package.module:attr`` of ``runner(target, child, input)``, if not called directly.
    runner: str | None = None
    #: The id of the step (or agent) that spawned it.
    step_id: str = "spawn"
    #: The execution the child belongs to (its parent context is restored from it).
    execution_id: str | None = None
    cwd: str | None = None
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    handle_id: str = field(default_factory=lambda: new_id("spawn"))


@dataclass(slots=True)
class ChildContext:
    """What a target sees: its ids, the caller's metadata, and ``emit`` for frames."""

    handle_id: str
    execution_id: str | None
    step_id: str
    cwd: str | None
    metadata: dict[str, JsonValue]
    emitter: Callable[[JsonValue], Awaitable[int]]

    async def emit(self, frame: JsonValue) -> int:
        """Send ``frame`` (any JSON value) to the host; its sequence number."""
        check_json_value(frame, where=f"a frame of child {self.handle_id!r}")
        return await self.emitter(frame)


@runtime_checkable
class SubprocessHandle(Protocol):
    """A spawned child, as its host sees it."""

    handle_id: str
    step_id: str
    execution_id: str | None

    def is_alive(self) -> bool:
        """Whether the child is still running."""
        ...

    def frames(self) -> AsyncIterator[tuple[int, JsonValue]]:
        """The child's frames as ``(seq, frame)``, in order, each once."""
        ...

    async def wait(self) -> JsonValue:
        """The child's result (its error, if it failed)."""
        ...


@runtime_checkable
class SubprocessAdapter(Protocol):
    """Starts children and finds them again (see the module docstring)."""

    async def spawn(self, spec: SpawnSpec) -> SubprocessHandle:
        """Start a child running ``spec.target``; its handle."""
        ...

    async def reattach(self, handle_id: str) -> SubprocessHandle | None:
        """The child ``handle_id`` if it is still running (or finished with a result)."""
        ...

    async def list_live(self) -> Sequence[SubprocessHandle]:
        """Every child of this adapter's storage that is still running."""
        ...


def resolve_reference(reference: str) -> Any:
    """Import ``package.module:attr`` (no private parts); ``ConfigError`` if it names nothing."""
    return import_reference(reference, what="spawn target", public_only=True)


def resolve_target(reference: str) -> Callable[..., Any]:
    """``resolve_reference``, for a callable; ``ConfigError`` if it is not one."""
    target = resolve_reference(reference)
    if not callable(target):
        raise ConfigError(f"spawn target {reference!r} is not callable")
    result: Callable[..., Any] = target
    return result


def reference_of(function: Callable[..., Any]) -> str:
    """The ``package.module:attr`` reference a child process can import ``function`` by.

    ``ConfigError`` for a lambda, a nested function or anything else a fresh interpreter
    could not find again under its name.
    """
    module = getattr(function, "__module__", None)
    qualname = getattr(function, "__qualname__", None)
    if (
        not isinstance(module, str)
        or not isinstance(qualname, str)
        or module == "__main__"
        or "<" in qualname  # <lambda>, <locals>
    ):
        raise ConfigError(
            f"{function!r} cannot run in another process: it has no importable name "
            "(define it at module level, in a module other than __main__)"
        )
    reference = f"{module}:{qualname}"
    try:
        found = resolve_reference(reference)
    except ConfigError as exc:
        raise ConfigError(
            f"{function!r} cannot run in another process: {exc} (define it at module level)"
        ) from exc
    if found is not function:
        raise ConfigError(
            f"{function!r} cannot run in another process: {reference} names another object"
        )
    return reference


async def run_target(spec: SpawnSpec, child: ChildContext) -> JsonValue:
    """Run the spec's target (through its runner, if it names one); its JSON result."""
    if spec.runner is not None:
        result = await call_user(resolve_target(spec.runner), spec.target, child, spec.input)
    else:
        result = await call_user(resolve_target(spec.target), child, spec.input)
    check_json_value(result, where=f"the result of spawn target {spec.target!r}")
    value: JsonValue = result
    return value


class InProcessHandle:
    """A child running as a task of this process."""

    def __init__(self, spec: SpawnSpec) -> None:
        self.handle_id = spec.handle_id
        self.step_id = spec.step_id
        self.execution_id = spec.execution_id
        self._frames: list[tuple[int, JsonValue]] = []
        self._acked = 0
        self._changed = asyncio.Event()
        self.task: asyncio.Task[JsonValue] | None = None

    async def emit(self, frame: JsonValue) -> int:
        """Keep ``frame`` for ``frames()``; its sequence number."""
        self._frames.append((len(self._frames) + 1, frame))
        self._changed.set()
        return len(self._frames)

    def is_alive(self) -> bool:
        """Whether the task is still running."""
        return self.task is not None and not self.task.done()

    async def frames(self) -> AsyncIterator[tuple[int, JsonValue]]:
        """Every frame not yet acked, in order, until the child ends.

        A frame is acked when the loop comes back for the next one (as over IPC), so a
        reader that stops is given again the frame it was handling, and none before.
        """
        index = self._acked
        while True:
            while index < len(self._frames):
                yield self._frames[index]
                index += 1
                self._acked = max(self._acked, index)
            if not self.is_alive():
                return
            self._changed.clear()
            if index == len(self._frames):
                waiter = asyncio.ensure_future(self._changed.wait())
                assert self.task is not None
                await asyncio.wait({waiter, self.task}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()

    def failed(self) -> bool:
        """Whether the target raised."""
        task = self.task
        return (
            task is not None
            and task.done()
            and not task.cancelled()
            and (task.exception() is not None)
        )

    async def wait(self) -> JsonValue:
        """The child's result; ``SubprocessError`` (``child_failed``) if the target raised.

        The same error an out-of-process child gives, so that switching adapters does
        not change how a failure looks; the original exception is its ``__cause__``.
        """
        assert self.task is not None
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if not self.task.cancelled():
                raise
            raise SubprocessError(
                f"child {self.handle_id!r} was cancelled",
                code="child_lost",
                handle_id=self.handle_id,
            ) from None
        except Exception as exc:
            raise SubprocessError(
                f"child {self.handle_id!r} failed: {type(exc).__name__}: {exc}",
                code="child_failed",
                handle_id=self.handle_id,
                error_type=type(exc).__name__,
            ) from exc


class InProcessAdapter:
    """Runs each child as a task of this process.

    Its children die with the process and it has no storage, so, as the seed has it for
    any adapter without storage, ``list_live()`` is empty and ``reattach()`` is ``None``.
    """

    async def spawn(self, spec: SpawnSpec) -> InProcessHandle:
        """Start ``spec.target`` as a task."""
        # Fail here, not in the task, for a bad reference or input.
        resolve_target(spec.runner if spec.runner is not None else spec.target)
        check_json_value(spec.input, where=f"the input of child {spec.handle_id!r}")
        handle = InProcessHandle(spec)
        child = ChildContext(
            handle_id=spec.handle_id,
            execution_id=spec.execution_id,
            step_id=spec.step_id,
            cwd=spec.cwd,
            metadata=dict(spec.metadata),
            emitter=handle.emit,
        )
        handle.task = asyncio.get_running_loop().create_task(run_target(spec, child))
        return handle

    async def reattach(self, handle_id: str) -> InProcessHandle | None:
        """Always ``None``: nothing of this adapter survives its process."""
        return None

    async def list_live(self) -> list[InProcessHandle]:
        """Always empty (see the class docstring)."""
        return []
