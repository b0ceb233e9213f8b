"""Forking a code-first run: a new run that keeps the calls its source completed before one.

A code-first body's calls are ordered by their position in their scope (``_code_places``):
a fork at ``at`` keeps every call the source completed before ``at`` in ``at``'s scope,
and, for each map (``ctx.map``, ``ctx.branches``) ``at`` is inside, the map's other
branches whole and the calls before the map in its own scope. It copies their events into
the new run's log right after its ``RunStarted`` (one durable commit, as an LWIR fork
does: ``_fork``), and drives the new run like a resume: the kept calls replay, ``at`` and
everything after it in its branch run anew, then the maps around it complete again and
the body goes on, with the fork's input or (``workflow``) another body. A body that no
longer makes the kept calls in the same order stops with ``NonDeterminismError``, as a
resume would.

``at`` is a call the source completed (at any depth: ``score[c2]``,
``review[doc].check``), or a branch it started (``review[doc]``: that branch runs again
from its start). Unlike an LWIR fork, which walks a map's branches in item order and so
runs the branches after ``at``'s again, a code-first fork keeps them: its log does not
record item order, and branches are scopes of their own that do not read each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from little_workflow.codec import JsonValue, dumps
from little_workflow.errors import (
    ConfigError,
    InvalidForkPointError,
    InvalidStepPathError,
    shown,
)
from little_workflow.events import ForkOrigin, RecordedEvent, StepAttemptStarted
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import StepPath, parse_step_path
from little_workflow.runtime._agents import execution_path
from little_workflow.runtime._code_places import call_place, scope_of
from little_workflow.runtime._code_program import CodeHost, CodeProgram, load_code_program
from little_workflow.runtime._code_run import bind_input
from little_workflow.runtime._launch import RunResult
from little_workflow.runtime._run_lock import locked
from little_workflow.runtime._state import RunState, fold

__all__ = ["fork_code_run"]


def _kept(state: RunState, records: tuple[RecordedEvent, ...], at: str) -> set[str]:
    """The completed calls a fork at ``at`` keeps (see the module docstring), with the
    branches of the maps among them; ``InvalidForkPointError`` if ``at`` is neither a
    call the source completed nor a branch it started."""
    places = {
        path: place
        for path, record in state.steps.items()
        if record.status == "completed" and (place := call_place(path, record.identity)) is not None
    }
    started: dict[str, int] = {}
    for record in records:
        if isinstance(record.event, StepAttemptStarted):
            started.setdefault(record.event.step_path, record.seq)
    try:
        parsed = parse_step_path(at)
    except InvalidStepPathError as exc:
        _refuse(state, places, at, str(exc))
    position: int | None
    if at in places:
        scope, position = places[at]
    elif parsed.is_branch and any(_within(path, at) for path in state.steps):
        scope, position = at, 0  # a branch the source started runs again from its start
    else:
        _refuse(state, places, at, "it is not a call the source completed")
    kept: set[str] = set()
    map_path = at
    while True:
        if position is not None:
            kept |= {path for path, (s, n) in places.items() if s == scope and n < position}
        else:
            # The map never completed, so its position is not in the log: keep the calls
            # of its scope that completed before it started (none of them can depend on
            # it, and all of the calls before it in a body that awaits each one).
            began = started.get(map_path, 0)
            kept |= {
                path
                for path, (s, _) in places.items()
                if s == scope and (state.steps[path].completed_seq or began) < began
            }
        if not scope:
            break
        # The fork point is inside branch ``scope`` of a map: the map's other branches
        # ran apart from it, and are kept whole.
        branch_map = parse_step_path(scope).parent
        assert branch_map is not None
        map_path = str(branch_map)
        kept |= {p for p in places if p.startswith(f"{map_path}[") and not _within(p, scope)}
        if map_path in places:
            scope, position = places[map_path]
        else:
            scope, position = scope_of(map_path), None
    maps = tuple(f"{path}[" for path in kept)
    return kept | {path for path in places if path.startswith(maps)}


def _within(path: str, branch: str) -> bool:
    """Whether ``path`` is branch ``branch`` or inside it."""
    return path == branch or path.startswith((f"{branch}.", f"{branch}["))


def _refuse(state: RunState, places: dict[str, tuple[str, int]], at: str, why: str) -> NoReturn:
    record = state.steps.get(at)
    branch = _enclosing_branch(at) if record is not None else None
    points = list(places)
    raise InvalidForkPointError(
        f"cannot fork run {shown(state.run_id)} at {shown(at)}: {why}; a code-first run forks "
        "at a call its body made and completed, at any depth, or at a branch of a map"
        + (f" (fork at {branch!r} to run that branch again from its start)" if branch else "")
        + "; "
        + f"the calls of this run: {', '.join(points[:12]) or 'none'}"
        + (", ..." if len(points) > 12 else ""),
        code="fork_point_not_reached" if branch else "fork_unknown_step",
        run_id=state.run_id,
        at=at,
        fork_at=branch,
    )


def _enclosing_branch(at: str) -> str | None:
    """The branch path a call at ``at`` was made in, if it was made in one."""
    try:
        parsed: StepPath | None = parse_step_path(at)
    except InvalidStepPathError:
        return None
    while parsed is not None and not parsed.is_branch:
        parsed = parsed.parent
    return None if parsed is None else str(parsed)


def _copied(records: tuple[RecordedEvent, ...], kept: set[str]) -> list[Any]:
    events = []
    for record in records:
        event = record.event
        if event.RUN_STATUS is not None:
            continue  # the run's lifecycle: the fork has its own
        owner = getattr(event, "step_path", None) or getattr(event, "session_id", None)
        if isinstance(owner, str) and execution_path(owner) in kept:
            events.append(event)  # a kept tool call's fixer sessions (``#fix[n]``) too
    return events


async def fork_code_run(
    host: CodeHost,
    source: RunState,
    records: tuple[RecordedEvent, ...],
    *,
    at: str,
    run_id: str | None,
    input: object,
    same_input: bool,
    workflow: Callable[..., Any] | None,
) -> RunResult:
    """``Runtime.fork`` of a code-first run (see the module docstring)."""
    fork_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
    kept = _kept(source, records, at)
    program = load_code_program(host, source) if workflow is None else CodeProgram(host, workflow)
    run_input: JsonValue
    if same_input:
        run_input = source.input
    else:
        dumps(input, where="fork input")
        run_input = input  # type: ignore[assignment]
    bind_input(program.function, run_input, where=f"the fork of run {source.run_id!r}")
    origin = ForkOrigin(run_id=source.run_id, at=at)
    async with locked(host, fork_id):
        existing = await host.events.read(fork_id)
        if existing:
            state = fold(fork_id, existing)
            if state.forked_from != origin:
                raise ConfigError(
                    f"run {shown(fork_id)} already exists and is not this fork; resume it, or "
                    "fork with another run id",
                    code="run_id_conflict",
                )
            # The same fork again (a command re-run after a kill): continue it.
            program.check_same_run(state, run_input)
            return await host.launcher().continue_run(state, program, reason="resume")
        started = program.run_started(
            run_input, parent_run_id=None, parent_step_path=None, outer_loop=None
        ).model_copy(update={"forked_from": origin})
        front = program.front_end(RunState(run_id=fork_id), retrying=False)
        # One durable commit: a kill leaves no fork, or a fork with all its kept calls.
        await front.run.append([started, *_copied(records, kept)], sync=True)
        front.run.writer.discard()
        return await host.launcher().drive(program.front_end(front.run.state, retrying=False))
