"""Executing one run: the walk over LWIR scopes, with Layer A memoization at every step.

The walk is deterministic: it starts at the first step and follows ``next`` and decision
routes, and every value it reads is either the run's input or a step output that is
committed to the log before the walk goes on. So walking again after a crash reaches the
same paths in the same order, and at each one the memo table answers with the recorded
output (nothing runs), until the first path with no ``StepCompleted``: there the run
continues. Visit counts and a decision's pending target come out of the same walk, from
the recorded routes; replay is this walk with execution switched off.

Events per step, and why they are written as they are:

* ``StepAttemptStarted`` (not fsynced): an attempt began. Attempts are counted across
  crashes so a retry policy survives them; fsyncing it would double a step's cost for no
  gain, since the completion commit's fsync makes it durable too (WAL order).
* ``StepCompleted`` in one fsynced commit (with the held ``StepAttemptStarted``): the
  durability unit. A crash before it re-runs the step; after it, never. An ``execute``
  or ``decision`` function's result is stored there once. Older logs also hold it in a
  ``harness.execute_step.succeeded`` committed in the same transaction, a second copy
  the walk no longer writes (it was validated, encoded and stored twice for
  nothing: no commit could hold one without the other). The fold still reads it, and a
  step whose old log has it without a ``StepCompleted`` completes from it.
* ``StepAttemptFailed`` / ``StepFailed`` + ``RunFailed``: failures, with stable causes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_workflow._failures import error_message, error_names, is_interruption
from little_workflow.codec import JsonValue, check_json_value, dumps, to_json_value
from little_workflow.durable import MemoEntry, MemoTable
from little_workflow.durable._side_effects import SideEffect, declared_side_effect
from little_workflow.errors import (
    CapabilityDriftError,
    ConfigError,
    CorruptDataError,
    FunctionNotAllowedError,
    InvalidStepPathError,
    InvalidValueError,
    LwirError,
    MemoMismatchError,
    PayloadTooLargeError,
    PlannerError,
    RunFailedError,
    TemplateError,
)
from little_workflow.events import (
    Event,
    HarnessSessionCompleted,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    RunCancelled,
    RunCompleted,
    RunFailed,
    RunStarted,
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
from little_workflow.lwir import (
    AgentStep,
    DecisionStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    Step,
    StepBase,
    StepPath,
    SubWorkflowStep,
    ToolStep,
    branch_key,
    effective_next,
    parse_workflow,
    render,
)
from little_workflow.runtime._agents import (
    decide_with_agent,
    fixer_decisions,
    run_agent_step,
    run_fixer,
)
from little_workflow.runtime._cancel import cancel_key, read_request, watch
from little_workflow.runtime._functions import StepContext, invoke
from little_workflow.runtime._state import RunState, scope_key
from little_workflow.runtime._workflows import WorkflowVersion
from little_workflow.runtime._writer import RunWriter

if TYPE_CHECKING:
    from little_workflow.runtime._runtime import Runtime

__all__ = ["RunExecution"]

Scope = dict[str, Any]
#: A step's rendered arguments (its ``with``), or ``None`` for a step without them.
Arguments = dict[str, JsonValue] | None


@dataclass(frozen=True, slots=True)
class _Outbox:
    """A side-effecting step's key, and its callable's declaration (hook) if any."""

    key: str
    declared: SideEffect | None


@dataclass(frozen=True, slots=True)
class _Site:
    """Where a step runs: its path (parsed and as text), visit and identity."""

    path: StepPath
    text: str
    visit: int | None
    identity: str


class _StepFailure(Exception):
    """A step failed for good; the run fails with ``cause``."""

    def __init__(self, cause: str, message: str, *, path: str, step_id: str) -> None:
        super().__init__(message)
        self.cause = cause
        self.message = message
        self.path = path
        self.step_id = step_id


class _Frontier(Exception):
    """Replay reached a step the log has not completed."""


class RunExecution:
    """One pass of one run in this process: walk, execute what is not recorded, commit."""

    def __init__(
        self,
        runtime: Runtime,
        version: WorkflowVersion,
        state: RunState,
        *,
        replay_only: bool = False,
        retrying: bool = False,
        stop_at: str | None = None,
    ) -> None:
        self.runtime = runtime
        self.retrying = retrying
        #: Replay only: the path where the walk stops, as at a frontier (a fork point).
        self.stop_at = stop_at
        #: Once the walk reached ``stop_at``: the frontier it had found before it.
        self.stopped: tuple[str, ...] | None = None
        #: The recorded steps this pass replayed, in walk order.
        self.replayed_paths: list[str] = []
        self.version = version
        self.state = state
        self.run_id = state.run_id
        self.replay_only = replay_only
        self.executed = 0
        self.replayed = 0
        self.frontier: list[str] = []
        #: Every path the walk reached in this pass.
        self.visited: set[str] = set()
        self.writer = RunWriter(runtime.events, state, crash=runtime.crash)
        #: Per scope (by ``id`` of its steps): each step's position by id, and the
        #: position of the step each one falls through to (``effective_next``).
        self._indexes: dict[int, tuple[dict[str, int], list[int | None]]] = {}
        self.memo = MemoTable(scope=f"run {self.run_id!r}", on_mismatch="error")
        self._pinned = state.definition_hash in ("", version.definition_hash)
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

    async def execute(self) -> JsonValue:
        """Walk the run to its end; commit ``RunCompleted``, ``RunFailed`` or ``RunCancelled``.

        The walk runs in its own task, watched for a cancellation request (see
        ``_cancel``): on one, the walk is cancelled and ``RunCancelled`` committed.
        """
        kv = self.runtime.kv
        walk = asyncio.get_running_loop().create_task(self._execute(), name=f"run {self.run_id}")
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

    async def _execute(self) -> JsonValue:
        scope: Scope = {"input": self.state.input, "steps": {}, "run": {"id": self.run_id}}
        try:
            output: JsonValue = await self._scope(self.version.workflow.steps, None, scope)
        except _StepFailure as failure:
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
        try:
            check_json_value(output, where=f"output of run {self.run_id!r}")
        except InvalidValueError as exc:
            await self.append([RunFailed(cause_code="invalid_output", message=str(exc))], sync=True)
            raise RunFailedError(str(exc), cause_code="invalid_output", run_id=self.run_id) from exc
        await self.append([RunCompleted(output=output)], sync=True)
        return output

    async def replay(self) -> JsonValue:
        """Walk the run without executing anything; stop at the first uncompleted steps."""
        scope: Scope = {"input": self.state.input, "steps": {}, "run": {"id": self.run_id}}
        try:
            output: JsonValue = await self._scope(self.version.workflow.steps, None, scope)
        except _Frontier:
            return None
        except _StepFailure as failure:
            # A failed run's walk ends where the run failed (a visit past maxVisits, bad
            # map items, a template that does not render): its frontier, where a retry
            # would continue.
            self.frontier.append(failure.path)
            return None
        return output

    # --- scopes -----------------------------------------------------------------------

    def _index(self, steps: tuple[Step, ...]) -> tuple[dict[str, int], list[int | None]]:
        found = self._indexes.get(id(steps))
        if found is None:
            index = {step.id: i for i, step in enumerate(steps)}
            following = [effective_next(steps, i) for i in range(len(steps))]
            found = self._indexes[id(steps)] = (
                index,
                [None if target is None else index[target] for target in following],
            )
        return found

    async def _scope(self, steps: tuple[Step, ...], branch: StepPath | None, scope: Scope) -> Any:
        index, following = self._index(steps)
        visits: dict[str, int] = {}
        position: int | None = 0
        result: JsonValue = None
        while position is not None:
            step = steps[position]
            visit = visits.get(step.id, 0)
            visit_suffix = visit if step.visit_limit > 1 else None
            path = (
                StepPath.root(step.id, visit=visit_suffix)
                if branch is None
                else branch.child(step.id, visit=visit_suffix)
            )
            if visit >= step.visit_limit:
                raise _StepFailure(
                    "max_visits_exceeded",
                    f"step {str(path.without_visit())!r} would run a visit {visit + 1}, "
                    f"but its maxVisits is {step.visit_limit}",
                    path=str(path),
                    step_id=step.id,
                )
            visits[step.id] = visit + 1
            if self.stop_at is not None:
                self._stop_here(str(path))
            if isinstance(step, OutputStep):
                return self._render(step.value, scope, step, str(path), "value")
            output, route = await self._step(step, path, visit_suffix, scope)
            scope["steps"][step.id] = {"output": output, "route": route}
            result = output
            if isinstance(step, DecisionStep):
                position = index[step.routes[route]] if route else None
            else:
                position = following[position]
        return result

    def _stop_here(self, path: str) -> None:
        """Stop the walk at ``stop_at``, and every step after it (later map branches)."""
        if self.stopped is None and path != self.stop_at:
            return
        if self.stopped is None:
            self.stopped = tuple(self.frontier)
        raise _Frontier(path)

    def _render(
        self, value: JsonValue, scope: Scope, step: StepBase, path: str, field: str
    ) -> JsonValue:
        try:
            return render(value, scope, where=f"{path}.{field}")
        except TemplateError as exc:
            raise _StepFailure("template_error", str(exc), path=path, step_id=step.id) from exc

    # --- steps ------------------------------------------------------------------------

    def _recorded(self, step: Step, path: str) -> MemoEntry | None:
        """The memo table's entry for ``path``, if the step completed there."""
        if self._pinned:
            # The run's recorded definition hash is this version's: every recorded step
            # was made by the same step definition, so hashing it again proves nothing.
            return self.memo.peek(path)
        return self.memo.lookup(path, self.version.identity(step))

    async def _step(
        self, step: Step, path: StepPath, visit: int | None, scope: Scope
    ) -> tuple[JsonValue, str | None]:
        path_text = str(path)
        self.visited.add(path_text)
        hit = self._recorded(step, path_text)
        if (
            hit is not None
            and self.stop_at is not None
            and self.stop_at.startswith(f"{path_text}[")
        ):
            # The stop is inside this completed map: walk its branches up to it.
            assert isinstance(step, MapStep)
            site = _Site(path, path_text, visit, self.version.identity(step))
            return await self._map(step, site, scope), None
        if hit is not None:
            self.replayed += 1
            self.replayed_paths.append(path_text)
            assert isinstance(hit.value, dict)
            recorded_route = hit.value.get("route")
            return hit.value.get("output"), (
                recorded_route if isinstance(recorded_route, str) else None
            )
        # The seed's rule, as a check: the visit about to run is the number of completed
        # visits of this step in this branch the log holds. Anything else means the log
        # and the walk disagree, and continuing would overwrite history.
        prefix, _ = scope_key(path_text, step.id, visit)
        completed_visits = self.state.visits(step.id, prefix)
        if completed_visits != (visit or 0):
            raise CorruptDataError(
                f"run {self.run_id!r}: the log holds {completed_visits} completed visit(s) of "
                f"step {step.id!r} at {path_text!r}'s scope, but the workflow is at visit "
                f"{visit or 0}; the log does not belong to this workflow"
            )
        identity = self.version.identity(step)
        site = _Site(path, path_text, visit, identity)
        if self.replay_only:
            if not isinstance(step, MapStep):
                self.frontier.append(path_text)
                raise _Frontier(path_text)
            return await self._map(step, site, scope), None
        route: str | None = None
        if isinstance(step, ExecuteStep | DecisionStep):
            output, route = await self._call(step, site, scope)
        elif isinstance(step, ToolStep):
            output = await self._tool(step, site, scope)
        elif isinstance(step, MapStep):
            output = await self._map(step, site, scope)
        elif isinstance(step, SubWorkflowStep):
            output = await self._sub_run(step, site, scope)
        elif isinstance(step, AgentStep):
            output = await run_agent_step(self, step, site, scope)
        else:  # pragma: no cover - validation admits no other kind
            raise ConfigError(f"step kind {step.kind!r} cannot run yet")
        self.memo.record(path_text, identity, {"output": output, "route": route})
        self.executed += 1
        return output, route

    def _completed(
        self, step: StepBase, site: _Site, output: JsonValue, route: str | None = None
    ) -> StepCompleted:
        return StepCompleted(
            step_path=site.text,
            step_id=step.id,
            kind=step.kind,
            visit=site.visit,
            output=output,
            route=route,
            identity=site.identity,
        )

    async def _attempts(
        self,
        step: ExecuteStep | DecisionStep | ToolStep | AgentStep,
        site: _Site,
        call: Callable[[int, Arguments], Awaitable[Any]],
        *,
        arguments: Arguments = None,
        started: Callable[[int, Arguments], list[Event]] = lambda attempt, arguments: [],
        failed: Callable[[int, BaseException], list[Event]] = lambda attempt, exc: [],
        outbox: _Outbox | None = None,
    ) -> tuple[JsonValue, int]:
        """Run attempts under the step's retry policy; return the result and its attempt.

        ``call(attempt, arguments)`` makes one attempt. When the step fails for good and
        has a fixer, the fixer may hand back corrected arguments for one more attempt.
        With an ``outbox`` (a side-effecting step), each attempt's intent is committed
        before the call, and an intent a crash left without outcome is reconciled first
        (``durable/_side_effects.py``).
        """
        policy = step.retry
        path = site.text
        if outbox is not None:
            reconciled = await self._reconcile(step, site, outbox)
            if reconciled is not None:
                return reconciled
        while True:
            record = self.state.steps.get(path)
            attempt = (record.attempts if record else 0) + 1
            failures = record.failures if record else 0
            # Only a step with a fixer can have fixer decisions: the lookup walks every
            # session of the run, so a plain step skips it.
            fixes = fixer_decisions(self.state, path) if getattr(step, "fixer", None) else []
            current = arguments
            if fixes and fixes[-1].get("action") == "retry":
                corrected = fixes[-1].get("with")
                current = dict(corrected) if isinstance(corrected, dict) else arguments
            # The writer's own append, here and in ``_call``: one coroutine less per
            # step than going through ``self.append``.
            attempt_events: list[Event] = [
                StepAttemptStarted(
                    step_path=path,
                    step_id=step.id,
                    kind=step.kind,
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
                fixer = getattr(step, "fixer", None)
                if not will_retry and fixer is not None and len(fixes) < fixer.max_fixes:
                    decision = await run_fixer(
                        self, step, site, arguments=current, error_code=code, message=message
                    )
                    if decision.get("action") == "retry":
                        continue
                if not will_retry:
                    cause = (
                        "invalid_output" if isinstance(exc, InvalidValueError) else "step_failed"
                    )
                    raise _StepFailure(
                        cause,
                        f"step {path!r} failed (attempt {attempt}): "
                        + (f"{code}: {message}" if message else code),
                        path=path,
                        step_id=step.id,
                    ) from exc
                await self.runtime.sleep(policy.delay_before(failures + 2))
                continue
            return result, attempt

    async def _reconcile(
        self,
        step: ExecuteStep | DecisionStep | ToolStep | AgentStep,
        site: _Site,
        outbox: _Outbox,
    ) -> tuple[JsonValue, int] | None:
        """Settle an intent a crash left without outcome: the result if it happened."""
        record = self.state.steps.get(site.text)
        if record is None or record.open_intent is None:
            return None
        if outbox.declared is None or outbox.declared.reconcile is None:
            return None  # no hook: dispatched again, at least once (the module docstring)
        try:
            answer = await outbox.declared.ask(record.open_intent)
            if answer is not None:
                dumps(answer.result, where=f"the reconciled result of step {site.text!r}")
        except BaseException as exc:
            if is_interruption(exc):
                raise
            raise _StepFailure(
                "reconcile_failed",
                f"step {site.text!r}: reconcile({record.open_intent!r}) raised "
                f"{error_names(exc)[0]}: {error_message(exc)}",
                path=site.text,
                step_id=step.id,
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

    def _outbox(
        self,
        step: ExecuteStep | ToolStep,
        site: _Site,
        scope: Scope,
        target: object,
    ) -> _Outbox | None:
        """The step's outbox if it is side-effecting (LWIR ``sideEffect`` or ``@side_effect``)."""
        declared = declared_side_effect(target)
        if step.side_effect is None and declared is None:
            return None
        key = f"{self.run_id}/{site.text}"
        if step.side_effect is not None and step.side_effect.key is not None:
            rendered = self._render(step.side_effect.key, scope, step, site.text, "sideEffect.key")
            if not isinstance(rendered, str) or not rendered:
                raise _StepFailure(
                    "template_error",
                    f"step {site.text!r}: sideEffect.key rendered to {rendered!r}, not a "
                    "non-empty string",
                    path=site.text,
                    step_id=step.id,
                )
            key = rendered
        return _Outbox(key=key, declared=declared)

    def _context(
        self, step: StepBase, site: _Site, attempt: int, outbox: _Outbox | None = None
    ) -> StepContext:
        return StepContext(
            run_id=self.run_id,
            step_path=site.text,
            step_id=step.id,
            attempt=attempt,
            visit=site.visit,
            side_effect_key=None if outbox is None else outbox.key,
            artifact_store=self.runtime.artifacts,
            memory_store=self.runtime.memory,
        )

    async def _call(
        self, step: ExecuteStep | DecisionStep, site: _Site, scope: Scope
    ) -> tuple[JsonValue, str | None]:
        path = site.text
        record = self.state.steps.get(path)
        events: list[Event] = []
        if record is not None and record.has_execute_result:
            # Committed before a crash, but not yet completed: complete it, do not call again.
            result = record.execute_result
        elif isinstance(step, DecisionStep) and step.agent is not None:

            def decide(_attempt: int, _arguments: Arguments) -> Awaitable[Any]:
                return decide_with_agent(self, step, site, scope)

            result, _ = await self._attempts(step, site, decide)
            chosen, decided = self._route(step, path, result)
            events.append(HarnessSessionCompleted(session_id=path, output=result))
            events.append(self._completed(step, site, decided, chosen))
            await self.append(events, sync=True)
            return decided, chosen
        else:
            assert step.fn is not None
            try:
                # Checked when the run started too; checked again here, where the call
                # is made, so no other path to a call can skip it.
                self.runtime.functions.check_offered(
                    step.fn,
                    workflow=self.version.name,
                    step=path,
                    computed=not self.version.trusted,
                )
                function, takes_ctx = self.runtime.functions.resolve(step.fn)
            except ConfigError as exc:
                raise _config_failure(exc, path=path, step_id=step.id) from exc
            arguments = self._render(dict(step.with_), scope, step, path, "with")
            assert isinstance(arguments, dict)
            outbox = (
                self._outbox(step, site, scope, function) if isinstance(step, ExecuteStep) else None
            )

            def call(attempt: int, current: Arguments) -> Awaitable[Any]:
                # Most step functions take no context: do not build one for them.
                ctx = self._context(step, site, attempt, outbox) if takes_ctx else None
                return invoke(function, takes_ctx, current or {}, ctx)

            result, _ = await self._attempts(step, site, call, arguments=arguments, outbox=outbox)
        route: str | None = None
        output = result
        if isinstance(step, DecisionStep):
            route, output = self._route(step, path, result)
        events.append(self._completed(step, site, output, route))
        await self.writer.append(events, sync=True)
        return output, route

    def _route(self, step: DecisionStep, path: str, result: JsonValue) -> tuple[str, JsonValue]:
        """A decision's result: a route name, or ``{"route": name, "output": value}``."""
        if isinstance(result, dict) and isinstance(result.get("route"), str):
            route, output = str(result["route"]), result.get("output", result["route"])
        elif isinstance(result, str):
            route, output = result, result
        else:
            raise _StepFailure(
                "unknown_route",
                f"decision {path!r} returned {result!r}; return a route name or "
                '{"route": name, "output": value}',
                path=path,
                step_id=step.id,
            )
        if route not in step.routes:
            raise _StepFailure(
                "unknown_route",
                f"decision {path!r} chose route {route!r}, which is not one of "
                f"{sorted(step.routes)}",
                path=path,
                step_id=step.id,
            )
        return route, output

    async def _tool(self, step: ToolStep, site: _Site, scope: Scope) -> JsonValue:
        path = site.text
        if step.tool not in self.runtime.toolset.registry:
            raise _StepFailure(
                "runtime_config_error",
                f"step {path!r} calls tool {step.tool!r}, which is not registered",
                path=path,
                step_id=step.id,
            )
        tool = self.runtime.toolset.get(step.tool)
        arguments = self._render(dict(step.with_), scope, step, path, "with")
        assert isinstance(arguments, dict)

        def call_id(attempt: int) -> str:
            return f"attempt[{attempt}]"

        outbox = self._outbox(step, site, scope, tool)
        # The tool's redaction rule (harness/_redaction.py) applies to what a tool step
        # stores, as to an agent's call: the tool gets the real arguments, and the steps
        # after it the real result while the run lives; after a restart they read the
        # stored, redacted form (docs/harness.md).
        redactor = None
        if tool.redaction is not None and not tool.redaction.is_empty:
            from little_workflow.harness._redaction import Redactor

            redactor = Redactor({step.tool: tool.redaction})

        def call(attempt: int, current: Arguments) -> Awaitable[Any]:
            return tool.invoke(current or {}, ctx=self._context(step, site, attempt, outbox))

        def started(attempt: int, current: Arguments) -> list[Event]:
            stored: JsonValue = current
            if redactor is not None:
                stored = redactor.arguments(step.tool, current)
            return [
                HarnessToolCallStarted(
                    session_id=path,
                    call_id=call_id(attempt),
                    tool_name=step.tool,
                    arguments=stored if isinstance(stored, dict) else current,
                )
            ]

        def failed(attempt: int, exc: BaseException) -> list[Event]:
            message: JsonValue = error_message(exc)
            if redactor is not None:
                message = redactor.scrub(message)
            return [
                HarnessToolCallFailed(
                    session_id=path,
                    call_id=call_id(attempt),
                    error_code=error_names(exc)[0],
                    message=str(message),
                )
            ]

        result, attempt = await self._attempts(
            step, site, call, arguments=arguments, started=started, failed=failed, outbox=outbox
        )
        stored = result if redactor is None else redactor.result(step.tool, result)
        await self.append(
            [
                HarnessToolCallSucceeded(session_id=path, call_id=call_id(attempt), result=stored),
                self._completed(step, site, stored),
            ],
            sync=True,
        )
        return result

    def _branch_keys(self, step: MapStep, path: str, items: JsonValue) -> list[str]:
        if not isinstance(items, list):
            raise _StepFailure(
                "map_items_invalid",
                f"map {path!r}: items evaluated to {type(items).__name__}, not a list",
                path=path,
                step_id=step.id,
            )
        try:
            keys = [branch_key(item, key=step.key, index=i) for i, item in enumerate(items)]
        except InvalidStepPathError as exc:
            raise _StepFailure(
                "map_invalid_key", f"map {path!r}: {exc}", path=path, step_id=step.id
            ) from exc
        seen: set[str] = set()
        for key in keys:
            if key in seen:
                raise _StepFailure(
                    "map_duplicate_key",
                    f"map {path!r}: several items have the key {key!r}; branch keys "
                    f"(field {step.key!r}) must be unique",
                    path=path,
                    step_id=step.id,
                )
            seen.add(key)
        return keys

    async def _map(self, step: MapStep, site: _Site, scope: Scope) -> JsonValue:
        path = site.text
        items = self._render(step.items, scope, step, path, "items")
        keys = self._branch_keys(step, path, items)
        assert isinstance(items, list)
        record = self.state.steps.get(path)
        if not self.replay_only and (record is None or record.attempts == 0):
            await self.append(
                [
                    StepAttemptStarted(
                        step_path=path, step_id=step.id, kind=step.kind, visit=site.visit
                    )
                ],
                sync=False,
            )
        # A replay runs the branches one after another, in item order: it does no I/O, so
        # concurrency buys nothing, and a stop (a fork point) must see a fixed order.
        limit = 1 if self.replay_only else step.concurrency
        semaphore = asyncio.Semaphore(limit)
        results: list[Any] = [None] * len(items)
        pending = False
        failed = False
        # Branches not yet finished, counted from the start: the writer groups the
        # commits of branches that complete together (``RunWriter``, "Group commit"), and
        # the first to complete must already know that others are on their way.
        writer = self.writer
        unfinished = len(items) if limit > 1 else 0
        writer.branches += unfinished

        async def branch(index: int) -> None:
            nonlocal pending, unfinished, failed
            async with semaphore:
                if failed:
                    # A sibling failed as it let this one in: the group is cancelling
                    # the rest (after this wake-up, which was scheduled first), so
                    # start no step of a map that has already failed.
                    return
                try:
                    results[index] = await self._scope(
                        step.body,
                        site.path.branch(keys[index]),
                        {
                            "input": scope["input"],
                            "steps": dict(scope["steps"]),
                            "item": items[index],
                            "run": scope["run"],
                        },
                    )
                except _Frontier:
                    pending = True
                except BaseException:
                    failed = True
                    raise
                finally:
                    if unfinished:
                        unfinished -= 1
                        writer.branches -= 1

        try:
            async with asyncio.TaskGroup() as group:
                for index in range(len(items)):
                    group.create_task(branch(index))
        except BaseExceptionGroup as group_error:
            first = _first_failure(group_error)
            raise first from first.__cause__
        finally:
            # Branches cancelled before they started never ran their own ``finally``.
            writer.branches -= unfinished
            unfinished = 0
        if pending:
            raise _Frontier(path)
        if self.replay_only:
            done = self.state.completed(path)
            if done is not None:  # walked into for a stop that is not in any branch
                return done.output
            # Every branch is done, but the map's own commit is not.
            self.frontier.append(path)
            raise _Frontier(path)
        await self.append([self._completed(step, site, results)], sync=True)
        return results

    async def _dynamic_workflow(
        self, step: SubWorkflowStep, path: str, scope: Scope
    ) -> WorkflowVersion:
        """Validate, resolve and pin the workflow a ``definition`` evaluates to.

        The document is data (a model may have written it): it is pinned as a computed,
        untrusted version, checked without importing anything (``check_callables``).
        """
        definition = self._render(step.definition, scope, step, path, "definition")
        if not isinstance(definition, dict):
            raise _StepFailure(
                "invalid_workflow",
                f"step {path!r}: definition evaluated to {type(definition).__name__}, "
                "not an LWIR document",
                path=path,
                step_id=step.id,
            )
        try:
            workflow = parse_workflow(definition, source=f"the definition of step {path!r}")
            version = self.runtime.catalog.resolve(workflow, computed=True)
            self.runtime.check_callables(version)
        except LwirError as exc:
            raise _StepFailure("invalid_workflow", str(exc), path=path, step_id=step.id) from exc
        except ConfigError as exc:
            raise _config_failure(exc, path=path, step_id=step.id) from exc
        return await self.runtime.catalog.store(version)

    async def _started_version(self, sub_run_id: str | None) -> WorkflowVersion | None:
        """The version a sub-run started with, from its ``RunStarted`` (``None`` if none).

        A resumed ``definition`` step runs what its sub-run pinned, not the document
        resolved again against the workflows registered now.
        """
        if sub_run_id is None:
            return None
        first = await self.runtime.events.read(sub_run_id, limit=1)
        if not first or not isinstance(first[0].event, RunStarted):
            return None
        return await self.runtime.catalog.load(first[0].event.workflow_version_id)

    async def _sub_run(self, step: SubWorkflowStep, site: _Site, scope: Scope) -> JsonValue:
        path = site.text
        record = self.state.steps.get(path)
        sub_run_id = record.sub_run_id if record is not None else None
        if step.workflow is not None:
            child = self.version.child(step.workflow)
        else:
            started = await self._started_version(sub_run_id)
            if started is None:
                child = await self._dynamic_workflow(step, path, scope)
            else:
                child = started
                try:
                    # Checked here, as a failure of this step, not left to the sub-run
                    # (whose check would escape the walk): the runtime may offer less
                    # than when it was pinned. As computed whatever its record says (one
                    # pinned before records said so).
                    self.runtime.check_callables(child, trusted=False)
                except ConfigError as exc:
                    raise _config_failure(exc, path=path, step_id=step.id) from exc
        arguments = self._render(dict(step.with_), scope, step, path, "with")
        if sub_run_id is None:
            sub_run_id = new_id("run")
            # Committed (and synced) before the sub-run starts, so a resumed parent finds
            # and resumes this sub-run instead of starting another.
            await self.append(
                [
                    StepAttemptStarted(
                        step_path=path, step_id=step.id, kind=step.kind, visit=site.visit
                    ),
                    SubRunStarted(
                        step_path=path,
                        sub_run_id=sub_run_id,
                        workflow_name=child.name,
                        definition_hash=child.definition_hash,
                    ),
                ],
                sync=True,
            )
        try:
            output = await self.runtime.run_child(
                child,
                arguments,
                run_id=sub_run_id,
                parent_run_id=self.run_id,
                parent_step_path=path,
                retry_failed=self.retrying,
            )
        except RunFailedError as exc:
            raise _StepFailure(
                "sub_run_failed",
                f"sub-run {sub_run_id!r} of step {path!r} failed ({exc.cause_code}): {exc}",
                path=path,
                step_id=step.id,
            ) from exc
        await self.append([self._completed(step, site, output)], sync=True)
        return output


def _config_failure(exc: ConfigError, *, path: str, step_id: str) -> _StepFailure:
    """A step that cannot run as configured: ``function_not_allowed`` keeps its own code."""
    cause = exc.code if isinstance(exc, FunctionNotAllowedError) else "runtime_config_error"
    return _StepFailure(cause, str(exc), path=path, step_id=step_id)


def _first_failure(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first step failure in a task group's errors, else its first error."""
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            return _first_failure(error)
        if isinstance(error, _StepFailure):
            return error
    return group.exceptions[0]
