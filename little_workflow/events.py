"""Every event type of the durable log, one pydantic model each.

The log is the source of truth: a run's state is a pure function of its events. This
module is the contract for what is on disk, so its names are the seed's, exactly:
``StepCompleted``, ``StepAttemptStarted``, ``OuterLoopCycleCompleted``,
``harness.model.called`` and the rest. Field names are stored in camelCase (``stepPath``)
like the seed's JSON; Python code uses snake_case (``step_path``).

An event is stored as its ``type`` string plus the JSON of its fields. Reading back a
type this program has no model for raises ``UnknownEventTypeError``; fields that do not
validate raise ``CorruptDataError``. Both name the run and sequence number. Models
forbid unknown fields so that a log written by a newer, incompatible version is
reported instead of half-understood.

Adding an event: define the model with ``TYPE``, decorate it with ``@_event``. Never
rename a ``TYPE`` or a stored field: golden logs under ``tests/`` pin them.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic.alias_generators import to_camel

from little_workflow.errors import CorruptDataError, UnknownEventTypeError

__all__ = [
    "EVENT_TYPES",
    "CodeChange",
    "CodeDrifted",
    "CodePinned",
    "Event",
    "EventReceived",
    "ForkOrigin",
    "HarnessExecuteStepSucceeded",
    "HarnessModelCalled",
    "HarnessModelResponded",
    "HarnessSessionCompleted",
    "HarnessSessionStarted",
    "HarnessToolCallFailed",
    "HarnessToolCallStarted",
    "HarnessToolCallSucceeded",
    "OuterLoopCycleCompleted",
    "OuterLoopCycleResult",
    "RecordedEvent",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunIndexUpdate",
    "RunResumed",
    "RunStarted",
    "RunStatus",
    "SideEffectIntended",
    "SideEffectReconciled",
    "StepAttemptFailed",
    "StepAttemptStarted",
    "StepCompleted",
    "StepFailed",
    "SubRunStarted",
    "WaitCompleted",
    "WaitStarted",
    "decode_event",
    "encode_event",
]


class RunStatus(enum.StrEnum):
    """A run's status as the run index records it, derived from lifecycle events."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Event(BaseModel):
    """Base of every event. Subclasses set ``TYPE``, the stored type string."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        # A model's validator and serializer are built on its first use, not at import:
        # building all of them took ~30 ms of every process's start, and a process uses
        # a few (a resume: the run and step events). The wire format is the same.
        defer_build=True,
    )

    TYPE: ClassVar[str]
    #: The run status this event moves the run index to, if it is a lifecycle event.
    RUN_STATUS: ClassVar[RunStatus | None] = None

    def run_index_update(self) -> RunIndexUpdate | None:
        """What appending this event changes in the run index (status, workflow, parent)."""
        if self.RUN_STATUS is None:
            return None
        return RunIndexUpdate(status=self.RUN_STATUS)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunIndexUpdate:
    """A change to a run's row in the run index; ``None`` fields stay as they are."""

    status: RunStatus | None = None
    workflow: str | None = None
    parent_run_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedEvent:
    """An event as read back from a log: where it sits and when it was appended."""

    run_id: str
    #: 1, 2, 3, ... per run, no gaps, assigned by the log at append.
    seq: int
    #: Seconds since the epoch when the log appended it.
    ts: float
    event: Event

    @property
    def type(self) -> str:
        """The event's stored type string, such as ``StepCompleted``."""
        return self.event.TYPE


EVENT_TYPES: dict[str, type[Event]] = {}
_E = TypeVar("_E", bound=type[Event])


def _event(cls: _E) -> _E:
    if cls.TYPE in EVENT_TYPES:  # pragma: no cover - a programming error caught at import
        raise RuntimeError(f"event type {cls.TYPE!r} is defined twice")
    EVENT_TYPES[cls.TYPE] = cls
    return cls


# --- run lifecycle -------------------------------------------------------------------


class ForkOrigin(BaseModel):
    """Where a forked run came from: the source run and the step path it was forked at."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        defer_build=True,  # see ``Event``
    )

    run_id: str
    at: str


@_event
class RunStarted(Event):
    """A run began: what it runs and with which input. Always a run's first event."""

    TYPE = "RunStarted"
    RUN_STATUS = RunStatus.RUNNING

    workflow_name: str
    definition_hash: str
    workflow_version_id: str
    input: JsonValue = None
    parent_run_id: str | None = None
    parent_step_path: str | None = None
    outer_loop_id: str | None = None
    cycle_number: int | None = None
    #: Set on a fork (``Runtime.fork``): the events before it were copied from that run.
    forked_from: ForkOrigin | None = None
    #: Code-first ``@workflow(events=...)``: the events the run's waits take, with their
    #: JSON Schemas (``None``: any JSON); ``send`` checks against them before a wait.
    declared_events: dict[str, dict[str, JsonValue] | None] | None = None
    #: With tracing on (``docs/observability.md``): the W3C ``traceparent`` of the run's
    #: first pass span, so every later pass, in any process, continues the run's trace.
    trace_context: str | None = None

    @pydantic.model_serializer(mode="wrap")
    def _omit_no_fork(self, handler: pydantic.SerializerFunctionWrapHandler) -> Any:
        # A run that is not a fork (or declares no events) is stored exactly as before
        # the field existed, so a version of the program that does not know it still
        # reads such logs.
        data = handler(self)
        if isinstance(data, dict):
            for field in ("forkedFrom", "declaredEvents", "traceContext"):
                if data.get(field, 0) is None:
                    del data[field]
        return data

    def run_index_update(self) -> RunIndexUpdate:
        """A started run records its workflow and parent in the index."""
        return RunIndexUpdate(
            status=RunStatus.RUNNING,
            workflow=self.workflow_name,
            parent_run_id=self.parent_run_id,
        )


@_event
class RunResumed(Event):
    """A process picked the run up again after a restart, a retry or an explicit resume."""

    TYPE = "RunResumed"
    RUN_STATUS = RunStatus.RUNNING

    reason: str = "resume"
    pid: int | None = None


@_event
class RunCompleted(Event):
    """The run produced its output. Nothing is appended after it."""

    TYPE = "RunCompleted"
    RUN_STATUS = RunStatus.COMPLETED

    output: JsonValue = None


@_event
class RunFailed(Event):
    """The run failed for good; ``cause_code`` is the stable reason."""

    TYPE = "RunFailed"
    RUN_STATUS = RunStatus.FAILED

    cause_code: str
    message: str
    step_path: str | None = None


@_event
class RunCancelled(Event):
    """The run was cancelled by a person or a program."""

    TYPE = "RunCancelled"
    RUN_STATUS = RunStatus.CANCELLED

    reason: str | None = None


# --- Layer A: steps ------------------------------------------------------------------


@_event
class StepAttemptStarted(Event):
    """An attempt of a step (at one path, one visit) began; it may not finish."""

    TYPE = "StepAttemptStarted"

    step_path: str
    step_id: str
    kind: str
    attempt: int = 1
    visit: int | None = None


@_event
class StepAttemptFailed(Event):
    """An attempt raised; ``will_retry`` says whether the retry policy tries again."""

    TYPE = "StepAttemptFailed"

    step_path: str
    attempt: int
    error_code: str
    message: str
    will_retry: bool


@_event
class SideEffectIntended(Event):
    """The outbox entry: a side-effecting step is about to be dispatched (committed first).

    Its outcome follows, for this attempt: ``StepCompleted`` or ``StepAttemptFailed``. An
    intent with no outcome after it is what a crash left mid-dispatch; the resume asks the
    step's ``reconcile`` hook, if it has one, before dispatching again.
    """

    TYPE = "SideEffectIntended"

    step_path: str
    #: What the far end deduplicates on (the step's ``sideEffect.key``, by default
    #: ``<run id>/<step path>``).
    key: str
    attempt: int


@_event
class SideEffectReconciled(Event):
    """A resume asked the ``reconcile`` hook about an intent left without an outcome.

    ``happened``: the effect took place (its result is the ``StepCompleted`` that follows);
    otherwise the step is dispatched again under the same key.
    """

    TYPE = "SideEffectReconciled"

    step_path: str
    key: str
    happened: bool


@_event
class StepCompleted(Event):
    """The durability unit of Layer A: a step at a path (and visit) finished.

    A committed ``StepCompleted`` is never executed again. For a decision step,
    ``route`` is the route name its function chose (a key of its ``routes``), which is
    how a resumed run finds its ``pendingDecisionTarget``. ``identity`` is the hash of
    the step definition that ran at this path (see ``little_workflow.durable``).
    """

    TYPE = "StepCompleted"

    step_path: str
    step_id: str
    kind: str
    visit: int | None = None
    output: JsonValue = None
    route: str | None = None
    identity: str | None = None


@_event
class StepFailed(Event):
    """A step failed for good (retries exhausted or a non-retryable error)."""

    TYPE = "StepFailed"

    step_path: str
    step_id: str
    cause_code: str
    message: str


@_event
class SubRunStarted(Event):
    """A ``workflow`` step committed the id of its sub-run before starting it."""

    TYPE = "SubRunStarted"

    step_path: str
    sub_run_id: str
    workflow_name: str
    definition_hash: str


# --- waits: events and timers (docs/waits.md) -----------------------------------------


@_event
class WaitStarted(Event):
    """A run reached a wait: for an event (``event`` set) or a timer (``event`` is ``None``).

    ``wake_at`` (seconds since the epoch) is computed once, here: a timer's time, or an
    event wait's timeout (``None``: no timeout). A resume reads it back, so a restart, a
    reboot or another worker never moves it. ``schema`` is the JSON Schema the event's
    payload must meet (``send`` checks it before writing anything).
    """

    TYPE = "WaitStarted"

    step_path: str
    step_id: str
    kind: str
    event: str | None = None
    wake_at: float | None = None
    schema_: dict[str, JsonValue] | None = pydantic.Field(default=None, alias="schema")
    #: What an agent's ``ask_user`` asked (kind ``ask_user``); ``None`` for other waits.
    question: str | None = None


@_event
class EventReceived(Event):
    """An event sent to the run (``send``), committed to its log; ``key`` makes it once."""

    TYPE = "EventReceived"

    event: str
    key: str
    data: JsonValue = None
    sent_at: float


@_event
class WaitCompleted(Event):
    """A wait ended: ``outcome`` ``event`` (the received event ``key``), ``timeout`` or ``due``."""

    TYPE = "WaitCompleted"

    step_path: str
    outcome: Literal["event", "timeout", "due"]
    key: str | None = None


# --- Layer B: outer loops ------------------------------------------------------------


class OuterLoopCycleResult(BaseModel):
    """What ``supervise()`` decided for a cycle: ``done`` with the final output, or ``continue``."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        defer_build=True,  # see ``Event``
    )

    kind: Literal["done", "continue"]
    final_output: JsonValue = None
    summary: str | None = None


@_event
class OuterLoopCycleCompleted(Event):
    """The cycle commit point: the first one for a cycle is authoritative."""

    TYPE = "OuterLoopCycleCompleted"

    outer_loop_id: str
    cycle_number: int
    result: OuterLoopCycleResult


# --- code-first: the code a run calls ------------------------------------------------


@_event
class CodePinned(Event):
    """Step functions a code-first run calls for the first time: each one's qualified
    name (``pkg.module:fetch``) and a hash of its source, so a resume can tell which
    code changed (the workflow's own is ``RunStarted.definitionHash``)."""

    TYPE = "code.pinned"

    functions: dict[str, str]


class CodeChange(BaseModel):
    """One function whose source changed: ``kind`` ``workflow`` or ``step``."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        defer_build=True,  # see ``Event``
    )

    kind: Literal["workflow", "step"]
    name: str
    old: str
    new: str


@_event
class CodeDrifted(Event):
    """A resume of a code-first run found pinned code changed and went on with it; the
    new hashes are what the run pins from here on."""

    TYPE = "code.drifted"

    changes: list[CodeChange]


# --- Layer C: harness sessions -------------------------------------------------------


@_event
class HarnessSessionStarted(Event):
    """A harness session began; its capability manifest is checked on resume."""

    TYPE = "harness.session.started"

    session_id: str
    role: str
    step_path: str | None = None
    manifest: dict[str, JsonValue]
    manifest_hash: str
    #: The model slot's name (the manifest holds its model id): a resume compares an
    #: unfinished session with the slot as configured now before anything runs, where
    #: no workflow document says which slot the session used (code-first).
    slot: str | None = None

    @pydantic.model_serializer(mode="wrap")
    def _omit_no_slot(self, handler: pydantic.SerializerFunctionWrapHandler) -> Any:
        # Stored as before the field existed when there is none (see ``RunStarted``).
        data = handler(self)
        if isinstance(data, dict) and data.get("slot", 0) is None:
            del data["slot"]
        return data


@_event
class HarnessModelCalled(Event):
    """A model call is about to be made (its response may never be recorded)."""

    TYPE = "harness.model.called"

    session_id: str
    call_id: str
    slot: str
    request: JsonValue = None
    #: The identity of the graph step that makes the call (see ``durable.MemoTable``).
    identity: str | None = None


@_event
class HarnessModelResponded(Event):
    """The committed response to a ``harness.model.called`` with the same ``call_id``."""

    TYPE = "harness.model.responded"

    session_id: str
    call_id: str
    response: JsonValue = None
    #: ``model`` and ``usage`` of ``response`` when the response is stored by reference
    #: (the blob store, docs/blobs.md), so that totals of usage read no blob; else None.
    summary: dict[str, JsonValue] | None = None


@_event
class HarnessToolCallStarted(Event):
    """A tool call is about to run (``start_workflow`` records its ``subRunId`` here)."""

    TYPE = "harness.tool_call.started"

    session_id: str
    call_id: str
    tool_name: str
    arguments: JsonValue = None
    #: The identity of the graph step that makes the call (see ``durable.MemoTable``).
    identity: str | None = None


@_event
class HarnessToolCallSucceeded(Event):
    """A tool call's committed result."""

    TYPE = "harness.tool_call.succeeded"

    session_id: str
    call_id: str
    result: JsonValue = None


@_event
class HarnessToolCallFailed(Event):
    """A tool call raised; the error goes back to the model and is replayed as an error."""

    TYPE = "harness.tool_call.failed"

    session_id: str
    call_id: str
    error_code: str
    message: str


@_event
class HarnessExecuteStepSucceeded(Event):
    """A direct-execute step's callable returned (logs of earlier versions only).

    Earlier versions committed it with each ``execute``/``decision`` step's
    ``StepCompleted``, whose output repeats its ``result``; the runtime now writes the
    ``StepCompleted`` alone. Kept so those logs still read and fold as they did.
    """

    TYPE = "harness.execute_step.succeeded"

    step_path: str
    attempt: int = 1
    result: JsonValue = None


@_event
class HarnessSessionCompleted(Event):
    """A harness session finished with its output."""

    TYPE = "harness.session.completed"

    session_id: str
    output: JsonValue = None


# --- encoding ------------------------------------------------------------------------


def encode_event(event: Event) -> str:
    """The stored JSON of an event's fields (camelCase), without its type."""
    return event.model_dump_json(by_alias=True)


_DECODERS: dict[str, Callable[[str | bytes], Event]] = {
    type_name: model.model_validate_json for type_name, model in EVENT_TYPES.items()
}


def decode_event(type_name: str, data: str | bytes, *, where: str) -> Event:
    """Rebuild an event from its stored type and JSON; ``where`` names it in errors.

    Raises ``UnknownEventTypeError`` for a type with no model and ``CorruptDataError``
    for data that does not validate against the model.
    """
    decoder = _DECODERS.get(type_name)
    if decoder is None:
        raise UnknownEventTypeError(
            f"{where}: unknown event type {type_name!r}; this version of little-workflow "
            f"knows {len(EVENT_TYPES)} types. Was the log written by a newer version?"
        )
    try:
        return decoder(data)
    except pydantic.ValidationError as exc:
        raise CorruptDataError(
            f"{where}: stored {type_name} event does not validate: "
            f"{exc.error_count()} error(s), first: {_first_error(exc)}"
        ) from exc


def _first_error(exc: pydantic.ValidationError) -> str:
    first: Any = exc.errors(include_url=False)[0]
    location = ".".join(str(part) for part in first.get("loc", ()))
    return f"{location or '<root>'}: {first.get('msg', '')}"
