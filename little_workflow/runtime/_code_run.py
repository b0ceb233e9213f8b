"""``CodeRun``: the code-first front end of one pass of one run, over the durable core.

The workflow body is plain Python; it runs again from the top on every pass. Each call
it makes through its ``WorkflowContext`` is a unit of the core (``_core.DurableRun``):
the unit's path and identity are assigned **when the call is made** (synchronously, in
program order), so ``asyncio.gather`` and task groups get the same paths on every pass
whatever order their calls finish in. Then the core's memo answers a recorded path with
its output, or the unit runs (attempts, outbox, commit).

Paths are LWIR's: the step's name, ``.visit[N]`` from the second call of the same name
in the run (the first has no suffix), ``name[key]`` for a map branch. The identity a
``StepCompleted`` records is the step's qualified name and the call's position in the
run (``pkg.mod:fetch@3``): a pass that asks, at a recorded path or position, for
something else than the log holds raises ``NonDeterminismError`` before writing
anything for it. Arguments are not part of the identity (as in Temporal and DBOS): a
body that passes other arguments to a recorded call gets the recorded result.

A unit that fails for good commits ``StepFailed`` and raises ``StepFailedError`` into
the body; a later pass raises the same error there without calling the unit again.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from little_workflow._failures import error_message, error_names, is_interruption
from little_workflow._tracing import sub_run_attributes, traced
from little_workflow.codec import JsonValue, to_json_value
from little_workflow.durable._side_effects import declared_side_effect
from little_workflow.errors import (
    CapabilityDriftError,
    ConfigError,
    InvalidStepPathError,
    InvalidValueError,
    LeaseLostError,
    LockTimeoutError,
    NonDeterminismError,
    PayloadTooLargeError,
    RunFailedError,
    StepFailedError,
    StorageError,
)
from little_workflow.events import StepAttemptStarted, StepFailed
from little_workflow.lwir import (
    AgentStep,
    DecisionStep,
    RetryPolicy,
    StepPath,
    ToolStep,
    Workflow,
)
from little_workflow.platform._threads import call_user
from little_workflow.runtime._agents import (
    Fixer,
    SessionRun,
    Startable,
    run_agent_step,
)
from little_workflow.runtime._code_api import StepSpec, WorkflowSpec
from little_workflow.runtime._code_context import CallScope, WorkflowContext
from little_workflow.runtime._code_input import bind_input
from little_workflow.runtime._code_pins import pin
from little_workflow.runtime._code_places import all_branches, call_position, scope_of
from little_workflow.runtime._code_sessions import (
    as_given,
    decide_once,
    plan_and_run,
    startable,
)
from little_workflow.runtime._core import (
    DurableRun,
    Outbox,
    Site,
    StepFailure,
    StepUnit,
)
from little_workflow.runtime._functions import StepContext
from little_workflow.runtime._lwir_steps import call_tool, registered_tool

__all__ = ["ChildStarter", "CodeRun", "bind_input", "current_step"]

_NO_RETRY = RetryPolicy()
#: The step attempt running in this context: its core, unit and attempt, from which
#: ``current_step`` builds its ``StepContext`` (most steps never ask for one).
_CURRENT_STEP: contextvars.ContextVar[tuple[DurableRun, StepUnit, int] | None] = (
    contextvars.ContextVar("little_workflow_current_step", default=None)
)
#: What a body may raise that is not its own outcome: the run cannot go on as configured
#: here, and nothing is recorded for it.
_NOT_AN_OUTCOME = (
    NonDeterminismError,
    CapabilityDriftError,
    PayloadTooLargeError,
    StorageError,
    LeaseLostError,
    LockTimeoutError,
)


def current_step() -> StepContext:
    """The ``StepContext`` of the step running now (its path, attempt, idempotency key,
    artifacts and memory); ``RuntimeError`` outside a code-first step."""
    current = _CURRENT_STEP.get()
    if current is None:
        raise RuntimeError("current_step() is called outside a code-first step")
    run, unit, attempt = current
    return run.context(unit, attempt)


class ChildStarter(Protocol):
    """Starts or continues a code-first sub-run; its output (``RunFailedError`` if it failed)."""

    async def __call__(
        self,
        function: Callable[..., Any],
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool,
    ) -> JsonValue: ...


class CodeRun:
    """One pass of one code-first run: the body's calls become units of ``run``."""

    def __init__(
        self,
        run: DurableRun,
        spec: WorkflowSpec,
        function: Callable[..., Any],
        start_child: ChildStarter,
        sessions: SessionRun | None = None,
    ) -> None:
        self.run = run
        #: What an agent's session uses (``_agents``); ``None`` where agents are not offered.
        self.sessions = sessions
        self.state = run.state
        self.run_id = run.run_id
        self.spec = spec
        self.function = function
        self.start_child = start_child
        #: (scope, call position) -> path, for every unit the log completed (from its identity).
        self._order: dict[tuple[str, int], str] = {}
        for path, record in self.state.steps.items():
            position = call_position(record.identity if record.status == "completed" else None)
            if position is not None:
                self._order[(scope_of(path), position)] = path
        self._reached: set[str] = set()

    # --- the run ----------------------------------------------------------------------

    async def execute(self) -> JsonValue:
        """Run the body to its end under the core (``DurableRun.execute``)."""
        return await self.run.execute(self._body)

    async def _body(self) -> JsonValue:
        arguments = bind_input(self.function, self.state.input, where=f"run {self.run_id!r}")
        try:
            output: JsonValue = await self.function(WorkflowContext(self), **arguments)
        except StepFailedError as exc:
            raise StepFailure(exc.cause_code, exc.message, path=exc.path, step_id="") from exc
        except _NOT_AN_OUTCOME:
            raise
        except BaseException as exc:
            # The body is user code: whatever it raises (SystemExit included) is the
            # run's outcome, unless it interrupts this process.
            if is_interruption(exc):
                raise
            code, _ = error_names(exc)
            raise StepFailure(
                "workflow_failed",
                f"workflow {self.spec.qualified!r} raised {code}: {error_message(exc)}",
                path="",
                step_id="",
            ) from exc
        # A completed map replays whole: its branches are reached through it.
        reached_maps = tuple(f"{path}[" for path in self._reached)
        unreached = sorted(
            (place, path)
            for place, path in self._order.items()
            if path not in self._reached and not path.startswith(reached_maps)
        )
        if unreached:
            _, path = unreached[0]
            record = self.state.steps[path]
            raise self._diverged(
                path,
                record.identity or "",
                "the end of the workflow",
                f"the workflow ended without reaching step {path!r}, which the log holds",
            )
        return output

    # --- paths ------------------------------------------------------------------------

    def site(
        self,
        name: str,
        qualified: str,
        scope: CallScope,
        *,
        map_path: StepPath | None = None,
        key: str = "",
        max_visits: int | None = None,
    ) -> Site:
        """Claim the next call position of ``scope`` and the path of a call (see the module
        docstring); a ``map`` branch (``map_path``) is a scope of its own, at position 0.

        ``NonDeterminismError`` if the log holds something else at this path or position;
        ``StepFailedError`` (``max_visits_exceeded``) for a visit past ``max_visits``.
        """
        if map_path is None:
            visit = scope.visits.get(name, 0)
            scope.visits[name] = visit + 1
            suffix = visit if max_visits is not None else visit or None
            if scope.prefix is None:
                path = StepPath.root(name, visit=suffix)
            else:
                path = scope.prefix.child(name, visit=suffix)
            if max_visits is not None and visit >= max_visits:
                raise StepFailedError(
                    f"step {str(path.without_visit())!r} would run a visit {visit + 1}, but "
                    f"its max_visits is {max_visits}",
                    path=str(path),
                    cause_code="max_visits_exceeded",
                )
            text = str(path)
            place = (scope.text, scope.calls)
            scope.calls += 1
        else:
            try:
                path = map_path.branch(key)
            except InvalidStepPathError as exc:
                raise InvalidValueError(f"map {str(map_path)!r}: {exc}") from exc
            text = str(path)
            place = (text, 0)
        position = place[1]
        identity = f"{qualified}@{position}"
        self._reached.add(text)
        recorded_path = self._order.get(place)
        record = self.state.steps.get(text)
        if recorded_path is not None and recorded_path != text:
            held = self.state.steps[recorded_path].identity or ""
            raise self._diverged(
                recorded_path,
                held,
                f"{identity} at {text!r}",
                f"call {position} of {'the workflow' if not place[0] else place[0]} is step "
                f"{recorded_path!r} ({held}) in the log, but the code now calls {text!r} "
                f"({identity})",
            )
        if record is not None and record.status == "completed" and record.identity != identity:
            raise self._diverged(
                text,
                record.identity or "",
                identity,
                f"the log holds {record.identity} at {text!r}, but the code now asks for "
                f"{identity} there",
            )
        return Site(path, text, path.visit, identity)

    def _diverged(self, path: str, recorded: str, requested: str, what: str) -> NonDeterminismError:
        fork = f"little-workflow fork {self.run_id} --at {path!r}"
        return NonDeterminismError(
            f"run {self.run_id!r} is not deterministic: {what}. Nothing was written; resume "
            f"it with the code that started it, or keep the work before this point with "
            f"`{fork}`",
            path=path,
            recorded=recorded,
            requested=requested,
            fork=fork,
        )

    # --- units ------------------------------------------------------------------------

    def _recorded(self, site: Site) -> tuple[bool, JsonValue]:
        """``(True, output)`` for a completed unit; raises a recorded failure again."""
        record = self.state.steps.get(site.text)
        if record is None:
            return False, None
        if record.status == "completed":
            hit = self.run.recorded(site.text, site.identity)
            assert hit is not None
            return True, self.run.replay(site.text, hit)[0]
        if record.status == "failed":
            cause, _, message = (record.last_error or "step_failed: ").partition(": ")
            raise StepFailedError(message, path=site.text, cause_code=cause)
        return False, None

    async def _failed(self, unit: StepUnit, failure: StepFailure) -> StepFailedError:
        """Commit ``StepFailed`` for ``unit``; the error the body receives.

        A unit that failed before its first attempt (a tool that is not registered) has
        nothing in the log to fail: the error is raised, and a resume asks again.
        """
        if unit.site.text in self.state.steps:
            await self.run.append(
                [
                    StepFailed(
                        step_path=unit.site.text,
                        step_id=unit.step_id,
                        cause_code=failure.cause,
                        message=failure.message,
                    )
                ],
                sync=True,
            )
        error = StepFailedError(failure.message, path=unit.site.text, cause_code=failure.cause)
        error.__cause__ = failure.__cause__
        return error

    async def call(
        self,
        site: Site,
        spec: StepSpec,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """A step call: its recorded output or failure, or run it, commit it, return it."""
        done, output = self._recorded(site)
        if done:
            return output
        run = self.run
        await pin(run, spec.qualified, function)
        outbox = None
        declared = declared_side_effect(function)
        if spec.side_effect or declared is not None:
            outbox = Outbox(key=f"{self.run_id}/{site.text}", declared=declared)
        unit = StepUnit(
            site=site, kind="execute", step_id=spec.name, retry=spec.retry, outbox=outbox
        )

        async def attempt(number: int, _arguments: object) -> Any:
            token = _CURRENT_STEP.set((run, unit, number))
            try:
                return await call_user(function, *args, **kwargs)
            finally:
                _CURRENT_STEP.reset(token)

        try:
            result, _ = await run.attempts(unit, attempt)
        except StepFailure as failure:
            raise await self._failed(unit, failure) from failure.__cause__
        await run.writer.append([run.completed(unit, result)], sync=True)
        run.remember(site, result)
        return result

    async def tool(self, site: Site, step: ToolStep, side_effect: bool) -> JsonValue:
        """A registered tool called as a step (LWIR's ``kind: tool``, one mechanism:
        ``call_tool``): its recorded output or failure, or run it, commit it, return it."""
        done, output = self._recorded(site)
        if done:
            return output
        sessions = self.sessions
        if sessions is None:
            raise ConfigError(f"run {self.run_id!r}: this pass offers no tools")
        fixer = None if step.fixer is None else Fixer(sessions, step, step.fixer)
        unit = StepUnit(site, "tool", step.id, step.retry, on_give_up=fixer)
        try:
            found = registered_tool(
                sessions.host.toolset, step.tool, path=site.text, step_id=step.id
            )
            declared = declared_side_effect(found)
            if side_effect or declared is not None:
                unit = unit._replace(outbox=Outbox(f"{self.run_id}/{site.text}", declared))
            output = await call_tool(self.run, unit, found, dict(step.with_))
        except StepFailure as failure:
            raise await self._failed(unit, failure) from failure.__cause__
        self.run.remember(site, output)
        return output

    async def value(self, site: Site, name: str, make: Callable[[], JsonValue]) -> JsonValue:
        """A recorded value (``ctx.now()``, ``random()``, ``uuid4()``): made once, committed."""
        done, output = self._recorded(site)
        if done:
            return output
        unit = StepUnit(site=site, kind="execute", step_id=name, retry=_NO_RETRY)
        value = make()
        run = self.run
        # One event: nothing can fail between the attempt and its outcome.
        await run.writer.append([run.completed(unit, value)], sync=True)
        run.remember(site, value)
        return value

    async def map(
        self,
        site: Site,
        spec: StepSpec,
        function: Callable[..., Any],
        branches: list[tuple[Site, Any]],
        concurrency: int,
    ) -> list[Any]:
        """A map: each branch a step call at ``name[key]``, then the list committed at the map."""
        done, output = self._recorded(site)
        if done:
            assert isinstance(output, list)
            return output
        run = self.run
        await self._map_started(site, spec.name)
        semaphore = asyncio.Semaphore(concurrency)
        results: list[Any] = [None] * len(branches)
        writer = run.writer
        # Branches not yet finished: the writer groups the commits of branches that
        # complete together (as the LWIR map does).
        unfinished = len(branches) if concurrency > 1 else 0
        writer.branches += unfinished

        async def branch(index: int) -> None:
            nonlocal unfinished
            branch_site, item = branches[index]
            try:
                async with semaphore:
                    results[index] = await self.call(branch_site, spec, function, (item,), {})
            finally:
                if unfinished:
                    unfinished -= 1
                    writer.branches -= 1

        try:
            await all_branches(len(branches), branch, StepFailedError)
        finally:
            writer.branches -= unfinished
            unfinished = 0
        return await self._map_completed(site, spec.name, results)

    async def sub_run(
        self,
        site: Site,
        name: str,
        child: WorkflowSpec,
        function: Callable[..., Any],
        input: object,
    ) -> JsonValue:
        """A sub-run of ``function`` (a ``@workflow``) with its own run id; its output."""
        done, output = self._recorded(site)
        if done:
            return output
        run = self.run
        unit = StepUnit(site=site, kind="workflow", step_id=name, retry=_NO_RETRY)
        bind_input(function, input, where=f"sub-workflow {site.text!r}")
        child_input = to_json_value(input, where=f"the input of sub-workflow {site.text!r}")
        sub_run_id = await run.start_sub_run(unit, child.name, child.source_hash)
        try:
            with traced(
                run.trace, "sub_run", site.text, sub_run_attributes(sub_run_id, child.name)
            ):
                output = await self.start_child(
                    function,
                    child_input,
                    run_id=sub_run_id,
                    parent_run_id=self.run_id,
                    parent_step_path=site.text,
                    retry_failed=run.retrying,
                )
        except RunFailedError as exc:
            failure = StepFailure(
                "sub_run_failed",
                f"sub-run {sub_run_id!r} of step {site.text!r} failed ({exc.cause_code}): {exc}",
                path=site.text,
                step_id=name,
            )
            raise await self._failed(unit, failure) from exc
        await run.append([run.completed(unit, output)], sync=True)
        run.remember(site, output)
        return output

    async def agent(
        self, site: Site, step: AgentStep, workflows: Sequence[tuple[WorkflowSpec, Any]] = ()
    ) -> JsonValue:
        """An agent session (Layer C: each model and tool call committed and replayed);
        an orchestrator of ``workflows`` (spec, body) when there are any."""
        done, output = self._recorded(site)
        if done:
            return output
        if self.sessions is None:
            raise ConfigError(f"run {self.run_id!r}: this pass offers no agents")
        unit = StepUnit(site=site, kind="agent", step_id=step.id, retry=step.retry or _NO_RETRY)

        offered = {spec.name: self._startable(site, spec, body) for spec, body in workflows}
        try:
            output = await run_agent_step(
                self.sessions, step, unit, as_given, offered if workflows else None
            )
        except StepFailure as failure:
            raise await self._failed(unit, failure) from failure.__cause__
        self.run.remember(site, output)
        return output

    async def decide(self, site: Site, step: DecisionStep) -> tuple[str, JsonValue]:
        """An agent decision (LWIR's ``decision`` with an ``agent``): route and output."""
        record = self.state.steps.get(site.text)
        if record is not None and record.status == "completed":
            hit = self.run.recorded(site.text, site.identity)
            assert hit is not None
            output, route = self.run.replay(site.text, hit)
            assert route is not None
            return route, output
        self._recorded(site)  # a recorded failure is raised again
        if self.sessions is None:
            raise ConfigError(f"run {self.run_id!r}: this pass offers no agents")
        unit = StepUnit(site=site, kind="decision", step_id=step.id, retry=step.retry)
        try:
            return await decide_once(self.run, self.sessions, step, unit)
        except StepFailure as failure:
            raise await self._failed(unit, failure) from failure.__cause__

    async def plan(self, site: Site, goal_workflow: Workflow, input: JsonValue) -> JsonValue:
        """``ctx.plan``: a planned workflow run as a sub-run (``plan_and_run``); its output."""
        done, output = self._recorded(site)
        if done:
            return output
        if self.sessions is None:
            raise ConfigError(f"run {self.run_id!r}: this pass offers no planner")
        unit = StepUnit(site=site, kind="workflow", step_id=site.path.step_id, retry=_NO_RETRY)
        try:
            output = await plan_and_run(self.sessions, unit, goal_workflow, input)
        except StepFailure as failure:
            raise await self._failed(unit, failure) from failure.__cause__
        self.run.remember(site, output)
        return output

    def _startable(self, site: Site, spec: WorkflowSpec, body: Callable[..., Any]) -> Startable:
        """``body`` as a workflow an orchestrator at ``site`` may start."""

        def bind(function: Callable[..., Any], given: object) -> object:
            return bind_input(function, given, where=f"workflow {spec.name!r}")

        def start(function: Callable[..., Any], given: JsonValue, run_id: str) -> Any:
            return self.start_child(
                function,
                given,
                run_id=run_id,
                parent_run_id=self.run_id,
                parent_step_path=site.text,
                retry_failed=self.run.retrying,
            )

        return startable(spec, body, bind, start)

    async def branches(
        self,
        site: Site,
        name: str,
        body: Callable[[WorkflowContext, Any], Awaitable[Any]],
        branches: list[tuple[str, Any]],
        concurrency: int,
    ) -> list[Any]:
        """``ctx.branches``: ``body`` per item in a scope of its own (``name[key]``), at most
        ``concurrency`` at once; the list of results committed at the map."""
        done, output = self._recorded(site)
        if done:
            assert isinstance(output, list)
            return output
        await self._map_started(site, name)
        semaphore = asyncio.Semaphore(concurrency)
        results: list[Any] = [None] * len(branches)
        # Each branch's scope is claimed now, in item order, whatever order they run in.
        scopes = [CallScope(prefix=site.path.branch(key)) for key, _ in branches]

        async def branch(index: int) -> None:
            async with semaphore:
                context = WorkflowContext(self, scopes[index])
                results[index] = await body(context, branches[index][1])

        await all_branches(len(branches), branch, StepFailedError | NonDeterminismError)
        output = to_json_value(results, where=f"the results of map {site.text!r}")
        assert isinstance(output, list)
        return await self._map_completed(site, name, output)

    async def _map_started(self, site: Site, step_id: str) -> None:
        """A map's ``StepAttemptStarted``, once (not again on a resume of its branches)."""
        record = self.state.steps.get(site.text)
        if record is None or record.attempts == 0:
            await self.run.append(
                [
                    StepAttemptStarted(
                        step_path=site.text, step_id=step_id, kind="map", visit=site.visit
                    )
                ],
                sync=False,
            )

    async def _map_completed(self, site: Site, step_id: str, results: list[Any]) -> list[Any]:
        """Commit a map's list of results at the map's own path; the list."""
        run = self.run
        unit = StepUnit(site=site, kind="map", step_id=step_id, retry=_NO_RETRY)
        await run.append([run.completed(unit, results)], sync=True)
        run.remember(site, results)
        return results
