"""``DurableRun``: the durable core of one run, whatever front end decides its steps.

A front end (the LWIR walk, ``_lwir_walk``; a code-first workflow) decides which step
comes next; the core makes each one durable. A step is a **unit**: a small immutable
``StepUnit`` (where it runs, its kind, step id, identity, retry policy, optional
side-effect outbox and ``on_give_up`` handler) and an async ``call(attempt, arguments)``.
The core owns the run's state and writer, the memo of completed paths, the visit check,
attempts under the retry policy, the outbox and its reconcile, the commit of
``StepCompleted``, the start of sub-runs, and the end of the run (``RunCompleted``,
``RunFailed``, or ``RunCancelled`` through the cancel watch).

Events per unit, and why they are written as they are:

* ``StepAttemptStarted`` (not fsynced): an attempt began. Attempts are counted across
  crashes so a retry policy survives them; fsyncing it would double a step's cost for no
  gain, since the completion commit's fsync makes it durable too (WAL order).
* ``StepCompleted`` in one fsynced commit (with the held ``StepAttemptStarted``): the
  durability unit. A crash before it runs the unit again; after it, never.
* ``StepAttemptFailed`` / ``StepFailed`` + ``RunFailed``: failures, with stable causes.

Memoization by path is this one code path for Layer A: ``recorded`` answers a path the
log completed, ``remember`` records a new one once its ``StepCompleted`` is committed.
Layer C sessions and the ledger use ``durable.run_unit`` over the same ``MemoTable``;
Layer A through ``run_unit`` (a ``Recorder`` over this memo, a ``Unit`` and its
``replace`` per step) measured 739,905 instructions per step against 685,247 this way
(``bench.instructions --step async``): 8% more, over the 5% a step may cost.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NoReturn, Protocol

from little_workflow._deltas import DELTA_ROUTE, DeltaRoute
from little_workflow._failures import RunParked, error_message, error_names, is_interruption
from little_workflow._secrets import FAMILY_SECRETS
from little_workflow._tracing import end_pass, enter_pass, pass_trace, step_span
from little_workflow.codec import JsonValue, check_json_value, dumps, to_json_value
from little_workflow.durable import MemoEntry, MemoTable
from little_workflow.durable._side_effects import SideEffect
from little_workflow.errors import (
    CapabilityDriftError,
    ConfigError,
    CorruptDataError,
    InvalidValueError,
    MemoMismatchError,
    PayloadTooLargeError,
    PlannerError,
    RunFailedError,
)
from little_workflow.events import (
    Event,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStatus,
    SideEffectIntended,
    SideEffectReconciled,
    StepAttemptFailed,
    StepAttemptStarted,
    StepCompleted,
    StepFailed,
    SubRunStarted,
)
from little_workflow.ids import new_id
from little_workflow.lwir import RetryPolicy, StepPath
from little_workflow.runtime._cancel import cancel_key, read_request, watch
from little_workflow.runtime._functions import StepContext
from little_workflow.runtime._host import CoreHost
from little_workflow.runtime._state import RunState, scope_key
from little_workflow.runtime._writer import RunWriter

__all__ = [
    "Arguments",
    "DurableRun",
    "Frontier",
    "GiveUpHandler",
    "Outbox",
    "Site",
    "StepFailure",
    "StepUnit",
    "first_failure",
]

#: A unit's arguments (a step's rendered ``with``), or ``None`` for one without them.
Arguments = dict[str, JsonValue] | None


@dataclass(frozen=True, slots=True)
class Site:
    """Where a unit runs: its path (parsed and as text), visit and identity.

    The identity is what the unit is (an LWIR step's definition hash, a code-first
    step's function name): a recorded path whose identity differs is not this unit's.
    """

    path: StepPath
    text: str
    visit: int | None
    identity: str


@dataclass(frozen=True, slots=True)
class Outbox:
    """A side-effecting unit's key, and its callable's declaration (hook) if any."""

    key: str
    declared: SideEffect | None


class GiveUpHandler(Protocol):
    """Consulted when a unit failed for good (the LWIR fixer): may ask for another attempt."""

    def corrected(self, state: RunState, site: Site, arguments: Arguments) -> Arguments:
        """The arguments of the next attempt: the last recorded correction, or ``arguments``."""
        ...

    def may_consult(self, state: RunState, site: Site) -> bool:
        """Whether another consultation is allowed (the fixer's ``maxFixes``)."""
        ...

    async def consult(
        self, site: Site, arguments: Arguments, error_code: str, message: str
    ) -> bool:
        """Decide (durably) after a failure; ``True`` runs one more attempt."""
        ...


class StepUnit(NamedTuple):
    """A unit of a run: what the core needs to run it durably, and nothing of LWIR.

    An immutable value like a frozen dataclass, but built in a third of the time: one
    is built for every step a run executes.
    """

    site: Site
    kind: str
    step_id: str
    retry: RetryPolicy
    outbox: Outbox | None = None
    on_give_up: GiveUpHandler | None = None


class StepFailure(Exception):
    """A unit failed for good; the run fails with ``cause``."""

    def __init__(self, cause: str, message: str, *, path: str, step_id: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message
        self.path = path
        self.step_id = step_id


class Frontier(Exception):
    """Replay reached a unit the log has not completed."""


def _no_events(attempt: int, arguments: Arguments) -> list[Event]:
    return []


def _no_failure_events(attempt: int, exc: BaseException) -> list[Event]:
    return []


class DurableRun:
    """One pass of one run in this process: its state, writer and memo of completed paths."""

    def __init__(
        self, host: CoreHost, state: RunState, *, pinned: bool = True, retrying: bool = False
    ) -> None:
        self.host = host
        self.state = state
        self.run_id = state.run_id
        #: Whether every recorded unit was made by the definitions this pass runs (the
        #: recorded definition hash is the version's): a hit then needs no identity check.
        self.pinned = pinned
        #: A ``retry`` of a failed run: sub-runs that failed are retried too.
        self.retrying = retrying
        self.executed = 0
        self.replayed = 0
        #: The recorded units this pass replayed, in walk order.
        self.replayed_paths: list[str] = []
        #: Every path the front end reached in this pass.
        self.visited: set[str] = set()
        self.writer = RunWriter(host.events, state, crash=host.crash)
        self.trace = pass_trace(state)  # this pass's spans; None when tracing is off
        self.memo = MemoTable(scope=f"run {self.run_id!r}", on_mismatch="error")
        for path, record in state.steps.items():
            if record.status == "completed":
                self.memo.record(
                    path, record.identity or "", {"output": record.output, "route": record.route}
                )

    # --- committing -------------------------------------------------------------------

    async def append(self, events: Sequence[Event], *, sync: bool) -> None:
        """Append ``events`` to this run (see ``RunWriter``): durably, or write-behind."""
        await self.writer.append(events, sync=sync)

    # --- the run ----------------------------------------------------------------------

    async def execute(self, body: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        """Run ``body`` (a front end's walk) to its end; commit how the run ended.

        ``RunCompleted`` with its output, ``RunFailed`` for a ``StepFailure``, or
        ``RunCancelled``: the body runs in its own task, watched for a cancellation
        request (see ``_cancel``), and on one it is cancelled.
        """
        kv = self.host.kv
        walk = asyncio.get_running_loop().create_task(self._finish(body), name=f"run {self.run_id}")
        try:
            async with watch(kv, self.run_id, walk) as seen:
                try:
                    return await asyncio.shield(walk)
                except asyncio.CancelledError:
                    if not walk.done():
                        # This task was cancelled from outside (a parent run's walk, or the
                        # caller): the walk goes with it.
                        walk.cancel()
                        with contextlib.suppress(Exception, asyncio.CancelledError):
                            await walk
                    request = seen[0] if seen else await read_request(kv, self.run_id)
                    if request is None:
                        raise
            if self.state.status is RunStatus.COMPLETED:
                # The cancellation came as the final commit was landing: too late.
                await kv.delete(cancel_key(self.run_id))
                return self.state.output
            if not self.state.finished:
                await self.append([RunCancelled(reason=request.reason)], sync=True)
            await kv.delete(cancel_key(self.run_id))
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # A parent's walk is being cancelled too: it records its own
                # cancellation, not a failed step.
                raise asyncio.CancelledError
            raise RunFailedError(
                f"run {self.run_id!r} was cancelled"
                + (f": {request.reason}" if request.reason else ""),
                cause_code="cancelled",
                run_id=self.run_id,
            )
        finally:
            self.writer.discard()
            self.host.delta_hub.ended(self.run_id)
            if self.trace is not None:
                end_pass(self.trace, self.state, sys.exc_info()[1])

    async def _finish(self, body: Callable[[], Awaitable[JsonValue]]) -> JsonValue:
        # In the walk's own task: the sub-runs it starts share this run's secrets, and
        # their model calls stream to this run's watchers too.
        FAMILY_SECRETS.set(self.writer.secrets)
        parent = DELTA_ROUTE.get()
        DELTA_ROUTE.set(
            parent.child(self.run_id)
            if parent is not None and parent.hub is self.host.delta_hub
            else DeltaRoute(self.host.delta_hub, (self.run_id,))
        )
        if self.trace is not None:
            enter_pass(self.trace)
        try:
            output = await body()
        except StepFailure as failure:
            await self.fail(failure)
        return await self.complete(output)

    async def fail(self, failure: StepFailure) -> NoReturn:
        """Commit ``StepFailed`` (once) and ``RunFailed``; raise ``RunFailedError``."""
        events: list[Event] = []
        record = self.state.steps.get(failure.path)
        if record is not None and record.status != "failed":
            events.append(
                StepFailed(
                    step_path=failure.path,
                    step_id=failure.step_id,
                    cause_code=failure.cause,
                    message=failure.message,
                )
            )
        events.append(
            RunFailed(cause_code=failure.cause, message=failure.message, step_path=failure.path)
        )
        await self.append(events, sync=True)
        raise RunFailedError(
            f"run {self.run_id!r} failed: {failure.message}",
            cause_code=failure.cause,
            run_id=self.run_id,
        ) from failure.__cause__

    async def complete(self, output: JsonValue) -> JsonValue:
        """Commit ``RunCompleted`` with ``output`` (``RunFailed`` if it is not JSON)."""
        try:
            check_json_value(output, where=f"output of run {self.run_id!r}")
        except InvalidValueError as exc:
            await self.append([RunFailed(cause_code="invalid_output", message=str(exc))], sync=True)
            raise RunFailedError(str(exc), cause_code="invalid_output", run_id=self.run_id) from exc
        await self.append([RunCompleted(output=output)], sync=True)
        return output

    # --- units ------------------------------------------------------------------------

    def recorded(self, path: str, identity: str | Callable[[], str]) -> MemoEntry | None:
        """The memo's entry for ``path`` if a unit completed there (and this pass reached it).

        ``identity`` may be a callable: a pinned run (see ``pinned``) never computes it.
        An entry whose identity differs raises ``MemoMismatchError``.
        """
        self.visited.add(path)
        if self.pinned:
            # Every recorded unit was made by the same definition: hashing it again
            # proves nothing.
            return self.memo.peek(path)
        return self.memo.lookup(path, identity if isinstance(identity, str) else identity())

    def replay(self, path: str, hit: MemoEntry) -> tuple[JsonValue, str | None]:
        """A hit's recorded output and route, counted as replayed."""
        self.replayed += 1
        self.replayed_paths.append(path)
        if self.trace is not None:
            self.trace.replayed(path)
        value = hit.value
        assert isinstance(value, dict)
        route = value.get("route")
        return value.get("output"), (route if isinstance(route, str) else None)

    def check_visit(self, step_id: str, path: str, visit: int | None) -> None:
        """Refuse a visit that is not the next one the log holds (``CorruptDataError``).

        The seed's rule, as a check: the visit about to run is the number of finished
        visits (completed, or failed and handled: ``RunState.visits``) of this step in
        this branch the log holds. Anything else means the log and the front end
        disagree, and continuing would overwrite history.
        """
        prefix, _ = scope_key(path, step_id, visit)
        finished_visits = self.state.visits(step_id, prefix)
        record = self.state.steps.get(path)
        if record is not None and record.status == "failed":
            finished_visits -= 1  # this very visit, which failed (a replay walks past it)
        if finished_visits != (visit or 0):
            raise CorruptDataError(
                f"run {self.run_id!r}: the log holds {finished_visits} finished visit(s) of "
                f"step {step_id!r} at {path!r}'s scope, but the workflow is at visit "
                f"{visit or 0}; the log does not belong to this workflow"
            )

    def completed(
        self, unit: StepUnit, output: JsonValue, route: str | None = None
    ) -> StepCompleted:
        """The ``StepCompleted`` event of ``unit``."""
        site = unit.site
        return StepCompleted(
            step_path=site.text,
            step_id=unit.step_id,
            kind=unit.kind,
            visit=site.visit,
            output=output,
            route=route,
            identity=site.identity,
        )

    def remember(self, site: Site, output: JsonValue, route: str | None = None) -> None:
        """Record a unit this pass executed (its ``StepCompleted`` is committed)."""
        self.memo.record(site.text, site.identity, {"output": output, "route": route})
        self.executed += 1

    async def unit(
        self,
        unit: StepUnit,
        call: Callable[[int, Arguments], Awaitable[Any]],
        arguments: Arguments = None,
    ) -> JsonValue:
        """The unit's recorded output, or: run it (attempts), commit, remember, return it.

        The whole durable step for a front end that needs nothing else around it (a
        code-first ``ctx.step``).
        """
        site = unit.site
        hit = self.recorded(site.text, site.identity)
        if hit is not None:
            return self.replay(site.text, hit)[0]
        self.check_visit(unit.step_id, site.text, site.visit)
        result, _ = await self.attempts(unit, call, arguments=arguments)
        await self.writer.append([self.completed(unit, result)], sync=True)
        self.remember(site, result)
        return result

    async def attempts(
        self,
        unit: StepUnit,
        call: Callable[[int, Arguments], Awaitable[Any]],
        *,
        arguments: Arguments = None,
        started: Callable[[int, Arguments], list[Event]] = _no_events,
        failed: Callable[[int, BaseException], list[Event]] = _no_failure_events,
    ) -> tuple[JsonValue, int]:
        """Run attempts under the unit's retry policy; return the result and its attempt.

        ``call(attempt, arguments)`` makes one attempt. When the unit fails for good and
        has an ``on_give_up`` handler, it may hand back corrected arguments for one more
        attempt. With an ``outbox`` (a side-effecting unit), each attempt's intent is
        committed before the call, and an intent a crash left without outcome is
        reconciled first (``durable/_side_effects.py``). ``started`` and ``failed`` add
        events to an attempt's start and failure (a tool step's call events).
        """
        policy = unit.retry
        site = unit.site
        path = site.text
        outbox = unit.outbox
        fixer = unit.on_give_up
        reconciled = None if outbox is None else await self._reconcile(unit, outbox)
        if reconciled is not None:
            return reconciled
        span = None if self.trace is None else step_span(self.trace, path, unit.kind, unit.step_id)
        error: BaseException | None = None
        try:
            while True:
                record = self.state.steps.get(path)
                attempt = (record.attempts if record else 0) + 1
                failures = record.failures if record else 0
                current = (
                    arguments if fixer is None else fixer.corrected(self.state, site, arguments)
                )
                # The writer's own append: one coroutine less per step than ``append``.
                attempt_events: list[Event] = [
                    StepAttemptStarted(
                        step_path=path,
                        step_id=unit.step_id,
                        kind=unit.kind,
                        attempt=attempt,
                        visit=site.visit,
                    ),
                    *started(attempt, current),
                ]
                if outbox is not None:
                    # The outbox entry: durable before the effect is dispatched.
                    attempt_events.append(
                        SideEffectIntended(step_path=path, key=outbox.key, attempt=attempt)
                    )
                await self.writer.append(attempt_events, sync=outbox is not None)
                try:
                    # Encoded, not only checked: a string that is not valid Unicode (a lone
                    # surrogate) or an int too long to write would otherwise fail the commit
                    # below with an untyped error and leave the run unrecorded. A tuple comes
                    # back a list: what later steps see now, they read after a restart.
                    result = to_json_value(
                        await call(attempt, current), where=f"the result of step {path!r}"
                    )
                except (CapabilityDriftError, MemoMismatchError, PayloadTooLargeError):
                    # Not a step failure: the run cannot go on as configured (a payload over
                    # the store's limit included). Nothing is recorded, so it resumes once
                    # the configuration is restored.
                    raise
                except BaseException as exc:
                    # Step code is untrusted: SystemExit, GeneratorExit, a BaseException of
                    # its own or a CancelledError nobody asked for is its outcome, recorded
                    # as a failure (``_failures.py``); only an interruption goes on up.
                    if is_interruption(exc):
                        raise
                    code, names = error_names(exc)
                    message = error_message(exc)
                    will_retry = (
                        # A planner that gave up would give up again: its turns replay.
                        not isinstance(exc, InvalidValueError | ConfigError | PlannerError)
                        and failures + 1 < policy.attempts
                        and policy.retries(names)
                    )
                    await self.append(
                        [
                            *failed(attempt, exc),
                            StepAttemptFailed(
                                step_path=path,
                                attempt=attempt,
                                error_code=code,
                                message=message,
                                will_retry=will_retry,
                            ),
                        ],
                        sync=False,
                    )
                    if (
                        not will_retry
                        and fixer is not None
                        and fixer.may_consult(self.state, site)
                        and await fixer.consult(site, current, code, message)
                    ):
                        continue
                    if not will_retry:
                        cause = (
                            "invalid_output"
                            if isinstance(exc, InvalidValueError)
                            else "step_failed"
                        )
                        raise StepFailure(
                            cause,
                            f"step {path!r} failed (attempt {attempt}): "
                            + (f"{code}: {message}" if message else code),
                            path=path,
                            step_id=unit.step_id,
                        ) from exc
                    await self.host.sleep(policy.delay_before(failures + 2))
                    continue
                if span is not None:
                    span.set({"little_workflow.step.attempt": attempt})
                return result, attempt
        except BaseException as exc:
            # A step that parks the run (an agent asking a person) has not failed.
            error = None if isinstance(exc, RunParked) else exc
            raise
        finally:
            if span is not None:
                span.end(error)

    async def _reconcile(self, unit: StepUnit, outbox: Outbox) -> tuple[JsonValue, int] | None:
        """Settle an intent a crash left without outcome: the result if it happened."""
        site = unit.site
        record = self.state.steps.get(site.text)
        if record is None or record.open_intent is None:
            return None
        if outbox.declared is None or outbox.declared.reconcile is None:
            return None  # no hook: dispatched again, at least once (side effects' docs)
        try:
            answer = await outbox.declared.ask(record.open_intent)
            if answer is not None:
                dumps(answer.result, where=f"the reconciled result of step {site.text!r}")
        except BaseException as exc:
            if is_interruption(exc):
                raise
            raise StepFailure(
                "reconcile_failed",
                f"step {site.text!r}: reconcile({record.open_intent!r}) raised "
                f"{error_names(exc)[0]}: {error_message(exc)}",
                path=site.text,
                step_id=unit.step_id,
            ) from exc
        await self.writer.append(
            [
                SideEffectReconciled(
                    step_path=site.text, key=record.open_intent, happened=answer is not None
                )
            ],
            sync=False,
        )
        return None if answer is None else (answer.result, record.attempts)

    def context(self, unit: StepUnit, attempt: int) -> StepContext:
        """The ``StepContext`` a step function of ``unit`` receives at ``attempt``."""
        site = unit.site
        return StepContext(
            run_id=self.run_id,
            step_path=site.text,
            step_id=unit.step_id,
            attempt=attempt,
            visit=site.visit,
            side_effect_key=None if unit.outbox is None else unit.outbox.key,
            artifact_store=self.host.artifacts,
            memory_store=self.host.memory,
        )

    async def start_sub_run(self, unit: StepUnit, workflow_name: str, definition_hash: str) -> str:
        """The id of ``unit``'s sub-run: the recorded one, else a new one, committed first.

        Committed (and synced) before the sub-run starts, so a resumed parent finds and
        resumes this sub-run instead of starting another.
        """
        site = unit.site
        record = self.state.steps.get(site.text)
        if record is not None and record.sub_run_id is not None:
            return record.sub_run_id
        sub_run_id = new_id("run")
        await self.append(
            [
                StepAttemptStarted(
                    step_path=site.text, step_id=unit.step_id, kind=unit.kind, visit=site.visit
                ),
                SubRunStarted(
                    step_path=site.text,
                    sub_run_id=sub_run_id,
                    workflow_name=workflow_name,
                    definition_hash=definition_hash,
                ),
            ],
            sync=True,
        )
        return sub_run_id


def first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first step failure in a task group's errors, else its first error."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return first_failure(error)
        if isinstance(error, StepFailure):
            return error
    return group.exceptions[0]
