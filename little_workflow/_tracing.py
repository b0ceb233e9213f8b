"""The tracing seam: what the durable core and the harness tell a tracer, and when.

The core never imports OpenTelemetry. Each pass of a run asks ``pass_trace`` for a
``PassTrace`` once; it is ``None`` (and every later check one attribute test) unless
``opentelemetry.trace`` is already imported by the application **and** a real tracer
provider is set (not the API's default proxy or no-op one). Only then is
``little_workflow._otel`` imported, which holds the OpenTelemetry implementation. So an
application without the ``otel`` extra, or with it but without a configured provider,
imports nothing and pays one dictionary lookup per pass.

Rejected: a ``Runtime(tracing=True)`` switch (a second thing to configure, when setting a
tracer provider already says "I want traces"; and sub-runs queued to a worker would need
it threaded through every process); a null-object tracer called on every step (a call per
step costs about 1% of a durable step, measured with ``bench.instructions``; an ``is None``
test costs nothing measurable).

The current pass's trace travels in ``TRACE`` (set in the walk's task, as ``DELTA_ROUTE``
is), so the one place that calls a model and the one that calls a tool need no new
parameter; the spans themselves nest through OpenTelemetry's own context, which asyncio
copies into every task a walk starts.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from little_workflow._failures import RunParked

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from little_workflow.events import RunStarted
    from little_workflow.harness._slots import ModelSlot
    from little_workflow.harness.models import ModelResponse
    from little_workflow.runtime._state import RunState

__all__ = [
    "TRACE",
    "Attributes",
    "PassTrace",
    "SpanHandle",
    "end_pass",
    "enter_pass",
    "model_attributes",
    "pass_trace",
    "queued",
    "step_span",
    "sub_run_attributes",
    "tool_attributes",
    "traced",
]

#: Span attribute values, as OpenTelemetry takes them.
Attributes = Mapping[str, str | int | float | bool | Sequence[str]]


class SpanHandle(Protocol):
    """A started span, current in the task that started it until ``end``."""

    def set(self, attributes: Attributes) -> None:
        """Add attributes (learnt while the span ran)."""
        ...

    def model_answered(self, response: ModelResponse) -> None:
        """Record a model answer: model, token usage and finish reason (GenAI conventions)."""
        ...

    def end(self, error: BaseException | None = None) -> None:
        """End the span (with an error status if ``error``) and stop it being current."""
        ...


class PassTrace(Protocol):
    """The spans of one pass of one run in this process (``DurableRun.trace``)."""

    @property
    def context(self) -> str:
        """The W3C ``traceparent`` recorded on a new run's ``RunStarted`` (this pass's span)."""
        ...

    def named(self, workflow: str) -> None:
        """Name the pass span after the workflow (a new run learns it after the pass began)."""
        ...

    def enter(self) -> None:
        """Make the pass span current in the calling task (the walk's own)."""
        ...

    def span(self, kind: str, path: str, attributes: Attributes | None = None) -> SpanHandle:
        """Start a ``kind`` span (step, model, tool, wait, sub_run) at ``path``, current."""
        ...

    def replayed(self, path: str) -> None:
        """A unit at ``path`` was served from the log: marked, not timed."""
        ...

    def call_replayed(self, path: str) -> None:
        """A model or tool call (a harness unit at ``path``) of a step that runs again was
        served from the log: marked on the current span (the step's), not timed."""
        ...

    def end(self, status: str, error: BaseException | None = None) -> None:
        """End the pass span with how the pass ended (the run's status)."""
        ...


#: The current pass's trace; ``None`` when tracing is off or outside a run.
TRACE: contextvars.ContextVar[PassTrace | None] = contextvars.ContextVar(
    "little_workflow_trace", default=None
)


def _provider() -> TracerProvider | None:
    """The application's tracer provider, or ``None`` when tracing is off (see above)."""
    api = sys.modules.get("opentelemetry.trace")
    if api is None:
        return None
    provider: TracerProvider = api.get_tracer_provider()
    if isinstance(provider, api.ProxyTracerProvider | api.NoOpTracerProvider):
        return None
    return provider


def pass_trace(state: RunState) -> PassTrace | None:
    """The trace of a new pass over ``state``, or ``None`` when tracing is off.

    ``state.trace_context`` is the ``traceparent`` its ``RunStarted`` recorded, if any:
    the pass joins that trace (under the current span when that is in the same trace: a
    sub-run resumed by its resumed parent).
    """
    provider = _provider()
    if provider is None:
        return None
    from little_workflow._otel import OtelPassTrace

    number = state.resumes + 2 if state.last_seq else 1
    workflow = state.workflow_name or None
    return OtelPassTrace(provider, state.run_id, workflow, state.trace_context, number=number)


def queued(started: RunStarted, run_id: str) -> RunStarted:
    """``started``, for a run that a worker (maybe in another process) will drive, with
    the trace its passes join recorded: the current span's (a parent's sub-run span, the
    submitting request's), else a ``submit`` span's made here; unchanged when tracing is off.
    """
    provider = _provider()
    if provider is None:
        return started
    from little_workflow._otel import submitted_context

    context = submitted_context(provider, started.workflow_name, run_id)
    return started.model_copy(update={"trace_context": context})


@contextlib.contextmanager
def traced(
    trace: PassTrace | None, kind: str, path: str, attributes: Attributes | None = None
) -> Iterator[SpanHandle | None]:
    """A ``kind`` span around the block when ``trace`` is on (``None`` inside when off).

    A run that parks (it waits for an event, an answer or a timer) did not fail: its span
    ends marked ``little_workflow.waiting`` instead of with an error.
    """
    if trace is None:
        yield None
        return
    span = trace.span(kind, path, attributes)
    try:
        yield span
    except RunParked:
        span.set({"little_workflow.waiting": True})
        span.end()
        raise
    except BaseException as exc:
        span.end(exc)
        raise
    span.end()


def sub_run_attributes(sub_run_id: str, workflow: str) -> Attributes:
    """The attributes of a sub-run's span in its parent's trace."""
    return {"little_workflow.sub_run.id": sub_run_id, "little_workflow.workflow.name": workflow}


def model_attributes(slot: ModelSlot) -> Attributes:
    """A model call's request attributes, in the GenAI semantic conventions."""
    # The provider's ``kind`` is the conventions' well-known name (openai, anthropic).
    provider = slot.provider.kind
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        # The attribute's name before the conventions renamed it, for older backends.
        "gen_ai.system": provider,
        "gen_ai.request.model": slot.model,
    }


def tool_attributes(name: str, tool_call_id: str | None) -> Attributes:
    """A tool call's attributes, in the GenAI semantic conventions."""
    attributes: dict[str, str] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if tool_call_id is not None:
        attributes["gen_ai.tool.call.id"] = tool_call_id
    return attributes


def step_span(trace: PassTrace, path: str, kind: str, step_id: str) -> SpanHandle:
    """The span of a step that runs (its attempts), current until it ends."""
    return trace.span(
        "step", path, {"little_workflow.step.kind": kind, "little_workflow.step.id": step_id}
    )


def end_pass(trace: PassTrace, state: RunState, error: BaseException | None) -> None:
    """End a pass's span: ``waiting`` if it parked, ``interrupted`` if cut short."""
    if isinstance(error, RunParked):
        trace.end("waiting")
    elif error is not None and not state.finished:
        trace.end("interrupted", error)
    else:
        trace.end(str(state.status), error if isinstance(error, Exception) else None)


def enter_pass(trace: PassTrace) -> None:
    """In a walk's own task: its model and tool calls, and its spans, belong to ``trace``."""
    TRACE.set(trace)
    trace.enter()
