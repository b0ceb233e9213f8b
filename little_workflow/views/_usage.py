"""Tokens and cost of a run: per run, per step, per model slot, and what a resume saved.

Every model call leaves two events in its run's log: ``harness.model.called`` before the
call and ``harness.model.responded`` (its ``ModelResponse``, with the ``Usage`` the
provider reported) once the answer is committed. ``usage_report`` folds those events,
and nothing else, into a ``UsageReport``; ``UsageFold`` is the same fold kept open, so a
reader that has folded a log once adds only the events appended since.

**Passes.** A run's log is cut into passes at each ``RunResumed``: pass 1 is the process
that started it, pass 2 the first process that picked it up again, and so on. A
response belongs to the pass whose process committed it, and that pass **paid** for it.

**Replayed.** A pass after the first continues from the log: every response committed
before its ``RunResumed`` is, for that pass, an answer it had without calling the model
(replayed into a session's conversation, or folded in a completed step's output). So a
pass's ``replayed`` is the usage of all responses committed in the passes before it, and
the run's ``replayed`` is the sum over its passes: what a program without a durable log
would have paid again, once per restart, to get back where each restart began. It is
read from the log alone; it counts a response as saved even where the later pass would
not have needed it (a failed step that a retry starts afresh).

**Interrupted.** A call whose ``called`` pass ended before its answer was committed (a
kill, a crash): the provider may have been paid for an answer the log never got, and the
log cannot say how many tokens that was, so the report counts such calls, once each, in
the pass that began them (a later pass makes the call again without a new ``called``
event; if it is cut off too, the log cannot tell). A call without an answer in the
latest pass of an unfinished run may still be in flight: it is counted ``open``.

**Forks.** A forked run's log starts with events copied from its source, appended with
its ``RunStarted`` in one batch (the same timestamp). Their responses were paid by the
source run: they count as ``copied``, and as replayed for pass 1, never as paid.

**Cost.** Only through a ``PriceTable`` the user supplies (no prices ship with the
library: a guessed price is worse than none). A call whose model is not in the table
has its tokens counted and its cost unknown, and so does every total that includes it.

Rejected: counting from the runtime's in-process tally (``runtime._tally``): it is lost
with the process, so a resumed run could not say what its first pass paid.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from little_workflow.codec import JsonValue
from little_workflow.events import (
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessSessionStarted,
    RecordedEvent,
    RunResumed,
    RunStarted,
    RunStatus,
)
from little_workflow.harness.models import Usage

__all__ = [
    "CallUsage",
    "ModelPrice",
    "PassUsage",
    "PriceTable",
    "UsageFold",
    "UsageReport",
    "UsageTotals",
    "usage_report",
]

_MILLION = 1_000_000


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelPrice:
    """What a model costs, in currency units (say USD) per million tokens.

    ``cached_input`` and ``cache_write`` default to ``input``: a provider that reports
    cache reads or writes but whose price the table does not say is charged the plain
    input price for them, which the user can see and correct.
    """

    input: float
    output: float
    cached_input: float | None = None
    cache_write: float | None = None

    def cost(self, usage: Usage) -> float:
        """The cost of ``usage``: cached and cache-written input at their own prices.

        ``Usage.input_tokens`` counts the cached and cache-written tokens too, so only the
        rest is charged the plain input price.
        """
        cached = usage.cached_input_tokens
        written = usage.cache_write_tokens
        plain = max(usage.input_tokens - cached - written, 0)
        cached_price = self.input if self.cached_input is None else self.cached_input
        write_price = self.input if self.cache_write is None else self.cache_write
        return (
            plain * self.input
            + cached * cached_price
            + written * write_price
            + usage.output_tokens * self.output
        ) / _MILLION


#: Model id (as the slot names it, ``ModelSlot.model``) -> its price.
PriceTable = Mapping[str, ModelPrice]


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageTotals:
    """Calls and tokens added up, and their cost if every call's model has a price."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    #: ``None``: unknown, because a call's model is not in the price table (or there is
    #: no table); 0.0 for no calls.
    cost: float | None = 0.0
    #: Calls whose model the price table does not have.
    unpriced_calls: int = 0

    @classmethod
    def of(cls, usage: Usage, cost: float | None) -> UsageTotals:
        """One call's totals."""
        return cls(
            calls=1,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            reasoning_tokens=usage.reasoning_tokens,
            cost=cost,
            unpriced_calls=int(cost is None),
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens (cached and reasoning ones are parts of those)."""
        return self.input_tokens + self.output_tokens

    def __add__(self, other: UsageTotals) -> UsageTotals:
        return UsageTotals(
            calls=self.calls + other.calls,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            cost=None if self.cost is None or other.cost is None else self.cost + other.cost,
            unpriced_calls=self.unpriced_calls + other.unpriced_calls,
        )

    def to_json(self) -> dict[str, Any]:
        """camelCase, with ``totalTokens``; ``cost`` ``null`` when unknown."""
        return {
            "calls": self.calls,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "cachedInputTokens": self.cached_input_tokens,
            "cacheWriteTokens": self.cache_write_tokens,
            "reasoningTokens": self.reasoning_tokens,
            "totalTokens": self.total_tokens,
            "cost": self.cost,
            "unpricedCalls": self.unpriced_calls,
        }


def _total(items: Iterable[UsageTotals]) -> UsageTotals:
    # One pass, one object: a runs list adds up every listed run's calls.
    calls = input_tokens = output_tokens = cached = written = reasoning = unpriced = 0
    cost: float | None = 0.0
    for item in items:
        calls += item.calls
        input_tokens += item.input_tokens
        output_tokens += item.output_tokens
        cached += item.cached_input_tokens
        written += item.cache_write_tokens
        reasoning += item.reasoning_tokens
        unpriced += item.unpriced_calls
        cost = None if cost is None or item.cost is None else cost + item.cost
    return UsageTotals(
        calls=calls,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cached_input_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=reasoning,
        cost=cost,
        unpriced_calls=unpriced,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class CallUsage:
    """One model call of a run, as its two events tell it."""

    session_id: str
    call_id: str
    #: The step whose session made the call (the session id where the log names none).
    step_path: str
    slot: str
    #: The slot's model as the session's manifest records it, else the response's.
    model: str | None
    #: The pass that made the call (``harness.model.called``); 0 for a fork's copy.
    called_in: int
    #: The pass that committed its answer, ``None`` if none did.
    responded_in: int | None
    called_at: float
    responded_at: float | None
    #: ``responded``, ``interrupted`` (no answer, and its pass ended) or ``open`` (no
    #: answer yet; it may be in flight now).
    status: Literal["responded", "interrupted", "open"]
    #: Tokens as the provider reported them; zero while there is no answer.
    usage: Usage
    cost: float | None

    @property
    def cut_off(self) -> bool:
        """Whether the pass that began the call ended without its answer."""
        return self.status == "interrupted" or (
            self.responded_in is not None and self.responded_in != self.called_in
        )

    @property
    def latency(self) -> float | None:
        """Seconds from ``called`` to ``responded``, when one process did both."""
        if self.responded_at is None or self.responded_in != self.called_in:
            return None
        return max(self.responded_at - self.called_at, 0.0)

    def to_json(self) -> dict[str, Any]:
        """camelCase: the call's ids, pass, status, latency, tokens and cost."""
        return {
            "sessionId": self.session_id,
            "callId": self.call_id,
            "stepPath": self.step_path,
            "slot": self.slot,
            "model": self.model,
            "calledIn": self.called_in,
            "respondedIn": self.responded_in,
            "status": self.status,
            "cutOff": self.cut_off,
            "latency": self.latency,
            "usage": UsageTotals.of(self.usage, self.cost).to_json()
            if self.responded_in is not None
            else None,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class PassUsage:
    """One pass of a run: the process that started it, or one that picked it up again."""

    #: 1 for the first; 0 for a fork's copied events.
    number: int
    #: ``start``, ``copied``, or the ``RunResumed`` reason (``resume``, ``retry``).
    reason: str
    started_at: float
    #: Answers this pass committed.
    paid: UsageTotals
    #: Answers committed before this pass began, which it had from the log.
    replayed: UsageTotals
    #: Calls this pass began and never got an answer to.
    interrupted: int

    def to_json(self) -> dict[str, Any]:
        """camelCase."""
        return {
            "number": self.number,
            "reason": self.reason,
            "startedAt": self.started_at,
            "paid": self.paid.to_json(),
            "replayed": self.replayed.to_json(),
            "interrupted": self.interrupted,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class UsageReport:
    """A run's model usage; ``sub_runs`` hold its sub-runs' reports, each on its own."""

    run_id: str
    #: What this run's own processes paid (its sub-runs not included).
    paid: UsageTotals
    #: See the module docstring: answers a later pass had from the log.
    replayed: UsageTotals
    #: A fork's answers copied from its source run (paid there).
    copied: UsageTotals
    interrupted: int
    open: int
    by_step: Mapping[str, UsageTotals]
    by_slot: Mapping[str, UsageTotals]
    by_model: Mapping[str, UsageTotals]
    passes: tuple[PassUsage, ...]
    calls: tuple[CallUsage, ...]
    sub_runs: tuple[UsageReport, ...] = ()

    @property
    def total_paid(self) -> UsageTotals:
        """This run's paid usage plus every sub-run's, to any depth."""
        return _total([self.paid, *(sub.total_paid for sub in self.sub_runs)])

    @property
    def total_replayed(self) -> UsageTotals:
        """This run's replayed usage plus every sub-run's, to any depth."""
        return _total([self.replayed, *(sub.total_replayed for sub in self.sub_runs)])

    def with_sub_runs(self, sub_runs: Sequence[UsageReport]) -> UsageReport:
        """This report with ``sub_runs`` attached."""
        return UsageReport(
            run_id=self.run_id,
            paid=self.paid,
            replayed=self.replayed,
            copied=self.copied,
            interrupted=self.interrupted,
            open=self.open,
            by_step=self.by_step,
            by_slot=self.by_slot,
            by_model=self.by_model,
            passes=self.passes,
            calls=self.calls,
            sub_runs=tuple(sub_runs),
        )

    def to_json(self) -> dict[str, Any]:
        """camelCase: what ``show --json`` prints as ``usage``."""
        return {
            "runId": self.run_id,
            "paid": self.paid.to_json(),
            "replayed": self.replayed.to_json(),
            "copied": self.copied.to_json(),
            "interrupted": self.interrupted,
            "open": self.open,
            "totalPaid": self.total_paid.to_json(),
            "totalReplayed": self.total_replayed.to_json(),
            "bySlot": {name: item.to_json() for name, item in self.by_slot.items()},
            "byModel": {name: item.to_json() for name, item in self.by_model.items()},
            "byStep": {name: item.to_json() for name, item in self.by_step.items()},
            "passes": [item.to_json() for item in self.passes],
            "calls": [call.to_json() for call in self.calls],
            "subRuns": [sub.to_json() for sub in self.sub_runs],
        }


@dataclass(slots=True)
class _Call:
    session_id: str
    call_id: str
    slot: str
    called_in: int
    called_at: float
    responded_in: int | None = None
    responded_at: float | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None


@dataclass(slots=True)
class _Session:
    step_path: str | None
    model: str | None


def _usage_of(response: JsonValue) -> tuple[Usage, str | None]:
    """The usage and model a stored ``ModelResponse`` reports (zeros if it says none)."""
    if not isinstance(response, dict):
        return Usage(), None
    model = response.get("model")
    try:
        usage = Usage.model_validate(response.get("usage") or {})
    except ValidationError:
        usage = Usage()
    return usage, model if isinstance(model, str) else None


def _manifest_model(manifest: Mapping[str, JsonValue], role: str) -> str | None:
    model = manifest.get(f"{role}ModelSlotId")
    return model if isinstance(model, str) else None


#: The event types ``UsageFold.add`` reads beside the lifecycle ones.
_FOLDED = frozenset({HarnessSessionStarted, HarnessModelCalled, HarnessModelResponded})


class UsageFold:
    """The usage fold kept open: ``add`` each event in log order, ``report`` any time.

    Model responses must be resolved values (``PayloadLog.read``), not blob references.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.last_seq = 0
        self._pass = 1
        self._passes: list[tuple[int, str, float]] = []
        self._fork_ts: float | None = None
        self._finished = False
        self._sessions: dict[str, _Session] = {}
        self._calls: dict[tuple[str, str], _Call] = {}

    def add(self, record: RecordedEvent) -> None:
        """Fold one event (any type; the ones usage does not need are skipped)."""
        self.last_seq = record.seq
        event = record.event
        if event.RUN_STATUS is None and type(event) not in _FOLDED:
            return  # a step's events, most of a long run: one test, not five
        match event:
            case RunStarted():
                self._passes.append((1, "start", record.ts))
                if event.forked_from is not None:
                    self._fork_ts = record.ts
            case RunResumed():
                self._pass += 1
                self._passes.append((self._pass, event.reason, record.ts))
                self._finished = False
            case HarnessSessionStarted():
                self._sessions[event.session_id] = _Session(
                    event.step_path, _manifest_model(event.manifest, event.role)
                )
            case HarnessModelCalled():
                key = (event.session_id, event.call_id)
                self._calls[key] = _Call(
                    session_id=event.session_id,
                    call_id=event.call_id,
                    slot=event.slot,
                    called_in=self._pass_of(record),
                    called_at=record.ts,
                )
            case HarnessModelResponded():
                call = self._calls.get((event.session_id, event.call_id))
                if call is None:  # the fold of the run state reports such a log
                    return
                call.responded_in = self._pass_of(record)
                call.responded_at = record.ts
                call.usage, call.model = _usage_of(event.response)
            case _:
                if event.RUN_STATUS in (
                    RunStatus.COMPLETED,
                    RunStatus.FAILED,
                    RunStatus.CANCELLED,
                ):
                    self._finished = True

    def _pass_of(self, record: RecordedEvent) -> int:
        return 0 if self._fork_ts is not None and record.ts == self._fork_ts else self._pass

    def report(self, prices: PriceTable | None = None) -> UsageReport:
        """The report of the events added so far, costed with ``prices``."""
        calls: list[CallUsage] = []
        for call in self._calls.values():
            session = self._sessions.get(call.session_id)
            model = (session.model if session is not None else None) or call.model
            price = None if prices is None or model is None else prices.get(model)
            answered = call.responded_in is not None
            status: Literal["responded", "interrupted", "open"] = (
                "responded"
                if answered
                else "open"
                if self._may_be_in_flight(call)
                else "interrupted"
            )
            calls.append(
                CallUsage(
                    session_id=call.session_id,
                    call_id=call.call_id,
                    step_path=(session.step_path if session is not None else None)
                    or call.session_id,
                    slot=call.slot,
                    model=model,
                    called_in=call.called_in,
                    responded_in=call.responded_in,
                    called_at=call.called_at,
                    responded_at=call.responded_at,
                    status=status,
                    usage=call.usage,
                    cost=None if price is None else price.cost(call.usage),
                )
            )
        return _report(self.run_id, calls, self._passes)

    def _may_be_in_flight(self, call: _Call) -> bool:
        return not self._finished and call.called_in == self._pass


def _report(
    run_id: str,
    calls: Sequence[CallUsage],
    passes: Sequence[tuple[int, str, float]],
) -> UsageReport:
    cut: dict[int, int] = {}
    for call in calls:
        if call.cut_off:
            cut[call.called_in] = cut.get(call.called_in, 0) + 1
    answered = [call for call in calls if call.responded_in is not None]
    by_pass: dict[int, list[UsageTotals]] = {}
    by_step: dict[str, list[UsageTotals]] = {}
    by_slot: dict[str, list[UsageTotals]] = {}
    by_model: dict[str, list[UsageTotals]] = {}
    for call in answered:
        totals = UsageTotals.of(call.usage, call.cost)
        assert call.responded_in is not None
        by_pass.setdefault(call.responded_in, []).append(totals)
        if call.responded_in == 0:
            continue  # a fork's copy: paid by its source run
        by_step.setdefault(call.step_path, []).append(totals)
        by_slot.setdefault(call.slot, []).append(totals)
        by_model.setdefault(call.model or "(unknown)", []).append(totals)
    copied = _total(by_pass.get(0, []))
    carried = copied
    pass_rows: list[PassUsage] = []
    replayed = UsageTotals()
    for number, reason, started_at in passes:
        paid = _total(by_pass.get(number, []))
        pass_rows.append(
            PassUsage(
                number=number,
                reason=reason,
                started_at=started_at,
                paid=paid,
                replayed=carried,
                interrupted=cut.get(number, 0),
            )
        )
        replayed = replayed + carried
        carried = carried + paid
    paid_total = _total(item for number, items in by_pass.items() if number != 0 for item in items)

    def summed(groups: Mapping[str, list[UsageTotals]]) -> dict[str, UsageTotals]:
        return {name: _total(items) for name, items in groups.items()}

    return UsageReport(
        run_id=run_id,
        paid=paid_total,
        replayed=replayed,
        copied=copied,
        interrupted=sum(cut.values()),
        open=sum(1 for call in calls if call.status == "open"),
        by_step=summed(by_step),
        by_slot=summed(by_slot),
        by_model=summed(by_model),
        passes=tuple(pass_rows),
        calls=tuple(calls),
    )


def usage_report(
    events: Iterable[RecordedEvent],
    *,
    prices: PriceTable | None = None,
    sub_runs: Sequence[UsageReport] = (),
) -> UsageReport:
    """The usage of one run's log (resolved events, in order), with its sub-runs' reports.

    A pure function of the events: the same log gives the same report in every process.
    """
    records = list(events)
    fold = UsageFold(records[0].run_id if records else "")
    for record in records:
        fold.add(record)
    return fold.report(prices).with_sub_runs(sub_runs)
