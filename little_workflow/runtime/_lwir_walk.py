"""``LwirWalk``: the LWIR front end, deciding which step comes next; the core runs each.

The walk is deterministic: it starts at the first step and follows ``next`` and decision
routes, and every value it reads is either the run's input or a step output that is
committed to the log before the walk goes on. So walking again after a crash reaches the
same paths in the same order, and at each one the core's memo answers with the recorded
output (nothing runs), until the first path with no ``StepCompleted``: there the run
continues. Visit counts and a decision's pending target come out of the same walk, from
the recorded routes; replay is this walk with execution switched off.

The walk renders templates, routes decisions, fans out maps, resolves functions and
tools and picks sub-workflows; everything durable (attempts, outbox, commits, the end of
the run) is ``DurableRun``'s (``_core``). An ``execute`` or ``decision`` function's
result is stored once, in ``StepCompleted``. Older logs also hold it in a
``harness.execute_step.succeeded`` committed in the same transaction, a second copy the
walk no longer writes; the fold still reads it, and a step whose old log has it without
a ``StepCompleted`` completes from it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.durable._side_effects import declared_side_effect
from little_workflow.errors import (
    ConfigError,
    LwirError,
    RunFailedError,
    TemplateError,
)
from little_workflow.events import (
    Event,
    HarnessSessionCompleted,
    RunStarted,
    StepAttemptStarted,
    StepCompleted,
)
from little_workflow.lwir import (
    AgentStep,
    DecisionStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    RetryPolicy,
    Step,
    StepBase,
    StepPath,
    SubWorkflowStep,
    ToolStep,
    effective_next,
    parse_workflow,
    render,
)
from little_workflow.runtime._agents import (
    Fixer,
    Render,
    SessionRun,
    decide_with_agent,
    run_agent_step,
)
from little_workflow.runtime._core import (
    Arguments,
    DurableRun,
    Frontier,
    Outbox,
    Site,
    StepFailure,
    StepUnit,
    first_failure,
)
from little_workflow.runtime._functions import invoke
from little_workflow.runtime._host import RunHost, SubRunner
from little_workflow.runtime._lwir_steps import (
    ToolCallRecords,
    branch_keys,
    chosen_route,
    config_failure,
    scope_entry,
)
from little_workflow.runtime._state import RunState
from little_workflow.runtime._workflows import WorkflowVersion

__all__ = ["LwirWalk", "Scope", "lwir_walk"]

Scope = dict[str, Any]

#: The policy of a step kind without one (a map, a sub-run): one attempt.
_NO_RETRY = RetryPolicy()


def lwir_walk(
    host: RunHost,
    version: WorkflowVersion,
    state: RunState,
    *,
    sub_runner: SubRunner | None = None,
    replay_only: bool = False,
    retrying: bool = False,
    stop_at: str | None = None,
) -> LwirWalk:
    """A walk of ``version`` over a new ``DurableRun`` of ``state``."""
    # The run's recorded definition hash is this version's: every recorded step was made
    # by the same step definition, so a hit needs no identity check.
    pinned = state.definition_hash in ("", version.definition_hash)
    run = DurableRun(host, state, pinned=pinned, retrying=retrying)
    return LwirWalk(
        run, host, version, sub_runner=sub_runner, replay_only=replay_only, stop_at=stop_at
    )


class LwirWalk:
    """The LWIR front end of one pass of one run: walks the workflow, calls the core per step."""

    def __init__(
        self,
        run: DurableRun,
        host: RunHost,
        version: WorkflowVersion,
        *,
        sub_runner: SubRunner | None = None,
        replay_only: bool = False,
        stop_at: str | None = None,
    ) -> None:
        self.run = run
        #: The core's state and id (the state is folded in place as events commit).
        self.state: RunState = run.state
        self.run_id = run.run_id
        self.host = host
        self.version = version
        self.sub_runner = sub_runner
        self.replay_only = replay_only
        #: Replay only: the path where the walk stops, as at a frontier (a fork point).
        self.stop_at = stop_at
        #: Once the walk reached ``stop_at``: the frontier it had found before it.
        self.stopped: tuple[str, ...] | None = None
        self.frontier: list[str] = []
        #: Per scope (by ``id`` of its steps): each step's position by id, and the
        #: position of the step each one falls through to (``effective_next``).
        self._indexes: dict[int, tuple[dict[str, int], list[int | None]]] = {}

    async def execute(self) -> JsonValue:
        """Walk the run to its end under the core (``DurableRun.execute``)."""
        return await self.run.execute(self.walk)

    def walk(self) -> Awaitable[JsonValue]:
        """The walk of the workflow from its first step (awaited: the run's output)."""
        # The scope's coroutine itself, not one awaiting it: every step's every wait
        # passes through each coroutine on the way, so the chain is kept short.
        scope: Scope = {"input": self.state.input, "steps": {}, "run": {"id": self.run_id}}
        return self._scope(self.version.workflow.steps, None, scope)

    async def replay(self) -> JsonValue:
        """Walk the run without executing anything; stop at the first uncompleted steps."""
        scope: Scope = {"input": self.state.input, "steps": {}, "run": {"id": self.run_id}}
        try:
            output: JsonValue = await self._scope(self.version.workflow.steps, None, scope)
        except Frontier:
            return None
        except StepFailure as failure:
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
                raise StepFailure(
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
            output, route, failed_to = await scope_entry(self.run, self._step, step, path, scope)
            if failed_to is not None:  # failed for good: on to its ``onError``
                position = index[failed_to]
                continue
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
        raise Frontier(path)

    def _render(
        self, value: JsonValue, scope: Scope, step: StepBase, path: str, field: str
    ) -> JsonValue:
        try:
            return render(value, scope, where=f"{path}.{field}")
        except TemplateError as exc:
            raise StepFailure("template_error", str(exc), path=path, step_id=step.id) from exc

    # --- steps ------------------------------------------------------------------------

    async def _step(
        self, step: Step, path: StepPath, visit: int | None, scope: Scope
    ) -> tuple[JsonValue, str | None]:
        path_text = str(path)
        run = self.run
        hit = run.recorded(path_text, lambda: self.version.identity(step))
        if (
            hit is not None
            and self.stop_at is not None
            and self.stop_at.startswith(f"{path_text}[")
        ):
            # The stop is inside this completed map: walk its branches up to it.
            assert isinstance(step, MapStep)
            site = Site(path, path_text, visit, self.version.identity(step))
            return await self._map(step, site, scope), None
        if hit is not None:
            return run.replay(path_text, hit)
        run.check_visit(step.id, path_text, visit)
        site = Site(path, path_text, visit, self.version.identity(step))
        if self.replay_only:
            if not isinstance(step, MapStep):
                self.frontier.append(path_text)
                raise Frontier(path_text)
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
            output = await run_agent_step(
                self._session_run(), step, self._unit(step, site), self._renderer(scope)
            )
        else:  # pragma: no cover - validation admits no other kind
            raise ConfigError(f"step kind {step.kind!r} cannot run yet")
        run.remember(site, output, route)
        return output, route

    def _unit(self, step: Step, site: Site, outbox: Outbox | None = None) -> StepUnit:
        """The core's description of ``step`` at ``site``."""
        # Only a step with a fixer consults one: the lookup of its earlier decisions
        # walks every session of the run, so a plain step skips it.
        fixer = getattr(step, "fixer", None)
        return StepUnit(
            site,
            step.kind,
            step.id,
            getattr(step, "retry", _NO_RETRY),
            outbox,
            None if fixer is None else Fixer(self._session_run(), step, fixer),
        )

    def _session_run(self) -> SessionRun:
        return SessionRun(
            run=self.run,
            host=self.host,
            version=self.version,
            sub_runner=self._sub_runs(),
        )

    def _sub_runs(self) -> SubRunner:
        if self.sub_runner is None:  # pragma: no cover - a replay starts no sub-run
            raise ConfigError(f"run {self.run_id!r}: this walk only replays; it runs nothing")
        return self.sub_runner

    def _renderer(self, scope: Scope) -> Render:
        def rendered(value: JsonValue, step: StepBase, path: str, field: str) -> JsonValue:
            return self._render(value, scope, step, path, field)

        return rendered

    def _outbox(
        self,
        step: ExecuteStep | ToolStep,
        site: Site,
        scope: Scope,
        target: object,
    ) -> Outbox | None:
        """The step's outbox if it is side-effecting (LWIR ``sideEffect`` or ``@side_effect``)."""
        declared = declared_side_effect(target)
        if step.side_effect is None and declared is None:
            return None
        key = f"{self.run_id}/{site.text}"
        if step.side_effect is not None and step.side_effect.key is not None:
            rendered = self._render(step.side_effect.key, scope, step, site.text, "sideEffect.key")
            if not isinstance(rendered, str) or not rendered:
                raise StepFailure(
                    "template_error",
                    f"step {site.text!r}: sideEffect.key rendered to {rendered!r}, not a "
                    "non-empty string",
                    path=site.text,
                    step_id=step.id,
                )
            key = rendered
        return Outbox(key=key, declared=declared)

    async def _call(
        self, step: ExecuteStep | DecisionStep, site: Site, scope: Scope
    ) -> tuple[JsonValue, str | None]:
        path = site.text
        record = self.state.steps.get(path)
        events: list[Event] = []
        run = self.run
        if record is not None and record.has_execute_result:
            # Committed before a crash, but not yet completed: complete it, do not call again.
            result = record.execute_result
        elif isinstance(step, DecisionStep) and step.agent is not None:
            unit = self._unit(step, site)
            session = self._session_run()
            render = self._renderer(scope)

            def decide(_attempt: int, _arguments: Arguments) -> Awaitable[Any]:
                return decide_with_agent(session, step, site, render)

            result, _ = await run.attempts(unit, decide)
            chosen, decided = chosen_route(step, path, result)
            events.append(HarnessSessionCompleted(session_id=path, output=result))
            events.append(run.completed(unit, decided, chosen))
            await run.append(events, sync=True)
            return decided, chosen
        else:
            assert step.fn is not None
            try:
                # Checked when the run started too; checked again here, where the call
                # is made, so no other path to a call can skip it.
                self.host.functions.check_offered(
                    step.fn,
                    workflow=self.version.name,
                    step=path,
                    computed=not self.version.trusted,
                )
                function, takes_ctx = self.host.functions.resolve(step.fn)
            except ConfigError as exc:
                raise config_failure(exc, path=path, step_id=step.id) from exc
            arguments = self._render(dict(step.with_), scope, step, path, "with")
            assert isinstance(arguments, dict)
            outbox = (
                self._outbox(step, site, scope, function) if isinstance(step, ExecuteStep) else None
            )

            unit = self._unit(step, site, outbox)

            def call(attempt: int, current: Arguments) -> Awaitable[Any]:
                # Most step functions take no context: do not build one for them.
                ctx = run.context(unit, attempt) if takes_ctx else None
                return invoke(function, takes_ctx, current or {}, ctx)

            result, _ = await run.attempts(unit, call, arguments=arguments)
        route: str | None = None
        output = result
        if isinstance(step, DecisionStep):
            route, output = chosen_route(step, path, result)
        events.append(
            StepCompleted(
                step_path=path,
                step_id=step.id,
                kind=step.kind,
                visit=site.visit,
                output=output,
                route=route,
                identity=site.identity,
            )
        )
        # The writer's own append: one coroutine less per step than ``run.append``.
        await run.writer.append(events, sync=True)
        return output, route

    async def _tool(self, step: ToolStep, site: Site, scope: Scope) -> JsonValue:
        path = site.text
        if step.tool not in self.host.toolset.registry:
            raise StepFailure(
                "runtime_config_error",
                f"step {path!r} calls tool {step.tool!r}, which is not registered",
                path=path,
                step_id=step.id,
            )
        tool = self.host.toolset.get(step.tool)
        arguments = self._render(dict(step.with_), scope, step, path, "with")
        assert isinstance(arguments, dict)

        outbox = self._outbox(step, site, scope, tool)
        run = self.run
        unit = self._unit(step, site, outbox)
        records = ToolCallRecords(path, step.tool, tool.redaction, sink=run.writer.secrets)

        def call(attempt: int, current: Arguments) -> Awaitable[Any]:
            return tool.invoke(current or {}, ctx=run.context(unit, attempt))

        result, attempt = await run.attempts(
            unit, call, arguments=arguments, started=records.started, failed=records.failed
        )
        succeeded, stored = records.succeeded(attempt, result)
        await run.append([succeeded, run.completed(unit, stored)], sync=True)
        return result

    async def _map(self, step: MapStep, site: Site, scope: Scope) -> JsonValue:
        path = site.text
        items = self._render(step.items, scope, step, path, "items")
        keys = branch_keys(step, path, items)
        assert isinstance(items, list)
        record = self.state.steps.get(path)
        if not self.replay_only and (record is None or record.attempts == 0):
            await self.run.append(
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
        writer = self.run.writer
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
                except Frontier:
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
            first = first_failure(group_error)
            raise first from first.__cause__
        finally:
            # Branches cancelled before they started never ran their own ``finally``.
            writer.branches -= unfinished
            unfinished = 0
        if pending:
            raise Frontier(path)
        if self.replay_only:
            done = self.state.completed(path)
            if done is not None:  # walked into for a stop that is not in any branch
                return done.output
            # Every branch is done, but the map's own commit is not.
            self.frontier.append(path)
            raise Frontier(path)
        await self.run.append([self.run.completed(self._unit(step, site), results)], sync=True)
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
            raise StepFailure(
                "invalid_workflow",
                f"step {path!r}: definition evaluated to {type(definition).__name__}, "
                "not an LWIR document",
                path=path,
                step_id=step.id,
            )
        try:
            workflow = parse_workflow(definition, source=f"the definition of step {path!r}")
            version = self.host.catalog.resolve(workflow, computed=True)
            self.host.check_callables(version)
        except LwirError as exc:
            raise StepFailure("invalid_workflow", str(exc), path=path, step_id=step.id) from exc
        except ConfigError as exc:
            raise config_failure(exc, path=path, step_id=step.id) from exc
        return await self.host.catalog.store(version)

    async def _started_version(self, sub_run_id: str | None) -> WorkflowVersion | None:
        """The version a sub-run started with, from its ``RunStarted`` (``None`` if none).

        A resumed ``definition`` step runs what its sub-run pinned, not the document
        resolved again against the workflows registered now.
        """
        if sub_run_id is None:
            return None
        first = await self.host.events.read(sub_run_id, limit=1)
        if not first or not isinstance(first[0].event, RunStarted):
            return None
        return await self.host.catalog.load(first[0].event.workflow_version_id)

    async def _sub_run(self, step: SubWorkflowStep, site: Site, scope: Scope) -> JsonValue:
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
                    self.host.check_callables(child, trusted=False)
                except ConfigError as exc:
                    raise config_failure(exc, path=path, step_id=step.id) from exc
        arguments = self._render(dict(step.with_), scope, step, path, "with")
        unit = self._unit(step, site)
        sub_run_id = await self.run.start_sub_run(unit, child.name, child.definition_hash)
        try:
            output = await self._sub_runs().run_child(
                child,
                arguments,
                run_id=sub_run_id,
                parent_run_id=self.run_id,
                parent_step_path=path,
                retry_failed=self.run.retrying,
            )
        except RunFailedError as exc:
            raise StepFailure(
                "sub_run_failed",
                f"sub-run {sub_run_id!r} of step {path!r} failed ({exc.cause_code}): {exc}",
                path=path,
                step_id=step.id,
            ) from exc
        await self.run.append([self.run.completed(unit, output)], sync=True)
        return output
