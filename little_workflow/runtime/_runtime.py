"""``Runtime``: the facade over runs of LWIR workflows in a store and a data directory.

One ``Runtime`` owns one store (the embedded SQLite file by default) and one data
directory, and the resources a run uses (tools, functions, model slots, sync threads).
Each method delegates: starting and continuing runs to ``_launch`` with the LWIR
``Program`` (``_lwir_program``), the walk to ``_lwir_walk`` over the durable core
(``_core``), cancel, fork, gc, outer loops and stuck runs to their modules (docs/runtime.md,
"How the parts fit"). Every run is executed under a run lock (``locks/run-<id>.lock``),
so two processes never drive one run at once: the second waits up to ``lock_timeout``
seconds and then raises ``LockTimeoutError``. A run's state is always the fold of its
log; a resume reads the log once, folds it, and walks the workflow from the start,
replaying every recorded step.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from little_workflow._deltas import DEFAULT_BUFFER, DeltaStream
from little_workflow.codec import JsonValue, dumps
from little_workflow.errors import ConfigError
from little_workflow.events import RunStatus
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import AgentStep, RetryPolicy, Workflow, parse_workflow
from little_workflow.runtime._cancel import CancelOutcome, cancel_run, lease_holder
from little_workflow.runtime._fork import SAME_INPUT, fork_run
from little_workflow.runtime._gc import FINISHED, GcReport, collect_garbage
from little_workflow.runtime._host import SubRunner
from little_workflow.runtime._launch import Launcher, Program, RunResult, result_of
from little_workflow.runtime._lwir_program import (
    LwirProgram,
    ReplayResult,
    available_workflows,
    check_callables,
    load_model,
    replay_run,
    submit_version,
)
from little_workflow.runtime._run_lock import locked
from little_workflow.runtime._settings import RuntimeSettings
from little_workflow.runtime._state import RunState, fold, is_code_run, read_state
from little_workflow.runtime._workflows import WorkflowVersion
from little_workflow.storage import (
    DEFAULT_QUEUE,
    Claim,
    RunInfo,
    fenced,
)

if TYPE_CHECKING:
    # The harness is imported when a tool is registered or first looked up (``toolset``):
    # a run of ``execute`` steps, such as most resumes, never needs it. Code-first runs,
    # outer loops, waits and stuck runs are imported by the methods that use them, so
    # that a resume through the CLI imports none of them.
    from little_workflow.harness._slots import ModelSlot
    from little_workflow.runtime._outer import OuterLoopManifest, OuterLoopOutcome, Supervise
    from little_workflow.runtime._stuck import StuckRun
    from little_workflow.runtime._waits import SendResult

__all__ = ["CancelOutcome", "ReplayResult", "RunResult", "Runtime"]


class Runtime(RuntimeSettings):
    """Runs LWIR workflows durably. Use ``async with Runtime(...) as rt:``.

    ``data_dir`` holds the embedded store, locks and run scratch. ``store`` picks
    another backend by URL (``postgresql://...``); locks stay in ``data_dir``.
    ``workflows`` are registered by name for ``workflow:`` steps; ``functions``
    registers step functions by reference; ``tools`` are the tools ``tool`` steps call
    and agents are offered (``Tool``s or typed callables, or a name → callable
    mapping); ``model_slots`` maps slot names to ``ModelSlot``s. A workflow file (or
    ``Workflow``) may also name a function to import, unless ``import_functions=False``;
    a workflow computed at run time (``run_goal``'s plan, any ``definition:``) may call
    registered functions only, whatever ``import_functions`` says (README, "Trust
    model"). ``sleep`` replaces ``asyncio.sleep`` for retry backoff (tests make it
    instant); ``crash_after_events`` and ``faults`` inject faults (``_faults``).

    A payload over ``inline_payload_bytes`` goes to the blob store; one over
    ``max_payload_bytes`` raises ``PayloadTooLargeError`` at its step (docs/blobs.md).
    ``on_code_drift``: resuming a code-first run whose code changed ``"accept"``s it
    (``code.drifted``) or ``"refuse"``s it (``CodeDriftError``; docs/code-first.md).
    Sync user code runs in a pool of ``sync_threads`` threads, never on the event loop
    (docs/runtime.md, "Sync code runs in threads").
    """

    # --- runs -------------------------------------------------------------------------

    def launcher(self, sub_runner: SubRunner | None = None) -> Launcher:
        """The launcher of this runtime's runs; their sub-runs go to ``sub_runner``
        (inline, this runtime, by default; a worker passes its queue's)."""
        runner = self if sub_runner is None else sub_runner

        async def load(state: RunState) -> Program:
            if is_code_run(state):
                from little_workflow.runtime._code_program import load_code_program

                return load_code_program(self, state)
            version = await self.catalog.load(state.workflow_version_id)
            return LwirProgram(self, version, runner)

        return Launcher(self, load)

    async def run(
        self,
        workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
        input: object = None,
        *,
        run_id: str | None = None,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunResult:
        """Start a run of ``workflow`` (a model or a ``.json``/``.yaml`` file) with ``input``.

        ``workflow`` may also be a code-first ``@workflow`` function or a
        ``module:function`` naming one; its ``input`` is then the body's keyword
        arguments as a JSON object (docs/code-first.md).

        ``outer_loop`` is ``(outerLoopId, cycleNumber)`` for a cycle of an outer loop
        (recorded in ``RunStarted``; see ``run_outer_loop``).

        ``input`` must be plain JSON (``InvalidValueError`` otherwise, before anything is
        written); it is typed ``object`` so that a ``dict[str, str]`` needs no cast.

        With a ``run_id`` that already exists for the same workflow and input, this
        resumes that run instead (so re-running a command after a crash is safe); for
        other workflow or input it raises ``ConfigError`` (``run_id_conflict``).
        """
        from little_workflow.runtime._code_program import code_workflow, run_code

        code = code_workflow(workflow)
        if code is not None or callable(workflow):
            function = code or cast("Callable[..., Any]", workflow)
            return await run_code(self, function, input, run_id=run_id, outer_loop=outer_loop)
        version, run_input = await self._prepare(workflow, input)
        run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
        async with locked(self, run_id):
            return await self.launcher().start_or_continue(
                LwirProgram(self, version, self), run_input, run_id, outer_loop=outer_loop
            )

    def deltas(self, run_id: str | None = None, *, buffer: int = DEFAULT_BUFFER) -> DeltaStream:
        """``run_id``'s (or every run's) model answers as they stream in (docs/models.md)."""
        checked = None if run_id is None else validate_id(run_id, what="run id")
        return self.delta_hub.subscribe(checked, buffer=buffer)

    async def _prepare(
        self, workflow: Workflow | str | os.PathLike[str], input: object
    ) -> tuple[WorkflowVersion, JsonValue]:
        """Check ``input``, resolve and pin ``workflow``: what starting a run needs first."""
        from little_workflow.runtime._input_check import check_input

        model, source = load_model(workflow)
        dumps(input, where="run input")  # plain JSON and valid Unicode, or InvalidValueError
        # Before the store is opened: an input no run could complete with leaves nothing.
        check_input(model, input, shown=None if source is None else str(workflow))
        await self.open()
        version = self.catalog.resolve(model, source=source)
        # Before anything is stored: a workflow naming a function or tool that is not
        # there changes nothing on disk.
        self.check_callables(version)
        return await self.catalog.store(version), cast(JsonValue, input)

    async def run_goal(
        self,
        goal: str,
        input: Mapping[str, object] | None = None,
        *,
        planner_slot: str,
        run_id: str | None = None,
        max_turns: int = 4,
        instructions: str | None = None,
    ) -> RunResult:
        """Plan a workflow for ``goal`` and run it with ``input``, as one durable run.

        The run has two steps: a planner session (its model turns recorded, its answer
        validated, invalid workflows sent back with the errors, ``max_turns`` times at
        most) and a sub-run of the workflow it produced. A kill anywhere resumes from the
        last committed model turn or step; the plan, once committed, is never redone.
        """
        # The planner (and the harness it needs) is imported only by a runtime that plans.
        from little_workflow.runtime._planner import goal_workflow

        data = dict(input or {})
        workflow = goal_workflow(planner_slot, data, max_turns=max_turns, instructions=instructions)
        return await self.run(workflow, {"goal": goal, "data": data}, run_id=run_id)

    async def plan(
        self,
        goal: str,
        *,
        planner_slot: str,
        input_example: Mapping[str, object] | None = None,
        run_id: str | None = None,
        max_turns: int = 4,
    ) -> Workflow:
        """Compile ``goal`` into a validated LWIR workflow (a durable planner run)."""
        from little_workflow.runtime._planner import plan_workflow

        data = dict(input_example or {})
        workflow = plan_workflow(planner_slot, max_turns=max_turns)
        result = await self.run(workflow, {"goal": goal, "data": data}, run_id=run_id)
        return parse_workflow(cast(dict[str, object], result.output), source="the plan")

    async def run_outer_loop(
        self,
        workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
        input: object = None,
        *,
        max_outer_cycles: int,
        supervise: Supervise,
        outer_loop_id: str | None = None,
        timeout: float | None = None,
    ) -> OuterLoopOutcome:
        """Run ``workflow`` cycle after cycle until ``supervise()`` is done (Layer B).

        ``workflow`` is what ``run`` takes: an LWIR model or file, a ``@workflow``
        function or a ``module:function`` naming one.

        See ``little_workflow.runtime._outer`` for the manifest, the order of writes and
        what a resume requires. ``supervise(cycle)`` returns ``Done(final_output)`` or
        ``Continue(summary)``, sync or async.
        """
        from little_workflow.runtime._input_check import check_input
        from little_workflow.runtime._outer import run_outer_loop

        dumps(input, where="outer loop input")
        check_input(workflow, {"input": cast(JsonValue, input), "cycle": 1, "previous": []})
        with self.sync_threads.bound():
            return await run_outer_loop(
                self,
                workflow,
                cast(JsonValue, input),
                max_outer_cycles=max_outer_cycles,
                supervise=supervise,
                outer_loop_id=outer_loop_id,
                timeout=timeout,
            )

    def outer_loop_status(self, outer_loop_id: str) -> OuterLoopManifest:
        """The manifest of outer loop ``outer_loop_id``."""
        from little_workflow.runtime._outer import status

        return status(self, outer_loop_id)

    async def submit(
        self,
        workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
        input: object = None,
        *,
        run_id: str | None = None,
        queue: str = DEFAULT_QUEUE,
    ) -> str:
        """Create a run of ``workflow`` with ``input`` and queue it for a worker; its id.

        Nothing runs here: the run's workflow is pinned and its ``RunStarted`` committed,
        then it is queued on ``queue`` (``default``, or one ``set_queue`` stored: else
        ``ConfigError`` and nothing is written), so any worker can resume it from the
        store alone. Submitting an existing ``run_id`` with the same workflow and input
        queues it if it is not yet (a submit interrupted between the two writes), and
        changes nothing else.
        """
        from little_workflow.runtime._code_program import code_workflow, submit_code
        from little_workflow.runtime._queues import check_queue

        code = code_workflow(workflow)
        if code is not None or callable(workflow):
            function = code or cast("Callable[..., Any]", workflow)
            return await submit_code(self, function, input, run_id=run_id, queue=queue)
        await self.open()
        queue_name = await check_queue(self.queue, queue)
        version, run_input = await self._prepare(workflow, input)
        return await submit_version(
            self.events, self.queue, version, run_input, run_id=run_id, queue_name=queue_name
        )

    async def execute_claim(
        self, claim: Claim, *, sub_runner: SubRunner | None = None
    ) -> RunResult:
        """Drive a run a worker claimed, under its lease (see ``runtime/_worker.py``).

        Every append, the run's and its sub-runs', is fenced by the claim: once the lease
        is lost, the next one raises ``LeaseLostError`` and nothing more is written. The
        run's sub-runs go to ``sub_runner`` (a worker's queue), inline without one.
        """
        await self.open()
        with fenced(claim.fence):
            state = await read_state(self.events, claim.run_id)
            return await self.launcher(sub_runner).continue_run(state, None, reason="resume")

    async def resume(self, run_id: str) -> RunResult:
        """Continue ``run_id`` from the end of its log (a finished run returns its result)."""
        return await self._continue(run_id, "resume")

    async def resume_held(self, state: RunState, *, reason: str = "resume") -> RunResult:
        """Continue ``state``'s run under a run lock the caller holds (a worker's recovery,
        ``runtime/_recovery.py``); ``reason`` goes into its ``RunResumed``."""
        await self.open()
        return await self.launcher().continue_run(state, None, reason=reason)

    async def retry(self, run_id: str) -> RunResult:
        """Run a failed run again from its failed step, with the same workflow version and input."""
        return await self._continue(run_id, "retry")

    async def _continue(self, run_id: str, reason: str) -> RunResult:
        await self.open()
        validate_id(run_id, what="run id")
        async with locked(self, run_id):
            state = await read_state(self.events, run_id)
            if reason == "retry" and state.status is not RunStatus.FAILED:
                raise ConfigError(
                    f"run {run_id!r} is {state.status.value}; only a failed run can be retried",
                    code="run_not_failed",
                )
            return await self.launcher().continue_run(state, None, reason=reason)

    async def fork(
        self,
        source_run_id: str,
        /,
        *,
        at: str,
        run_id: str | None = None,
        input: object = SAME_INPUT,
        workflow: Workflow | str | os.PathLike[str] | Callable[..., Any] | None = None,
        model_slots: Mapping[str, ModelSlot] | None = None,
        prompts: Mapping[str, Mapping[str, JsonValue]] | None = None,
        policy: Mapping[str, RetryPolicy | Mapping[str, JsonValue]] | None = None,
    ) -> RunResult:
        """Start a new run that keeps ``source_run_id``'s work before step path ``at``.

        The completed steps the source's walk reaches before ``at`` are copied into the
        new run's log and replayed (no function, model or tool is called for them); ``at``
        and every step after it run anew, with the changes: ``input`` (default: the
        source's), ``workflow`` (an edited workflow: every kept step must be defined as
        it was), ``model_slots`` (added to or replacing this runtime's, for this call),
        ``prompts`` (step id → ``{"instructions", "prompt"}`` of an agent step or agent
        decision) and ``policy`` (step id → its retry policy). The source is not changed.
        See docs/runtime.md, "Fork". Raises ``InvalidForkPointError`` (nothing written)
        when ``at`` cannot be a fork point.
        """
        from little_workflow.runtime._code_fork import fork_code_run
        from little_workflow.runtime._code_program import code_workflow

        await self.open()
        source = await self.events.read(validate_id(source_run_id, what="run id"))
        code = code_workflow(workflow) if workflow is not None else None
        if source and is_code_run(state := fold(source_run_id, source)):
            return await fork_code_run(
                self,
                state,
                tuple(source),
                at=at,
                run_id=run_id,
                input=input,
                same_input=input is SAME_INPUT,
                workflow=code,
            )
        return await fork_run(
            self,
            source_run_id,
            at=at,
            run_id=run_id,
            input=input,
            workflow=cast("Workflow | str | os.PathLike[str] | None", workflow),
            model_slots=model_slots,
            prompts=prompts,
            policy=policy,
        )

    async def replay(self, run_id: str) -> ReplayResult:
        """Rebuild ``run_id``'s state from its log; calls nothing external, writes nothing."""
        await self.open()
        validate_id(run_id, what="run id")
        state = await read_state(self.events, run_id)
        return await replay_run(self, state, await self.catalog.load(state.workflow_version_id))

    async def gc(
        self,
        older_than: timedelta | None = None,
        *,
        status: Iterable[RunStatus] = FINISHED,
        keep_last: int | None = None,
        workflow: str | None = None,
        grace: timedelta = timedelta(hours=1),
        dry_run: bool = False,
    ) -> GcReport:
        """Delete finished runs, and the blobs and artifacts no remaining run needs.

        Top-level runs (each with its sub-runs) finished with a status in ``status``, of
        ``workflow`` if given, last updated more than ``older_than`` ago and not among
        the ``keep_last`` most recent matching ones; at least one of ``older_than`` and
        ``keep_last`` is required. Never a run a process holds, one with a fresh cancel
        request, a cycle of an unfinished outer loop, or one a remaining run refers to
        (reported in ``GcReport.kept``). Blobs and artifact objects nothing refers to are
        swept when older than ``grace``. ``dry_run`` deletes nothing and reports what
        would go. See ``little_workflow.runtime._gc`` and docs/blobs.md.
        """
        return await collect_garbage(
            self,
            older_than=older_than,
            status=status,
            keep_last=keep_last,
            workflow=workflow,
            grace=grace,
            dry_run=dry_run,
        )

    async def cancel(
        self, run_id: str, *, reason: str | None = None, wait: float = 30.0
    ) -> CancelOutcome:
        """Cancel ``run_id`` and its unfinished sub-runs (see ``_cancel``).

        A run no process holds is cancelled here and now. A run another process is
        executing is cancelled by that process within a fraction of a second; this waits
        up to ``wait`` seconds to see it recorded. The request is durable either way: if
        the owner dies first, the next resume records the cancellation instead of running.
        Cancelling a finished run raises ``ConfigError`` (``run_finished``).
        """
        await self.open()
        validate_id(run_id, what="run id")
        return await cancel_run(self, run_id, reason=reason, wait=wait)

    async def send(
        self, run_id: str, event: str, data: JsonValue = None, *, key: str | None = None
    ) -> SendResult:
        """Send ``event`` with ``data`` to ``run_id``: committed before it returns; the same
        ``key`` twice delivers once (docs/waits.md). Refused with nothing written:
        ``EventPayloadError`` (the wait's schema), ``EventRefusedError`` (the run no longer
        waits for it), ``ConfigError`` ``run_not_found``."""
        from little_workflow.runtime._waits import send

        await self.open()
        return await send(self, run_id, event, data, key=key)

    async def stuck_runs(self) -> list[StuckRun]:
        """Runs nobody drives that need a look: expired leases, intents without outcome."""
        from little_workflow.runtime._stuck import find_stuck_runs

        return await find_stuck_runs(self)

    async def interrupted_runs(self, runs: Sequence[RunInfo]) -> dict[str, str]:
        """Of ``runs``, the unfinished ones nobody drives now (their process died): run id
        -> one line saying why. Derived, never recorded (``runtime/_liveness.py``)."""
        from little_workflow.runtime._liveness import interrupted_runs

        await self.open()
        return await interrupted_runs(self, runs)

    async def waiting_runs(self, runs: Sequence[RunInfo]) -> dict[str, dict[str, JsonValue]]:
        """Of ``runs``, the ones parked at a wait that nobody drives now: run id -> what it
        waits for (``{"path", "kind", "event", "since", "wakeAt"}``, docs/waits.md)."""
        from little_workflow.runtime._liveness import waiting_runs

        await self.open()
        return await waiting_runs(self, runs)

    async def lease_holder(self, state: RunState) -> str | None:
        """The worker whose live lease covers ``state``'s run (or an ancestor's), if any."""
        return await lease_holder(self, state)

    async def get_state(self, run_id: str) -> RunState:
        """The folded state of ``run_id``."""
        await self.open()
        validate_id(run_id, what="run id")
        return await read_state(self.events, run_id)

    @staticmethod
    def result_of(state: RunState) -> RunResult:
        """The result of a finished run; ``RunFailedError`` if it failed or was cancelled."""
        return result_of(state)

    async def run_child(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool = False,
        sub_runner: SubRunner | None = None,
    ) -> JsonValue:
        """Start or continue a sub-run here (a ``workflow`` step's); return its output.

        Its own sub-runs go to ``sub_runner`` (inline, this runtime, by default).
        """
        self.check_callables(version)
        runner = self if sub_runner is None else sub_runner
        async with locked(self, run_id, shared=False):
            result = await self.launcher(runner).start_or_continue(
                LwirProgram(self, version, runner),
                input,
                run_id,
                parent_run_id=parent_run_id,
                parent_step_path=parent_step_path,
                retry_failed=retry_failed,
            )
        return result.output

    # --- checks -----------------------------------------------------------------------

    def check_callables(self, version: WorkflowVersion, *, trusted: bool | None = None) -> None:
        """Fail before anything is written if a step names a function or tool we lack."""
        check_callables(self, version, trusted=trusted)

    def available_workflows(self, version: WorkflowVersion, step: AgentStep) -> dict[str, str]:
        """An orchestrator's workflows as they are now: name → definition hash."""
        return available_workflows(self, version, step)
