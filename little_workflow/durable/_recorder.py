"""The recorder interface: how a harness makes its durable units durable.

A **unit** is one model call, tool call, code run or spawned agent, at a **path** in the
agent graph (``agent.turns[2].model``, ``agent.turns[2].tools[call_7]``), with the
**identity** of the step that runs there (a hash of its kind, id and configuration).
``run_unit`` is memoization by path (the mechanism of ``little_workflow.durable``) seen
from the harness: if the recorder holds a committed result for the path, it is returned
(or, for a recorded failure, raised again) and nothing runs; otherwise the unit runs and
its result is recorded before anything downstream sees it.

One harness, several recorders: ``NullRecorder`` (a zero-config harness persists
nothing), the run-log recorder of a session inside a workflow run (Layer C:
``harness.model.called`` ... events in the run's log), and the step-completion ledger of
a harness with a checkpoint store.

A unit may append to the conversation while it runs (a composite's children do, a code
step may): a replay that skips it must still move the conversation's **replay
position** past what it appended. ``run_unit``'s ``cursor`` (the item log) says where
the log stood when the unit ended; a recorder that keeps it (the step ledger) gives it
back, and the replay moves the cursor there, at whatever depth the replay happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, runtime_checkable

from little_workflow._tracing import TRACE
from little_workflow.codec import JsonValue
from little_workflow.errors import RecordedFailure

__all__ = [
    "NullRecorder",
    "Recorded",
    "RecordedFailure",
    "Recorder",
    "ReplayCursor",
    "Unit",
    "UnitKind",
    "run_unit",
]

UnitKind = Literal["model", "tool", "code", "spawn", "composite"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Unit:
    """A durable unit about to run (see the module docstring)."""

    path: str
    kind: UnitKind
    step_id: str
    identity: str
    #: What the unit is about to do, as recorded when it starts: ``{"slot", "request"}``
    #: for a model call, ``{"name", "arguments"}`` for a tool call.
    detail: Mapping[str, JsonValue] = field(default_factory=dict)
    #: Whether its start must be durable before it runs (it names something it will
    #: create elsewhere, such as a sub-run); otherwise a recorder may write it behind.
    durable_start: bool = False
    #: Where the conversation's replay position stood when the unit completed (set by
    #: ``run_unit`` from its ``cursor``, for ``succeeded``); ``None`` when not tracked.
    item_position: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """A committed outcome at a path: a value, or (``ok=False``) an error code and message."""

    value: JsonValue
    ok: bool = True
    error_code: str | None = None
    message: str | None = None
    #: The recorded ``Unit.item_position``: a replay moves the cursor there.
    item_position: int | None = None


class ReplayCursor(Protocol):
    """The replay position of a conversation (the harness's ``ItemLog``)."""

    @property
    def position(self) -> int:
        """How many items the conversation so far holds."""
        ...

    def reach(self, position: int) -> None:
        """Move a replay forward to ``position`` (never back; no-op when not replaying)."""
        ...


@runtime_checkable
class Recorder(Protocol):
    """Where a harness records its durable units, and finds them again on resume."""

    def replay(self, unit: Unit) -> Recorded | None:
        """The committed outcome at ``unit.path``, or ``None`` if the unit must run.

        A recorded unit whose identity differs is the recorder's to judge: an error
        (Layer C), or a fresh run with the recorded subtree discarded (the ledger).
        """
        ...

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """The recorded detail of a unit that started but has no outcome (a crash cut it)."""
        ...

    async def started(self, unit: Unit) -> None:
        """Record that ``unit`` is about to run (``detail`` says with what)."""
        ...

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """Record ``unit``'s result; must be durable when it returns."""
        ...

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """Record that ``unit`` raised ``error`` (a recorder may keep only successes)."""
        ...


class NullRecorder:
    """Records nothing and replays nothing: the zero-config harness."""

    def replay(self, unit: Unit) -> Recorded | None:
        """Nothing is ever recorded."""
        return None

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """Nothing is ever in flight."""
        return None

    async def started(self, unit: Unit) -> None:
        """No-op."""

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """No-op."""

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """No-op."""


async def run_unit(
    recorder: Recorder,
    unit: Unit,
    compute: Callable[[Mapping[str, JsonValue]], Awaitable[JsonValue]],
    *,
    prepare: Callable[[Mapping[str, JsonValue]], Mapping[str, JsonValue]] | None = None,
    reconcile: Callable[[Mapping[str, JsonValue]], Awaitable[Recorded | None]] | None = None,
    cursor: ReplayCursor | None = None,
) -> JsonValue:
    """Replay ``unit`` if its outcome is recorded; else record its start, run it, record it.

    ``compute`` receives the unit's detail as recorded: for a unit cut off by a crash,
    the detail of its recorded start (``prepare``, which may add to the detail before it
    is first recorded, such as the id of a sub-run to start, is then not called again).
    ``reconcile`` is asked first about such a unit (a side effect whose outcome a crash
    lost): a ``Recorded`` value is recorded as its outcome instead of running it again.
    ``cursor`` is the conversation the unit may append to: its position is recorded with
    the outcome, and a replay moves it back there (see the module docstring).
    """
    recorded = recorder.replay(unit)
    if recorded is not None:
        trace = TRACE.get()
        if trace is not None:
            # A model or tool call served from the log: marked, never timed as a call.
            trace.call_replayed(unit.path)
        if cursor is not None and recorded.item_position is not None:
            cursor.reach(recorded.item_position)
        if recorded.ok:
            return recorded.value
        raise RecordedFailure(
            recorded.message or "recorded failure", error_code=recorded.error_code or "error"
        )
    detail = recorder.in_flight(unit)
    if detail is None:
        detail = unit.detail if prepare is None else prepare(unit.detail)
        unit = replace(unit, detail=detail)
        await recorder.started(unit)
    else:
        unit = replace(unit, detail=detail)
        if reconcile is not None:
            settled = await reconcile(detail)
            if settled is not None:
                await recorder.succeeded(_ended(unit, cursor), settled.value)
                return settled.value
    try:
        value = await compute(detail)
    except Exception as exc:
        await recorder.failed(unit, exc)
        raise
    await recorder.succeeded(_ended(unit, cursor), value)
    return value


def _ended(unit: Unit, cursor: ReplayCursor | None) -> Unit:
    """``unit`` with the cursor's position at its end, for the recorder."""
    return unit if cursor is None else replace(unit, item_position=cursor.position)
