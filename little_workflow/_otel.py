"""The OpenTelemetry side of the tracing seam (``_tracing``): imported only when tracing is on.

One span per pass of a run in a process (``run <workflow>``), and under it one per step
that runs, model call, tool call, wait and sub-run, each current while it runs so the
spans a step's code makes itself nest under it. A unit served from the log made no work
in this pass: it is an event (``little_workflow.step.replayed``) on the pass span, not a
span with a duration it never took; so is a model or tool call that a step running again
gets from the log (``little_workflow.call.replayed``, on that step's span).

A run's first pass records its span's ``traceparent`` on ``RunStarted``; every later pass
(a resume in another process, a worker that took the run over) starts its span as a child
of that recorded context, so a run is one trace however many processes drove it. A
sub-run's pass spans sit under the parent's sub-run span, whether the parent drives it
here or queues it for any worker (``_tracing.queued`` records that span in its
``RunStarted``); a submitted run's, under the span current at the submit (or a
``submit`` span made for it).

Attribute names: ``little_workflow.*`` for the run's own, and OpenTelemetry's GenAI
semantic conventions (``gen_ai.*``) for model and tool calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from little_workflow._tracing import Attributes

if TYPE_CHECKING:
    from little_workflow.harness.models import ModelResponse

__all__ = ["OtelPassTrace", "submitted_context"]

_PROPAGATOR = TraceContextTextMapPropagator()
_SCOPE = "little_workflow"

#: The span kind OpenTelemetry gives each of our kinds (a model call leaves the process).
_KINDS = {"model": trace.SpanKind.CLIENT}


class _Span:
    """A started span, attached as current until ``end``."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: trace.Span) -> None:
        self._span = span
        self._token = otel_context.attach(trace.set_span_in_context(span))

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(attributes)

    def model_answered(self, response: ModelResponse) -> None:
        usage = response.usage
        self._span.set_attributes(
            {
                "gen_ai.response.model": response.model,
                "gen_ai.response.id": response.id,
                "gen_ai.response.finish_reasons": [response.finish_reason],
                "gen_ai.usage.input_tokens": usage.input_tokens,
                "gen_ai.usage.output_tokens": usage.output_tokens,
            }
        )

    def end(self, error: BaseException | None = None) -> None:
        if error is not None:
            _record_error(self._span, error)
        self._span.end()
        otel_context.detach(self._token)


def _record_error(span: trace.Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def _recorded_parent(recorded: str | None) -> otel_context.Context | None:
    """The context a pass starts its span in: the current one, or the recorded run's."""
    if recorded is None:
        return None  # the current context: a new run nests under whatever called it
    parent = _PROPAGATOR.extract({"traceparent": recorded})
    remote = trace.get_current_span(parent).get_span_context()
    current = trace.get_current_span().get_span_context()
    if not remote.is_valid or (current.is_valid and current.trace_id == remote.trace_id):
        # A sub-run resumed by its resumed parent: under the parent's sub-run span.
        return None
    return parent


def submitted_context(provider: trace.TracerProvider, workflow: str, run_id: str) -> str:
    """The ``traceparent`` a queued run's passes continue (``_tracing.queued``)."""
    context = otel_context.get_current()
    if not trace.get_current_span(context).get_span_context().is_valid:
        # Nothing traced around the submit: a span of its own roots the run's trace, so
        # the passes that workers make later are one trace, not one each.
        span = provider.get_tracer(_SCOPE).start_span(
            f"submit {workflow}",
            attributes={
                "little_workflow.run.id": run_id,
                "little_workflow.workflow.name": workflow,
            },
        )
        span.end()
        context = trace.set_span_in_context(span)
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context)
    return carrier["traceparent"]


class OtelPassTrace:
    """``PassTrace`` over an OpenTelemetry tracer provider."""

    def __init__(
        self,
        provider: trace.TracerProvider,
        run_id: str,
        workflow: str | None,
        recorded: str | None,
        *,
        number: int,
    ) -> None:
        self._tracer = provider.get_tracer(_SCOPE)
        self.run_id = run_id
        attributes: dict[str, str | bool | int] = {
            "little_workflow.run.id": run_id,
            "little_workflow.run.pass": number,
            "little_workflow.run.resumed": number > 1,
        }
        if workflow is not None:
            attributes["little_workflow.workflow.name"] = workflow
        self._span = self._tracer.start_span(
            f"run {workflow or run_id}",
            context=_recorded_parent(recorded),
            attributes=attributes,
        )
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, trace.set_span_in_context(self._span))
        self._context = recorded or carrier["traceparent"]

    @property
    def context(self) -> str:
        return self._context

    def named(self, workflow: str) -> None:
        self._span.update_name(f"run {workflow}")
        self._span.set_attribute("little_workflow.workflow.name", workflow)

    def enter(self) -> None:
        # In the walk's own task, whose context dies with it: nothing to detach.
        otel_context.attach(trace.set_span_in_context(self._span))

    def span(self, kind: str, path: str, attributes: Attributes | None = None) -> _Span:
        span = self._tracer.start_span(
            f"{kind} {path}",
            kind=_KINDS.get(kind, trace.SpanKind.INTERNAL),
            attributes={
                "little_workflow.run.id": self.run_id,
                "little_workflow.step.path": path,
                "little_workflow.span.kind": kind,
                **(attributes or {}),
            },
        )
        return _Span(span)

    def replayed(self, path: str) -> None:
        self._span.add_event(
            "little_workflow.step.replayed",
            {"little_workflow.step.path": path, "little_workflow.step.replayed": True},
        )

    def call_replayed(self, path: str) -> None:
        # The harness's paths are the step's own ("agent.turns[0].model"): on the step's
        # span they say which step's call it was.
        trace.get_current_span().add_event(
            "little_workflow.call.replayed",
            {"little_workflow.call.path": path, "little_workflow.step.replayed": True},
        )

    def end(self, status: str, error: BaseException | None = None) -> None:
        self._span.set_attribute("little_workflow.run.status", status)
        if error is not None:
            _record_error(self._span, error)
        self._span.end()
