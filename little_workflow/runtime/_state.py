"""A run's state as a pure function of its events: ``fold(events) -> RunState``.

Resume, replay, the CLI and the UI all read a run through this one function, so they
can never disagree about what happened. It does no I/O; ``apply`` folds one more event
into an existing state, so a live view can follow a log without re-reading it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, CorruptDataError
from little_workflow.events import (
    CodeChange,
    CodeDrifted,
    CodePinned,
    Event,
    EventReceived,
    ForkOrigin,
    HarnessExecuteStepSucceeded,
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessSessionCompleted,
    HarnessSessionStarted,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    OuterLoopCycleCompleted,
    OuterLoopCycleResult,
    RecordedEvent,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunResumed,
    RunStarted,
    RunStatus,
    SideEffectIntended,
    SideEffectReconciled,
    StepAttemptFailed,
    StepAttemptStarted,
    StepCompleted,
    StepFailed,
    SubRunStarted,
    WaitCompleted,
    WaitStarted,
)

if TYPE_CHECKING:
    from little_workflow.storage import PayloadLog

__all__ = [
    "CODE_VERSION_PREFIX",
    "CallRecord",
    "ReceivedEvent",
    "RunState",
    "SessionRecord",
    "StepRecord",
    "StepStatus",
    "WaitRecord",
    "apply",
    "apply_event",
    "fold",
    "is_code_run",
    "read_state",
    "scope_key",
    "unfinished_sub_runs",
]

StepStatus = Literal["running", "completed", "failed"]

#: A code-first run's ``workflowVersionId`` is this prefix and the qualified name. Here,
#: not with the code-first API, so that resuming an LWIR run can tell it is one without
#: importing that API (``_runtime.py``, ``tests/test_lazy_imports.py``).
CODE_VERSION_PREFIX = "code:"


@dataclass(slots=True, kw_only=True)
class StepRecord:
    """What the log says about one step path (one visit of one step in one branch)."""

    path: str
    step_id: str
    kind: str
    visit: int | None = None
    status: StepStatus = "running"
    #: ``StepAttemptStarted`` events seen: attempts begun, including one cut by a crash.
    attempts: int = 0
    #: ``StepAttemptFailed`` events seen: attempts that raised.
    failures: int = 0
    output: JsonValue = None
    route: str | None = None
    #: A direct-execute result committed before its ``StepCompleted`` (crash in between):
    #: the step completes from it without calling the function again.
    execute_result: JsonValue = None
    has_execute_result: bool = False
    sub_run_id: str | None = None
    last_error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    #: Seq of the event that completed the step.
    completed_seq: int | None = None
    #: Hash of the step definition that completed here (see ``durable.MemoTable``).
    identity: str | None = None
    #: The key of a ``SideEffectIntended`` with no outcome after it (a crash
    #: mid-dispatch): the resume reconciles it before dispatching again.
    open_intent: str | None = None


@dataclass(slots=True, kw_only=True)
class CallRecord:
    """One model or tool call of a harness session (Layer C), as the log tells it."""

    call_id: str
    kind: Literal["model", "tool"]
    identity: str | None
    #: ``{"slot", "request"}`` for a model call; ``{"name", "arguments"}`` for a tool call.
    detail: dict[str, JsonValue]
    #: Whether its outcome (response, result or failure) is committed.
    done: bool = False
    ok: bool = True
    value: JsonValue = None
    error_code: str | None = None
    message: str | None = None


@dataclass(slots=True, kw_only=True)
class SessionRecord:
    """A harness session (planner, orchestrator, worker, fixer) of the run."""

    session_id: str
    role: str
    step_path: str | None = None
    manifest: dict[str, JsonValue] = field(default_factory=dict)
    manifest_hash: str | None = None
    #: The model slot's name, where the log records it (``HarnessSessionStarted.slot``).
    slot: str | None = None
    #: Calls by call id, in the order they started.
    calls: dict[str, CallRecord] = field(default_factory=dict)
    completed: bool = False
    output: JsonValue = None


@dataclass(slots=True, kw_only=True)
class WaitRecord:
    """A wait the run reached (``WaitStarted``), and how it ended (``WaitCompleted``)."""

    path: str
    step_id: str
    kind: str
    #: The event waited for; ``None`` for a timer.
    event: str | None
    #: A timer's time, or an event wait's timeout (seconds since the epoch).
    wake_at: float | None
    schema: dict[str, JsonValue] | None
    #: What an agent's ``ask_user`` asked (kind ``ask_user``); ``None`` for other waits.
    question: str | None
    #: When the wait began (its ``WaitStarted`` was appended).
    since: float
    #: ``None`` while it waits; then ``event``, ``timeout`` or ``due``.
    outcome: str | None = None
    #: The received event's key, for outcome ``event``.
    key: str | None = None


@dataclass(slots=True, kw_only=True)
class ReceivedEvent:
    """An event sent to the run (``EventReceived``), and the wait that took it, once one did."""

    event: str
    key: str
    data: JsonValue
    sent_at: float
    seq: int
    consumed_by: str | None = None


@dataclass(slots=True, kw_only=True)
class RunState:
    """Everything the log says about a run, folded."""

    run_id: str
    workflow_name: str = ""
    definition_hash: str = ""
    workflow_version_id: str = ""
    input: JsonValue = None
    parent_run_id: str | None = None
    parent_step_path: str | None = None
    outer_loop_id: str | None = None
    cycle_number: int | None = None
    #: The run and step path this run was forked from (``Runtime.fork``), if it was.
    forked_from: ForkOrigin | None = None
    #: Code-first ``@workflow(events=...)`` as the run pinned it (``None``: none declared).
    declared_events: dict[str, dict[str, JsonValue] | None] | None = None
    #: The ``traceparent`` of the run's trace, recorded when tracing was on at its start.
    trace_context: str | None = None
    status: RunStatus = RunStatus.RUNNING
    output: JsonValue = None
    failure_cause: str | None = None
    failure_message: str | None = None
    failure_step: str | None = None
    #: Step records by path, in the order the log first mentions them.
    steps: dict[str, StepRecord] = field(default_factory=dict)
    started_at: float = 0.0
    updated_at: float = 0.0
    last_seq: int = 0
    #: How many times a process picked the run up again (``RunResumed``).
    resumes: int = 0
    #: Visits that completed or failed for good, by (branch prefix, step id); ``visits``.
    visit_counts: dict[tuple[str, str], int] = field(default_factory=dict)
    #: The latest route of each decision by (branch prefix, step id).
    last_routes: dict[tuple[str, str], str] = field(default_factory=dict)
    #: ``supervise()``'s answer for this run, if it is a cycle of an outer loop (Layer B).
    outer_loop_result: OuterLoopCycleResult | None = None
    #: Harness sessions by session id (Layer C). A ``tool`` step's calls are kept under
    #: a session named by its step path, with role ``step``.
    sessions: dict[str, SessionRecord] = field(default_factory=dict)
    #: Code-first: the source hash of each step function the run called, as pinned now
    #: (``code.pinned``, then each accepted ``code.drifted``), and as first pinned.
    code: dict[str, str] = field(default_factory=dict)
    code_started: dict[str, str] = field(default_factory=dict)
    #: Code-first: the workflow body's hash as pinned now (``definition_hash`` until a
    #: drift was accepted), and every accepted drift: ``(seq, changes)``.
    code_workflow_hash: str | None = None
    code_drifts: list[tuple[int, list[CodeChange]]] = field(default_factory=list)
    #: Waits by path (docs/waits.md), and the events sent to the run by key, in log order.
    waits: dict[str, WaitRecord] = field(default_factory=dict)
    received: dict[str, ReceivedEvent] = field(default_factory=dict)

    @property
    def pending_waits(self) -> list[WaitRecord]:
        """The waits the run reached and that have not ended."""
        return [wait for wait in self.waits.values() if wait.outcome is None]

    def next_event(self, event: str) -> ReceivedEvent | None:
        """The oldest received ``event`` no wait took yet."""
        for received in self.received.values():
            if received.event == event and received.consumed_by is None:
                return received
        return None

    @property
    def finished(self) -> bool:
        """Whether the run reached a final status (completed, failed, cancelled)."""
        return self.status is not RunStatus.RUNNING

    def completed(self, path: str) -> StepRecord | None:
        """The record of ``path`` if its step completed, else ``None``."""
        record = self.steps.get(path)
        return record if record is not None and record.status == "completed" else None

    def visits(self, step_id: str, branch_prefix: str = "") -> int:
        """Finished visits of ``step_id`` in the branch ``branch_prefix``: completed, or
        failed for good (``onError`` may route a failure on; a retry, which runs failed
        steps again, takes theirs back).

        The seed's rule: count the ``StepCompleted`` (and ``StepFailed``) events with the
        same (stepId, branchPath) prefix; the fold keeps the count as it goes.
        ``branch_prefix`` is the enclosing branch's path plus ``.``
        (``review-candidates[cand_1].``), or ``""`` at top level.
        """
        return self.visit_counts.get((branch_prefix, step_id), 0)

    def pending_decision_target(self, step_id: str, branch_prefix: str = "") -> str | None:
        """The route of the most recent completed visit of decision ``step_id``, if any."""
        return self.last_routes.get((branch_prefix, step_id))


def scope_key(path: str, step_id: str, visit: int | None) -> tuple[str, str]:
    """(branch prefix, step id) of a step path: ``m[k].w.visit[2]`` -> ``("m[k].", "w")``."""
    end = len(path) - (len(f".visit[{visit}]") if visit is not None else 0)
    return path[: end - len(step_id)], step_id


def _step(state: RunState, path: str, step_id: str, kind: str, visit: int | None) -> StepRecord:
    record = state.steps.get(path)
    if record is None:
        record = state.steps[path] = StepRecord(path=path, step_id=step_id, kind=kind, visit=visit)
    return record


def _existing(state: RunState, path: str, event: Event, seq: int) -> StepRecord:
    record = state.steps.get(path)
    if record is None:
        raise CorruptDataError(
            f"run {state.run_id!r} seq {seq}: {event.TYPE} for step {path!r}, "
            "which no StepAttemptStarted began"
        )
    return record


def apply(state: RunState, recorded: RecordedEvent) -> RunState:
    """Fold one more event into ``state`` (in place) and return it."""
    return apply_event(state, recorded.event, recorded.seq, recorded.ts)


def apply_event(state: RunState, event: Event, seq: int, ts: float) -> RunState:
    """``apply`` for an event not wrapped in a ``RecordedEvent``: the writer's fold.

    The run's writer folds each event it appends as it appends it, several per step;
    building a ``RecordedEvent`` for each only to unwrap it here was a measurable part
    of a step's cost.
    """
    if seq != state.last_seq + 1:
        raise CorruptDataError(
            f"run {state.run_id!r}: event seq {seq} follows seq {state.last_seq}"
        )
    state.last_seq = seq
    state.updated_at = ts
    if seq == 1:
        if not isinstance(event, RunStarted):
            raise CorruptDataError(
                f"run {state.run_id!r}: the first event is {event.TYPE}, not RunStarted"
            )
        state.workflow_name = event.workflow_name
        state.definition_hash = event.definition_hash
        state.workflow_version_id = event.workflow_version_id
        state.input = event.input
        state.parent_run_id = event.parent_run_id
        state.parent_step_path = event.parent_step_path
        state.outer_loop_id = event.outer_loop_id
        state.cycle_number = event.cycle_number
        state.forked_from = event.forked_from
        state.declared_events = event.declared_events
        state.trace_context = event.trace_context
        state.started_at = ts
        return state
    if state.finished and not isinstance(event, RunResumed | OuterLoopCycleCompleted):
        raise CorruptDataError(
            f"run {state.run_id!r} seq {seq}: {event.TYPE} after the run ended "
            f"({state.status.value})"
        )
    match event:
        case StepAttemptStarted():
            record = _step(state, event.step_path, event.step_id, event.kind, event.visit)
            if record.status == "completed":
                raise CorruptDataError(
                    f"run {state.run_id!r} seq {seq}: step {event.step_path!r} "
                    "started again after it completed"
                )
            record.status = "running"
            record.attempts += 1
            record.started_at = record.started_at or ts
        case StepAttemptFailed():
            record = _existing(state, event.step_path, event, seq)
            record.failures += 1
            record.last_error = f"{event.error_code}: {event.message}"
            record.open_intent = None
        case SideEffectIntended():
            _existing(state, event.step_path, event, seq).open_intent = event.key
        case SideEffectReconciled():
            _existing(state, event.step_path, event, seq).open_intent = None
        case HarnessExecuteStepSucceeded():
            record = _existing(state, event.step_path, event, seq)
            record.execute_result = event.result
            record.has_execute_result = True
        case SubRunStarted():
            _existing(state, event.step_path, event, seq).sub_run_id = event.sub_run_id
        case StepCompleted():
            record = _step(state, event.step_path, event.step_id, event.kind, event.visit)
            if record.status == "completed":
                raise CorruptDataError(
                    f"run {state.run_id!r} seq {seq}: step {event.step_path!r} completed twice"
                )
            record.status = "completed"
            record.open_intent = None
            record.output = event.output
            record.route = event.route
            record.finished_at = ts
            record.started_at = record.started_at or ts
            record.completed_seq = seq
            record.identity = event.identity
            key = scope_key(event.step_path, event.step_id, event.visit)
            state.visit_counts[key] = state.visit_counts.get(key, 0) + 1
            if event.route is not None:
                state.last_routes[key] = event.route
        case StepFailed():
            record = _existing(state, event.step_path, event, seq)
            if record.status != "failed":
                # A visit that failed for good is a visit: ``onError`` may lead the run
                # on, and back to this step, whose next visit comes after this one.
                key = scope_key(record.path, record.step_id, record.visit)
                state.visit_counts[key] = state.visit_counts.get(key, 0) + 1
            record.status = "failed"
            record.last_error = f"{event.cause_code}: {event.message}"
            record.finished_at = ts
        case RunCompleted():
            state.status = RunStatus.COMPLETED
            state.output = event.output
        case RunFailed():
            state.status = RunStatus.FAILED
            state.failure_cause = event.cause_code
            state.failure_message = event.message
            state.failure_step = event.step_path
        case RunCancelled():
            state.status = RunStatus.CANCELLED
            state.failure_message = event.reason
        case RunResumed():
            state.resumes += 1
            if event.reason == "retry" and state.status is RunStatus.FAILED:
                state.status = RunStatus.RUNNING
                for record in state.steps.values():
                    if record.status == "failed":
                        # It runs again: its visit is not finished any more.
                        record.status = "running"
                        record.failures = 0
                        # The retry starts its attempts afresh: a step it completes
                        # carries no error of the failed run's (``show --json``).
                        record.last_error = None
                        key = scope_key(record.path, record.step_id, record.visit)
                        state.visit_counts[key] -= 1
        case HarnessSessionStarted():
            state.sessions[event.session_id] = SessionRecord(
                session_id=event.session_id,
                role=event.role,
                step_path=event.step_path,
                manifest=dict(event.manifest),
                manifest_hash=event.manifest_hash,
                slot=event.slot,
            )
        case CodePinned():
            for name, digest in event.functions.items():
                state.code[name] = digest
                state.code_started.setdefault(name, digest)
        case CodeDrifted():
            for change in event.changes:
                if change.kind == "workflow":
                    state.code_workflow_hash = change.new
                else:
                    state.code[change.name] = change.new
            state.code_drifts.append((seq, list(event.changes)))
        case HarnessSessionCompleted():
            session = _session(state, event.session_id)
            session.completed = True
            session.output = event.output
        case HarnessModelCalled():
            _session(state, event.session_id).calls[event.call_id] = CallRecord(
                call_id=event.call_id,
                kind="model",
                identity=event.identity,
                detail={"slot": event.slot, "request": event.request},
            )
        case HarnessToolCallStarted():
            _session(state, event.session_id).calls[event.call_id] = CallRecord(
                call_id=event.call_id,
                kind="tool",
                identity=event.identity,
                detail={"name": event.tool_name, "arguments": event.arguments},
            )
        case HarnessModelResponded() | HarnessToolCallSucceeded():
            call = _call(state, event.session_id, event.call_id, event, seq)
            call.done, call.ok = True, True
            call.value = (
                event.response if isinstance(event, HarnessModelResponded) else event.result
            )
        case HarnessToolCallFailed():
            call = _call(state, event.session_id, event.call_id, event, seq)
            call.done, call.ok = True, False
            call.error_code, call.message = event.error_code, event.message
        case WaitStarted():
            state.waits[event.step_path] = WaitRecord(
                path=event.step_path,
                step_id=event.step_id,
                kind=event.kind,
                event=event.event,
                wake_at=event.wake_at,
                schema=event.schema_,
                question=event.question,
                since=ts,
            )
        case EventReceived():
            if event.key not in state.received:
                state.received[event.key] = ReceivedEvent(
                    event=event.event,
                    key=event.key,
                    data=event.data,
                    sent_at=event.sent_at,
                    seq=seq,
                )
        case WaitCompleted():
            wait = state.waits.get(event.step_path)
            if wait is None:
                raise CorruptDataError(
                    f"run {state.run_id!r} seq {seq}: WaitCompleted for {event.step_path!r}, "
                    "which no WaitStarted began"
                )
            wait.outcome, wait.key = event.outcome, event.key
            if event.key is not None and event.key in state.received:
                state.received[event.key].consumed_by = event.step_path
        case OuterLoopCycleCompleted():
            if state.outer_loop_result is None:  # the first one is authoritative
                state.outer_loop_result = event.result
        case _:
            pass
    return state


def _session(state: RunState, session_id: str) -> SessionRecord:
    session = state.sessions.get(session_id)
    if session is None:
        session = state.sessions[session_id] = SessionRecord(session_id=session_id, role="step")
    return session


def _call(state: RunState, session_id: str, call_id: str, event: Event, seq: int) -> CallRecord:
    call = _session(state, session_id).calls.get(call_id)
    if call is None:
        raise CorruptDataError(
            f"run {state.run_id!r} seq {seq}: {event.TYPE} for call {call_id!r} "
            f"of session {session_id!r}, which never started"
        )
    if call.done:
        raise CorruptDataError(
            f"run {state.run_id!r} seq {seq}: call {call_id!r} of session "
            f"{session_id!r} finished twice"
        )
    return call


def fold(run_id: str, events: Iterable[RecordedEvent]) -> RunState:
    """The state of ``run_id`` after ``events`` (its whole log, in order)."""
    state = RunState(run_id=run_id)
    for recorded in events:
        apply(state, recorded)
    if state.last_seq == 0:
        raise CorruptDataError(f"run {run_id!r} has no events")
    return state


async def read_state(events: PayloadLog, run_id: str) -> RunState:
    """The folded state of ``run_id``; ``ConfigError`` (``run_not_found``) if it has no log."""
    records = await events.read(run_id)
    if not records:
        raise ConfigError(f"there is no run {run_id!r} in this store", code="run_not_found")
    return fold(run_id, records)


def unfinished_sub_runs(state: RunState) -> list[str]:
    """Sub-runs this run started and has not seen finish: ``workflow`` steps and
    ``start_workflow`` calls in flight."""
    found = [
        record.sub_run_id
        for record in state.steps.values()
        if record.sub_run_id is not None and record.status != "completed"
    ]
    for session in state.sessions.values():
        for call in session.calls.values():
            arguments = call.detail.get("arguments")
            # Only start_workflow's ``subRunId`` is ours: another tool's arguments are the
            # model's, and may name any run (or no valid id at all).
            if (
                not call.done
                and call.kind == "tool"
                and call.detail.get("name") == "start_workflow"
                and isinstance(arguments, dict)
            ):
                sub_run_id = arguments.get("subRunId")
                if isinstance(sub_run_id, str):
                    found.append(sub_run_id)
    return found


def is_code_run(state: RunState) -> bool:
    """Whether ``state`` is a run of a code-first workflow."""
    return state.workflow_version_id.startswith(CODE_VERSION_PREFIX)
