"""Forking a run: a new run that keeps the work its source did before a step path.

``Runtime.fork(run_id, at=path, ...)`` replays the source run's log with execution
switched off until the walk reaches ``at`` (the walk is deterministic: see
``_lwir_walk``). The recorded steps it replayed on the way are *kept*: their events are
copied into the new run's log, right after its ``RunStarted`` (which records
``forkedFrom``), in one durable commit. The new run then goes on like a resumed run: its
memo table replays every kept step, so nothing before ``at`` calls a function, a model or
a tool, and ``at`` and everything after it in walk order run anew, with the changes
(another workflow, input, model slots, prompts, retry policies).

Rejected designs:

* A log that points into its source's log instead of copying events: every reader (the
  fold, resume, the CLI, the UI, retention) would have to follow chains of runs. A copy
  keeps "a run's state is the fold of its own log" true, and it costs the events, not
  their payloads: payloads stored by content hash are the same content for both runs.
* Keeping the events logged before ``at`` first started: map branches run concurrently
  and interleave in the log, so log order is not walk order; and a step the source ran
  after a failure and a retry would be kept or not by accident of timing.
* Seeding the new run's memo table in memory: a kill would lose the seed. The copied
  events make a fork resumable (after a kill, by ``resume``) like any other run.
"""

from __future__ import annotations

import difflib
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn, Protocol, cast

from pydantic import ValidationError

from little_workflow.codec import JsonValue, dumps, sha256_digest
from little_workflow.errors import (
    ConfigError,
    InvalidForkPointError,
    LittleWorkflowError,
    shown,
)
from little_workflow.events import Event, ForkOrigin, RecordedEvent, RunStarted
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import (
    BranchSegment,
    MapStep,
    RetryPolicy,
    Step,
    StepBase,
    Workflow,
    canonical_definition,
    parse_step_path,
    parse_workflow,
)
from little_workflow.runtime._host import RunHost, StoreHost, SubRunner
from little_workflow.runtime._launch import Launcher, RunResult
from little_workflow.runtime._lwir_program import LwirProgram, fork_hint, load_model
from little_workflow.runtime._lwir_walk import lwir_walk
from little_workflow.runtime._run_lock import locked
from little_workflow.runtime._sessions import step_at
from little_workflow.runtime._state import RunState, fold
from little_workflow.runtime._workflows import WorkflowVersion, edited_version

if TYPE_CHECKING:
    import os

    from little_workflow.harness._slots import ModelSlot

__all__ = ["SAME_INPUT", "ForkHost", "ForkPlan", "fork_hint", "fork_run", "plan_fork"]


class ForkHost(RunHost, StoreHost, SubRunner, Protocol):
    """What a fork uses of the runtime it is made with (a ``Runtime``)."""

    async def open(self) -> object:
        """Open the store (idempotent)."""
        ...

    def launcher(self, sub_runner: SubRunner | None = None) -> Launcher:
        """The launcher of this host's runs."""
        ...

    def with_model_slots(self, model_slots: Mapping[str, ModelSlot] | None) -> ForkHost:
        """A view of this host with ``model_slots`` on top (for one fork)."""
        ...


class _Same(enum.Enum):
    SAME_INPUT = "same input"


#: ``Runtime.fork``'s default ``input``: the source run's (``None`` is an input too).
SAME_INPUT: Final = _Same.SAME_INPUT

#: Fork points listed in an error message, at most.
_LISTED = 12


@dataclass(frozen=True, slots=True, kw_only=True)
class ForkPlan:
    """What a fork of ``state`` at ``at`` keeps: the source's completed steps before it."""

    state: RunState
    version: WorkflowVersion
    records: tuple[RecordedEvent, ...]
    at: str
    #: The kept step paths, in walk order (a kept map keeps its branches with it).
    kept: tuple[str, ...]


# --- where a fork may start -------------------------------------------------------------


def _fork_points(workflow: Workflow) -> list[str]:
    """Every step of ``workflow`` as a fork point would name it (branches as ``[<key>]``)."""
    points: list[str] = []

    def visit(steps: tuple[Step, ...], prefix: str) -> None:
        for step in steps:
            name = f"{prefix}{step.id}" + (".visit[0]" if step.visit_limit > 1 else "")
            points.append(name)
            if isinstance(step, MapStep):
                visit(step.body, f"{name}[<key>].")

    visit(workflow.steps, "")
    return points


def _unknown(state: RunState, version: WorkflowVersion, at: str, why: str) -> NoReturn:
    points = _fork_points(version.workflow)
    # Matched without the visit suffix too: 'judg' is close to 'judge.visit[0]'.
    names = {point.replace(".visit[0]", ""): point for point in points}
    names.update({point: point for point in points})
    close = list(
        dict.fromkeys(names[n] for n in difflib.get_close_matches(at, names, n=3, cutoff=0.6))
    )
    hint = f"; did you mean {' or '.join(repr(p) for p in close)}?" if close else ""
    listed = ", ".join(points[:_LISTED]) + (", ..." if len(points) > _LISTED else "")
    raise InvalidForkPointError(
        f"cannot fork run {shown(state.run_id)} at {shown(at)}: {why}{hint} (the steps of workflow "
        f"{version.name!r}: {listed})",
        code="fork_unknown_step",
        run_id=state.run_id,
        at=at,
        fork_at=None,
    )


def _check_shape(state: RunState, version: WorkflowVersion, at: str) -> str:
    """``at`` in canonical form, if it names a step of the source's workflow the way the
    walk names it (a visit suffix exactly on looping steps, branches only of maps)."""
    try:
        parsed = parse_step_path(at)
    except LittleWorkflowError as exc:
        _unknown(state, version, at, str(exc))
    steps: tuple[Step, ...] = version.workflow.steps
    found: StepBase | None = None
    for segment in parsed.segments:
        if isinstance(segment, BranchSegment):
            if not isinstance(found, MapStep):
                assert found is not None  # a path starts with a step
                _unknown(state, version, at, f"step {found.id!r} is not a map: it has no branches")
            steps = found.body
            continue
        found = next((step for step in steps if step.id == segment.step_id), None)
        if found is None:
            _unknown(state, version, at, f"there is no step {shown(segment.step_id)} there")
        loops = found.visit_limit > 1
        if loops and segment.visit is None:
            _unknown(
                state,
                version,
                at,
                f"step {shown(segment.step_id)} may run {found.visit_limit} times (maxVisits), "
                f"so a fork names one visit: {segment.step_id}.visit[<n>], from 0",
            )
        if not loops and segment.visit is not None:
            _unknown(state, version, at, f"step {shown(segment.step_id)} runs once: drop .visit[n]")
    if parsed.is_branch:
        _unknown(state, version, at, "that is a map branch, not a step: name a step of its body")
    return str(parsed)


async def plan_fork(runtime: RunHost, source_run_id: str, at: str) -> ForkPlan:
    """What a fork of ``source_run_id`` at ``at`` keeps, or ``InvalidForkPointError``."""
    records = tuple(await runtime.events.read(source_run_id))
    if not records:
        raise ConfigError(
            f"there is no run {shown(source_run_id)} in this store", code="run_not_found"
        )
    state = fold(source_run_id, records)
    version = await runtime.catalog.load(state.workflow_version_id)
    at = _check_shape(state, version, at)
    walk = lwir_walk(runtime, version, state, replay_only=True, stop_at=at)
    await walk.replay()
    if walk.stopped is None:
        if walk.frontier:
            why = f"it stopped at {walk.frontier[0]!r}, which never completed, before that"
            fork_at: str | None = walk.frontier[0]
        else:
            why = "its walk never went there (its routes or map items led elsewhere)"
            fork_at = None
        reached = ", ".join(walk.run.replayed_paths[:_LISTED]) or "none"
        raise InvalidForkPointError(
            f"cannot fork run {shown(state.run_id)} at {shown(at)}: {why}; the steps it completed: "
            f"{reached}" + (f"; fork at {fork_at!r} instead" if fork_at else ""),
            code="fork_point_not_reached",
            run_id=state.run_id,
            at=at,
            fork_at=fork_at,
        )
    if walk.stopped:
        first = walk.stopped[0]
        raise InvalidForkPointError(
            f"cannot fork run {shown(state.run_id)} at {shown(at)}: step {first!r} comes before "
            f"it and never completed, and a fork keeps only completed steps; fork at {first!r}",
            code="fork_point_not_reached",
            run_id=state.run_id,
            at=at,
            fork_at=first,
        )
    return ForkPlan(
        state=state, version=version, records=records, at=at, kept=tuple(walk.run.replayed_paths)
    )


# --- what changes -----------------------------------------------------------------------


def _edit(
    workflow: Workflow,
    prompts: Mapping[str, Mapping[str, JsonValue]],
    policy: Mapping[str, RetryPolicy | Mapping[str, JsonValue]],
) -> Workflow:
    """``workflow`` with the prompts and retry policies of the named steps replaced."""
    document = canonical_definition(workflow)
    pending = set(prompts) | set(policy)
    known: list[str] = []

    def edit(steps: JsonValue) -> None:
        assert isinstance(steps, list)
        for step in steps:
            assert isinstance(step, dict)
            step_id, kind = step["id"], step["kind"]
            assert isinstance(step_id, str)
            known.append(step_id)
            pending.discard(step_id)
            if step_id in prompts:
                target = step.get("agent") if kind == "decision" else step
                if kind not in ("agent", "decision") or not isinstance(target, dict):
                    raise ConfigError(
                        f"prompts: step {step_id!r} is a {kind} step; prompts are an agent "
                        "step's or an agent decision's"
                    )
                for field, value in prompts[step_id].items():
                    if field not in ("instructions", "prompt"):
                        raise ConfigError(
                            f"prompts[{step_id!r}]: {field!r} is not 'instructions' or 'prompt'"
                        )
                    target[field] = value
            if step_id in policy:
                if kind in ("map", "output"):
                    raise ConfigError(f"policy: step {step_id!r} is a {kind} step, with no retry")
                given = policy[step_id]
                try:
                    retry = (
                        given
                        if isinstance(given, RetryPolicy)
                        else RetryPolicy.model_validate(dict(given))
                    )
                except ValidationError as exc:
                    raise ConfigError(f"policy[{step_id!r}]: {exc}") from exc
                step["retry"] = retry.model_dump(mode="json", by_alias=True)
            if kind == "map":
                edit(step["body"])

    edit(document["steps"])
    if pending:
        raise ConfigError(
            f"the workflow {workflow.name!r} has no step {sorted(pending)[0]!r} to change "
            f"(its steps: {', '.join(known)})"
        )
    return parse_workflow(document, source=f"workflow {workflow.name!r} with the fork's changes")


def _first_changed(plan: ForkPlan, version: WorkflowVersion) -> str | None:
    """The first kept step the new version does not define as the source did."""
    for path in plan.kept:
        record = plan.state.steps[path]
        old_step = step_at(plan.version.workflow, path)
        old = record.identity or (None if old_step is None else plan.version.identity(old_step))
        new_step = step_at(version.workflow, path)
        if new_step is None or version.identity(new_step) != old:
            return path
    return None


def _owner(event: Event) -> str | None:
    """The step path an event belongs to (a session's: its step's), if it belongs to one."""
    if event.RUN_STATUS is not None:
        return None  # the run's lifecycle: the fork has its own
    path = getattr(event, "step_path", None) or getattr(event, "session_id", None)
    if not isinstance(path, str):
        return None
    fix = path.find("#fix[")
    return path if fix < 0 else path[:fix]


def _copied(plan: ForkPlan) -> list[Event]:
    """The events of the kept steps (and of the branches of kept maps), in log order."""
    kept = set(plan.kept)
    copied: list[Event] = []
    for record in plan.records:
        owner = _owner(record.event)
        if owner is None:
            continue
        if owner in kept or any(
            owner[:index] in kept for index, char in enumerate(owner) if char == "["
        ):
            copied.append(record.event)
    return copied


# --- the fork -------------------------------------------------------------------------


async def fork_run(
    runtime: ForkHost,
    source_run_id: str,
    *,
    at: str,
    run_id: str | None,
    input: object,
    workflow: Workflow | str | os.PathLike[str] | None,
    model_slots: Mapping[str, ModelSlot] | None,
    prompts: Mapping[str, Mapping[str, JsonValue]] | None,
    policy: Mapping[str, RetryPolicy | Mapping[str, JsonValue]] | None,
) -> RunResult:
    """``Runtime.fork`` (see there, and the module docstring)."""
    await runtime.open()
    validate_id(source_run_id, what="run id")
    fork_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
    if not isinstance(at, str):
        raise InvalidForkPointError(
            f"a fork point is a step path string, not {type(at).__name__}",
            code="fork_unknown_step",
            run_id=source_run_id,
            at=str(at),
            fork_at=None,
        )
    plan = await plan_fork(runtime, source_run_id, at)
    source = plan.state
    if input is SAME_INPUT:
        run_input = source.input
    else:
        dumps(input, where="fork input")  # plain JSON, or InvalidValueError
        run_input = cast(JsonValue, input)
    forked = runtime.with_model_slots(model_slots)
    if workflow is None:
        base, source_file = plan.version.workflow, None
    else:
        base, source_file = load_model(workflow)
    edited = _edit(base, prompts or {}, policy or {}) if prompts or policy else base
    if workflow is None:
        version = plan.version if edited is base else edited_version(plan.version, edited)
    else:
        version = runtime.catalog.resolve(edited, source=source_file)
    forked.check_callables(version)
    changed = _first_changed(plan, version)
    if changed is not None:
        raise InvalidForkPointError(
            f"cannot fork run {shown(source.run_id)} at {shown(plan.at)}: step {changed!r}, "
            "which the fork would keep, is not defined the same way in the fork's workflow. "
            f"To keep the work done before the first changed step, fork at {changed!r}",
            code="fork_step_changed",
            run_id=source.run_id,
            at=plan.at,
            fork_at=changed,
        )
    origin = ForkOrigin(run_id=source.run_id, at=plan.at)
    program = LwirProgram(forked, version, forked)
    async with locked(runtime, fork_id):
        existing = await runtime.events.read(fork_id)
        if existing:
            state = fold(fork_id, existing)
            if (
                state.forked_from != origin
                or state.workflow_version_id != version.version_id
                or sha256_digest(state.input) != sha256_digest(run_input)
            ):
                raise ConfigError(
                    f"run {shown(fork_id)} already exists and is not this fork; resume it, or "
                    "fork with another run id",
                    code="run_id_conflict",
                )
            # The same fork again (a command re-run after a kill): continue it.
            return await forked.launcher().continue_run(state, program, reason="resume")
        version = await runtime.catalog.store(version)
        started = RunStarted(
            workflow_name=version.name,
            definition_hash=version.definition_hash,
            workflow_version_id=version.version_id,
            input=run_input,
            forked_from=origin,
        )
        # One durable commit: a kill leaves either no fork or a fork with all its kept
        # steps, never one that would run again a step it should have kept.
        program = LwirProgram(forked, version, forked)
        writer = program.front_end(RunState(run_id=fork_id), retrying=False).run
        await writer.append([started, *_copied(plan)], sync=True)
        writer.writer.discard()
        # A second execution, whose memo table is built from the folded copy: from here
        # on this is a resume in all but the RunResumed event.
        front = program.front_end(writer.state, retrying=False)
        return await forked.launcher().drive(front)
