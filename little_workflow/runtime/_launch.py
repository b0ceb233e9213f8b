"""One path to start or continue a run, whatever front end drives it.

``run``, ``submit``'s worker (``execute_claim``), ``resume``, ``retry``, sub-runs and
forks all end here: ``Launcher.start_or_continue`` for a run that may not exist yet,
``Launcher.continue_run`` for one that does, ``Launcher.drive`` to walk it. What is
particular to a front end (how its workflow starts, what makes a resume safe, which
walk drives it) comes in a ``Program``: ``_lwir_program.LwirProgram`` for LWIR, and a
code-first workflow's own.

A new run's ``RunStarted`` is committed (without fsync) before its first step, not held
for that step's commit: a process killed inside a long first step must leave a run that
``resume <id>`` finds and the run index shows. A resume commits ``RunResumed`` behind
the first step. A cancellation requested while nobody drove the run is recorded before
anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from little_workflow._failures import RunParked
from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, RunFailedError
from little_workflow.events import RunResumed, RunStarted, RunStatus
from little_workflow.platform._threads import SyncThreads
from little_workflow.runtime._cancel import read_request, record_cancelled
from little_workflow.runtime._core import DurableRun
from little_workflow.runtime._datadir import DataDir
from little_workflow.runtime._state import RunState, fold
from little_workflow.runtime._tally import counting
from little_workflow.runtime._waits import note_root_waiting, waiting_error
from little_workflow.storage import ManagedStorage, PayloadLog

__all__ = [
    "FrontEnd",
    "LaunchHost",
    "Launcher",
    "Program",
    "RunResult",
    "result_of",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """How a run ended, and how much of it this call executed versus replayed."""

    run_id: str
    status: RunStatus
    output: JsonValue
    #: Steps this call ran (their results were committed by this call).
    executed_steps: int
    #: Steps whose recorded result this call reused instead of running them.
    replayed_steps: int
    state: RunState
    #: Model and tool calls (agent sessions, sub-runs included) answered from the log.
    replayed_calls: int = 0
    #: Model and tool calls this call made.
    made_calls: int = 0


class FrontEnd(Protocol):
    """A pass of a run as a front end drives it over its ``DurableRun``."""

    @property
    def run(self) -> DurableRun:
        """The core this pass runs its units on."""
        ...

    async def execute(self) -> JsonValue:
        """Drive the run to its end (``DurableRun.execute``); its output."""
        ...


class Program(Protocol):
    """A workflow as a front end runs it: what starting and continuing a run of it needs."""

    def run_started(
        self,
        input: JsonValue,
        *,
        parent_run_id: str | None,
        parent_step_path: str | None,
        outer_loop: tuple[str, int] | None,
    ) -> RunStarted:
        """The ``RunStarted`` of a new run of it with ``input``."""
        ...

    def check_same_run(self, state: RunState, input: JsonValue) -> None:
        """Refuse an existing run id of another workflow or input (``run_id_conflict``)."""
        ...

    async def check_resume(self, state: RunState) -> None:
        """Fail before anything runs if continuing ``state`` would not be safe."""
        ...

    def front_end(self, state: RunState, *, retrying: bool) -> FrontEnd:
        """A pass over ``state``: a new ``DurableRun`` and the walk that drives it."""
        ...


class LaunchHost(Protocol):
    """The resources launching uses."""

    @property
    def events(self) -> PayloadLog:
        """The run log."""
        ...

    @property
    def kv(self) -> ManagedStorage:
        """The key-value store (cancel requests)."""
        ...

    @property
    def data_dir(self) -> DataDir:
        """Where a new run's scratch directory goes."""
        ...

    @property
    def sync_threads(self) -> SyncThreads:
        """Where sync user code runs while a run is driven."""
        ...


def cancelled_message(run_id: str, reason: str | None) -> str:
    """What ends a cancelled run, with the reason recorded (``cancel --reason``), if any."""
    return f"run {run_id!r} was cancelled" + (f": {reason}" if reason else "")


def result_of(state: RunState) -> RunResult:
    """The result of a finished run; ``RunFailedError`` if it failed or was cancelled."""
    if state.status is RunStatus.CANCELLED:
        # The fold keeps ``RunCancelled.reason`` as the failure message.
        raise RunFailedError(
            cancelled_message(state.run_id, state.failure_message),
            cause_code="cancelled",
            run_id=state.run_id,
        )
    if state.status is RunStatus.FAILED:
        raise RunFailedError(
            f"run {state.run_id!r} failed: {state.failure_message}",
            cause_code=state.failure_cause or "run_failed",
            run_id=state.run_id,
        )
    if state.status is not RunStatus.COMPLETED:
        raise ConfigError(f"run {state.run_id!r} has not ended", code="run_not_finished")
    completed = sum(1 for record in state.steps.values() if record.status == "completed")
    return RunResult(
        run_id=state.run_id,
        status=state.status,
        output=state.output,
        executed_steps=0,
        replayed_steps=completed,
        state=state,
    )


class Launcher:
    """Starts, continues and drives runs; ``load`` gives the program of an existing run."""

    def __init__(self, host: LaunchHost, load: Callable[[RunState], Awaitable[Program]]) -> None:
        self.host = host
        self.load = load

    async def start_or_continue(
        self,
        program: Program,
        input: JsonValue,
        run_id: str,
        *,
        parent_run_id: str | None = None,
        parent_step_path: str | None = None,
        retry_failed: bool = False,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunResult:
        """Start ``run_id`` as a run of ``program``, or continue it if it exists."""
        records = await self.host.events.read(run_id)
        if records:
            state = fold(run_id, records)
            program.check_same_run(state, input)
            reason = "retry" if retry_failed and state.status is RunStatus.FAILED else "resume"
            return await self.continue_run(state, program, reason=reason)
        front = program.front_end(RunState(run_id=run_id), retrying=False)
        started = program.run_started(
            input,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
            outer_loop=outer_loop,
        )
        trace = front.run.trace
        if trace is not None:
            # Recorded, so every later pass (any process) continues this run's trace.
            trace.named(started.workflow_name)
            started = started.model_copy(update={"trace_context": trace.context})
            front.run.state.trace_context = trace.context
        await front.run.append([started], sync=False)
        # Committed now (without fsync), not held for the first step's commit (see the
        # module docstring).
        await front.run.writer.drain()
        return await self.drive(front)

    async def continue_run(
        self, state: RunState, program: Program | None, *, reason: str
    ) -> RunResult:
        """Continue ``state`` (``reason``: ``resume`` or ``retry``); a finished run's result."""
        if state.finished and not (state.status is RunStatus.FAILED and reason == "retry"):
            return result_of(state)
        request = await read_request(self.host.kv, state.run_id)
        if request is not None:
            # Cancelled while no process ran it, or while its owner was dying: record it
            # now rather than run another step.
            await record_cancelled(self.host.events, self.host.kv, state, request)
            raise RunFailedError(
                cancelled_message(state.run_id, request.reason),
                cause_code="cancelled",
                run_id=state.run_id,
            )
        if program is None:
            program = await self.load(state)
        # Fail closed before anything runs (for LWIR: every session this resume would
        # continue must find the configuration it started with).
        await program.check_resume(state)
        front = program.front_end(state, retrying=reason == "retry")
        await front.run.append([RunResumed(reason=reason, pid=os.getpid())], sync=False)
        return await self.drive(front)

    async def drive(self, front: FrontEnd) -> RunResult:
        """Drive ``front`` to the run's end; what it executed and replayed."""
        try:
            with counting() as tally, self.host.sync_threads.bound():
                output = await front.execute()
        except RunParked as parked:
            if front.run.state.parent_run_id is not None:
                raise  # the root's caller says what the run tree waits for
            if parked.run_id != front.run.run_id:
                # A sub-run waits: the root waits with it (not interrupted), for what the
                # sub-run waits for (``_wakeups`` wakes the root when the sub-run is due).
                await note_root_waiting(self.host.kv, front.run.run_id, parked)
            raise waiting_error(parked, front.run.run_id) from None
        run = front.run
        return RunResult(
            replayed_calls=tally.replayed.total(),
            made_calls=tally.made.total(),
            run_id=run.run_id,
            status=run.state.status,
            output=output,
            executed_steps=run.executed,
            replayed_steps=run.replayed,
            state=run.state,
        )
