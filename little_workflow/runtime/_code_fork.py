"""Forking a code-first run: a new run that keeps the calls its source completed before one.

A code-first body's calls are ordered by their position (``_code_run``): the fork keeps
every unit the source completed at a position before ``at``'s, copies their events into
the new run's log right after its ``RunStarted`` (one durable commit, as an LWIR fork
does: ``_fork``), and drives the new run like a resume: the kept calls replay, ``at``
and everything after it run anew, with the fork's input or (``workflow``) another body.
A body that no longer makes the kept calls in the same order stops with
``NonDeterminismError``, as a resume would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from little_workflow.codec import JsonValue, dumps
from little_workflow.errors import ConfigError, InvalidForkPointError, shown
from little_workflow.events import ForkOrigin, RecordedEvent
from little_workflow.ids import new_id, validate_id
from little_workflow.runtime._code_places import call_place
from little_workflow.runtime._code_program import CodeHost, CodeProgram, load_code_program
from little_workflow.runtime._code_run import bind_input
from little_workflow.runtime._launch import RunResult, make_run_dirs
from little_workflow.runtime._run_lock import locked
from little_workflow.runtime._state import RunState, fold

__all__ = ["fork_code_run"]


def _kept(state: RunState, at: str) -> set[str]:
    """The completed calls of the top level before ``at``, with the branches of the maps
    among them; ``InvalidForkPointError`` if ``at`` is not a completed top-level call."""
    places = {
        path: place
        for path, record in state.steps.items()
        if record.status == "completed" and (place := call_place(path, record.identity)) is not None
    }
    place = places.get(at)
    if place is None or place[0] != "":
        top = [path for path, (scope, _) in places.items() if scope == ""]
        raise InvalidForkPointError(
            f"cannot fork run {shown(state.run_id)} at {shown(at)}: a code-first run forks at "
            f"a call its body made and completed; those of this run: "
            f"{', '.join(top[:12]) or 'none'}",
            code="fork_unknown_step",
            run_id=state.run_id,
            at=at,
            fork_at=None,
        )
    kept = {
        path for path, (scope, position) in places.items() if scope == "" and position < place[1]
    }
    maps = tuple(f"{path}[" for path in kept)
    return kept | {path for path in places if path.startswith(maps)}


def _copied(records: tuple[RecordedEvent, ...], kept: set[str]) -> list[Any]:
    events = []
    for record in records:
        event = record.event
        if event.RUN_STATUS is not None:
            continue  # the run's lifecycle: the fork has its own
        owner = getattr(event, "step_path", None) or getattr(event, "session_id", None)
        if isinstance(owner, str) and owner in kept:
            events.append(event)
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
    kept = _kept(source, at)
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
        make_run_dirs(host.data_dir, fork_id)
        started = program.run_started(
            run_input, parent_run_id=None, parent_step_path=None, outer_loop=None
        ).model_copy(update={"forked_from": origin})
        front = program.front_end(RunState(run_id=fork_id), retrying=False)
        # One durable commit: a kill leaves no fork, or a fork with all its kept calls.
        await front.run.append([started, *_copied(records, kept)], sync=True)
        front.run.writer.discard()
        return await host.launcher().drive(program.front_end(front.run.state, retrying=False))
