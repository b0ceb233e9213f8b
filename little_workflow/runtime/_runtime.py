"""``Runtime``: start, resume, retry and replay LWIR runs against a data directory.

One ``Runtime`` owns one store (the embedded SQLite file by default) and one data
directory. Every run is executed under a run lock (``locks/run-<id>.lock``), so two
processes never drive one run at once: the second waits up to ``lock_timeout`` seconds
and then raises ``LockTimeoutError``. A run's state is always the fold of its log; a
resume reads the log once, folds it, and walks the workflow from the start, replaying
every recorded step (see ``_execution``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from little_workflow.artifacts import ArtifactStore
from little_workflow.codec import JsonValue, dumps, sha256_digest
from little_workflow.errors import ConfigError, RunFailedError, StorageError
from little_workflow.events import RunCancelled, RunResumed, RunStatus
from little_workflow.harness._manifest import drift_error, manifest_hash
from little_workflow.harness._slots import ModelSlot, resolve_slot
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import (
    AgentStep,
    DecisionStep,
    ExecuteStep,
    MapStep,
    OutputStep,
    RetryPolicy,
    Step,
    SubWorkflowStep,
    ToolStep,
    Workflow,
    definition_hash,
    load_workflow,
    parse_workflow,
)
from little_workflow.memory import MemoryStore, open_memory
from little_workflow.platform._threads import DEFAULT_SYNC_THREADS, SyncThreads
from little_workflow.runtime._cancel import (
    POLL_INTERVAL,
    CancelRequest,
    cancel_key,
    read_request,
    write_request,
)
from little_workflow.runtime._datadir import DataDir
from little_workflow.runtime._distributed import run_child_on_queue
from little_workflow.runtime._faults import CrashAfterEvents, FaultPoints
from little_workflow.runtime._fork import SAME_INPUT, fork_hint, fork_run
from little_workflow.runtime._functions import FunctionRegistry
from little_workflow.runtime._gc import FINISHED, GcReport, collect_garbage
from little_workflow.runtime._liveness import interrupted_runs
from little_workflow.runtime._lwir_walk import LwirWalk, lwir_walk
from little_workflow.runtime._outer import (
    OuterLoopManifest,
    OuterLoopOutcome,
    Supervise,
    run_outer_loop,
)
from little_workflow.runtime._outer import status as outer_loop_status
from little_workflow.runtime._run_lock import RunLock
from little_workflow.runtime._sessions import session_manifest, step_at, unfinished_sub_runs
from little_workflow.runtime._state import RunState, fold
from little_workflow.runtime._stuck import StuckRun, find_stuck_runs
from little_workflow.runtime._tally import counting
from little_workflow.runtime._worker import current_worker
from little_workflow.runtime._workflows import WorkflowCatalog, WorkflowVersion
from little_workflow.storage import (
    DEFAULT_INLINE_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    BlobStore,
    Claim,
    FileStorage,
    ManagedStorage,
    PayloadLog,
    RunInfo,
    RunQueue,
    Store,
    StoreSpec,
    current_fence,
    fenced,
    open_store,
)

if TYPE_CHECKING:
    # The harness is imported when a tool is registered or first looked up (``toolset``):
    # a run of ``execute`` steps, such as most resumes, never needs it.
    from little_workflow.harness._harness import Toolset
    from little_workflow.harness._tools import Tool

__all__ = ["ReplayResult", "RunResult", "Runtime"]


def _check_same_run(state: RunState, version: WorkflowVersion, input: JsonValue) -> None:
    """Refuse to take an existing run id for another workflow or input (``run_id_conflict``)."""
    # The version id covers the sub-workflows too: a run started before child.yaml was
    # edited is not the run these files describe now.
    same_workflow = state.workflow_version_id == version.version_id
    if same_workflow and sha256_digest(state.input) == sha256_digest(input):
        return
    differs = "other input"
    if state.definition_hash != version.definition_hash:
        differs = "another workflow"
    elif not same_workflow:
        differs = "other versions of its sub-workflows"
    raise ConfigError(
        f"run {state.run_id!r} already exists with {differs}; resume it, or start a new run "
        "with another run id",
        code="run_id_conflict",
    )


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


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelOutcome:
    """What ``Runtime.cancel`` saw: the run's status when it stopped waiting.

    ``status`` is ``CANCELLED`` once recorded; still ``RUNNING`` if the process that
    executes it did not act within the wait (the request stands: it will, or the next
    resume records it). ``recorded_by_owner`` says the running process recorded it.
    """

    run_id: str
    status: RunStatus
    recorded_by_owner: bool
    sub_run_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    """A run rebuilt from its log without calling anything."""

    run_id: str
    state: RunState
    #: The run's output if its log holds ``RunCompleted``.
    output: JsonValue
    #: Paths where the walk found no ``StepCompleted`` (where a resume would continue).
    frontier: tuple[str, ...]
    #: Recorded steps the walk reused.
    replayed_steps: int
    #: Completed paths in the log that the walk never reached: the log and the workflow
    #: disagree (empty for every log this runtime wrote).
    unreached: tuple[str, ...]


def _steps(steps: Iterable[Step]) -> Iterable[Step]:
    for step in steps:
        yield step
        if isinstance(step, MapStep):
            yield from _steps(step.body)


class Runtime:
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
    model"). ``sleep`` replaces
    ``asyncio.sleep`` for retry backoff (tests make it instant). ``crash_after_events``
    and ``faults`` are fault injection for crash tests (see ``_faults``).

    Payloads (step outputs, tool results, model requests and responses) whose JSON is
    over ``inline_payload_bytes`` are stored once in the store's blob store and
    referenced from the log; one over ``max_payload_bytes`` (64 MiB by default) raises
    ``PayloadTooLargeError`` at its step and leaves the run resumable (see
    ``storage.PayloadLog`` and docs/blobs.md).

    Sync user code (step, decision and tool functions, ``supervise`` and ``reconcile``
    hooks) runs in a pool of at most ``sync_threads`` threads, so that it never blocks
    the event loop; async code runs on the loop (docs/runtime.md, "Sync code runs in
    threads").
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = ".little-workflow",
        *,
        store: str | StoreSpec | None = None,
        workflows: Iterable[Workflow] = (),
        functions: Mapping[str, Callable[..., Any]] | None = None,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]]
        | Mapping[str, Callable[..., Any]] = (),
        model_slots: Mapping[str, ModelSlot] | None = None,
        import_functions: bool = True,
        lock_timeout: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        crash_after_events: int | None = None,
        faults: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        inline_payload_bytes: int = DEFAULT_INLINE_BYTES,
        sync_threads: int = DEFAULT_SYNC_THREADS,
    ) -> None:
        if max_payload_bytes < 1 or inline_payload_bytes < 0:
            raise ConfigError(
                "max_payload_bytes must be at least 1 and inline_payload_bytes at least 0"
            )
        if isinstance(sync_threads, bool) or not isinstance(sync_threads, int) or sync_threads < 1:
            raise ConfigError(f"sync_threads must be a positive integer, not {sync_threads!r}")
        #: Where sync user code runs while this runtime drives a run.
        self.sync_threads = SyncThreads(sync_threads)
        self.max_payload_bytes = max_payload_bytes
        self.inline_payload_bytes = inline_payload_bytes
        self._events: PayloadLog | None = None
        self.data_dir = DataDir.at(data_dir)
        self._store_url = store
        self._registered = {workflow.name: workflow for workflow in workflows}
        self.functions = FunctionRegistry(functions, allow_import=import_functions)
        self._tools = tools
        self._toolset: Toolset | None = None
        if tools:
            # Registered tools are checked now, as before; with none, ``toolset`` (and
            # the harness import) waits until a step asks for a tool.
            self._toolset = self._build_toolset()
        self.model_slots: dict[str, ModelSlot] = dict(model_slots or {})
        self.lock_timeout = lock_timeout
        self.sleep = sleep
        self.crash = None if crash_after_events is None else CrashAfterEvents(crash_after_events)
        self.faults = FaultPoints(faults)
        self._store: Store | None = None
        self._catalog: WorkflowCatalog | None = None
        #: Files the runs produce, with their manifests (``<data_dir>/artifacts/``).
        self.artifacts = ArtifactStore(self.data_dir.root)
        self._memory: tuple[MemoryStore, FileStorage | None] | None = None

    @property
    def toolset(self) -> Toolset:
        """The tools offered to steps and agents (built on first use when none were given)."""
        if self._toolset is None:
            self._toolset = self._build_toolset()
        return self._toolset

    def _build_toolset(self) -> Toolset:
        from little_workflow.harness._harness import Toolset
        from little_workflow.harness._tools import Tool, tool

        tools = self._tools
        self._tools = ()
        if isinstance(tools, Mapping):
            tools = [
                value if isinstance(value, Tool) else tool(value, name=name)
                for name, value in tools.items()
            ]
        return Toolset(tools)

    # --- lifecycle --------------------------------------------------------------------

    async def open(self) -> Runtime:
        """Create the data directory and open the store. Idempotent."""
        if self._store is None:
            self.data_dir.create()
            store = await open_store(self._store_url or self.data_dir.store_url)
            self._store = store
            self._events = PayloadLog(
                store.events,
                store.blobs,
                inline_bytes=self.inline_payload_bytes,
                max_payload_bytes=self.max_payload_bytes,
            )
            self._catalog = WorkflowCatalog(store.kv, self._registered)
            self._memory = open_memory(
                self.data_dir.memory, store.kv if self._store_url is not None else None
            )
        return self

    async def close(self) -> None:
        """Close the store. Idempotent."""
        store, self._store = self._store, None
        self._events = None
        memory, self._memory = self._memory, None
        if memory is not None and memory[1] is not None:
            await memory[1].close()
        if store is not None:
            await store.close()
        # Idle threads end; one still blocked in user code ends when the call returns.
        self.sync_threads.close()
        self.sync_threads = SyncThreads(self.sync_threads.size)

    async def __aenter__(self) -> Runtime:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def events(self) -> PayloadLog:
        """The event log (opened by ``open``): values in, values out; large payloads
        are kept in ``blobs`` by reference (``events.inner`` reads them as stored)."""
        self._require()
        assert self._events is not None
        return self._events

    @property
    def blobs(self) -> BlobStore:
        """The blob store beside the event log (opened by ``open``)."""
        return self._require().blobs

    @property
    def kv(self) -> ManagedStorage:
        """The key-value store (opened by ``open``)."""
        return self._require().kv

    @property
    def memory(self) -> MemoryStore:
        """The agents' memory (opened by ``open``; where it lives: ``open_memory``)."""
        self._require()
        assert self._memory is not None
        return self._memory[0]

    @property
    def store(self) -> Store:
        """The open store: its event log, KV store, blobs and, on Postgres, queue."""
        return self._require()

    def _require(self) -> Store:
        if self._store is None:
            raise ConfigError("the runtime is not open: use 'async with Runtime(...)' or open()")
        return self._store

    @property
    def catalog(self) -> WorkflowCatalog:
        """Where pinned workflow versions are stored and loaded."""
        self._require()
        assert self._catalog is not None
        return self._catalog

    def register(self, workflow: Workflow) -> None:
        """Register ``workflow`` under its name, for ``workflow:`` steps that name it."""
        self._registered[workflow.name] = workflow
        if self._store is not None:
            self._catalog = WorkflowCatalog(self._store.kv, self._registered)

    # --- runs -------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _locked(self, run_id: str, *, shared: bool = True) -> AsyncIterator[None]:
        if current_fence() is not None:
            # A worker's lease covers the run and its sub-runs, on every machine; a file
            # lock here would only be held on past the lease by a paused worker, and
            # keep the next holder on this machine waiting for nothing.
            yield
            return
        lock = RunLock(self, run_id, shared=shared)
        await lock.acquire(timeout=self.lock_timeout)
        try:
            yield
        finally:
            await lock.release()

    async def run(
        self,
        workflow: Workflow | str | os.PathLike[str],
        input: object = None,
        *,
        run_id: str | None = None,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunResult:
        """Start a run of ``workflow`` (a model or a ``.json``/``.yaml`` file) with ``input``.

        ``outer_loop`` is ``(outerLoopId, cycleNumber)`` for a cycle of an outer loop
        (recorded in ``RunStarted``; see ``run_outer_loop``).

        ``input`` must be plain JSON (``InvalidValueError`` otherwise, before anything is
        written); it is typed ``object`` so that a ``dict[str, str]`` needs no cast.

        With a ``run_id`` that already exists for the same workflow and input, this
        resumes that run instead (so re-running a command after a crash is safe); for
        other workflow or input it raises ``ConfigError`` (``run_id_conflict``).
        """
        version, run_input = await self._prepare(workflow, input)
        run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
        async with self._locked(run_id):
            return await self._start_or_continue(
                version, run_input, run_id, None, None, outer_loop=outer_loop
            )

    async def _prepare(
        self, workflow: Workflow | str | os.PathLike[str], input: object
    ) -> tuple[WorkflowVersion, JsonValue]:
        """Check ``input``, resolve and pin ``workflow``: what starting a run needs first."""
        await self.open()
        model, source = self._load(workflow)
        dumps(input, where="run input")  # plain JSON and valid Unicode, or InvalidValueError
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
        data = dict(input or {})
        workflow = Workflow(
            name="goal",
            description="A planned workflow, run.",
            steps=(
                AgentStep(
                    id="plan",
                    role="planner",
                    slot=planner_slot,
                    instructions=instructions,
                    prompt="Goal: ${input.goal}\nThe workflow's input: ${input.data}",
                    max_turns=max_turns,
                ),
                SubWorkflowStep(
                    id="run",
                    definition="${steps.plan.output}",
                    with_={key: f"${{input.data[{json.dumps(key)}]}}" for key in data},
                ),
                OutputStep(id="out", value="${steps.run.output}"),
            ),
        )
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
        workflow = Workflow(
            name="plan",
            steps=(
                AgentStep(
                    id="plan",
                    role="planner",
                    slot=planner_slot,
                    prompt="Goal: ${input.goal}\nThe workflow's input: ${input.data}",
                    max_turns=max_turns,
                ),
                OutputStep(id="out", value="${steps.plan.output}"),
            ),
        )
        result = await self.run(
            workflow, {"goal": goal, "data": dict(input_example or {})}, run_id=run_id
        )
        return parse_workflow(cast(dict[str, object], result.output), source="the plan")

    async def run_outer_loop(
        self,
        workflow: Workflow | str | os.PathLike[str],
        input: object = None,
        *,
        max_outer_cycles: int,
        supervise: Supervise,
        outer_loop_id: str | None = None,
        timeout: float | None = None,
    ) -> OuterLoopOutcome:
        """Run ``workflow`` cycle after cycle until ``supervise()`` is done (Layer B).

        See ``little_workflow.runtime._outer`` for the manifest, the order of writes and
        what a resume requires. ``supervise(cycle)`` returns ``Done(final_output)`` or
        ``Continue(summary)``, sync or async.
        """
        dumps(input, where="outer loop input")
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
        return outer_loop_status(self, outer_loop_id)

    @property
    def queue(self) -> RunQueue:
        """The store's run queue (``submit``, workers); only a postgresql: store has one."""
        queue = self._require().queue
        if queue is None:
            raise ConfigError(
                f"the store {self._require().spec.kind}: has no run queue; submit and workers "
                "need a postgresql: store (--store postgresql://...)"
            )
        return queue

    async def submit(
        self,
        workflow: Workflow | str | os.PathLike[str],
        input: object = None,
        *,
        run_id: str | None = None,
    ) -> str:
        """Create a run of ``workflow`` with ``input`` and queue it for a worker; its id.

        Nothing runs here: the run's workflow is pinned and its ``RunStarted`` committed,
        then it is queued, so any worker can resume it from the store alone. Submitting
        an existing ``run_id`` with the same workflow and input queues it if it is not
        yet (a submit interrupted between the two writes), and changes nothing else.
        """
        await self.open()
        queue = self.queue
        version, run_input = await self._prepare(workflow, input)
        run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
        if await self.events.read(run_id, limit=1):
            _check_same_run(await self._fold(run_id), version, run_input)
        else:
            await self.events.append(run_id, [version.run_started(run_input)], expected_seq=0)
        await queue.submit(run_id)
        return run_id

    async def execute_claim(self, claim: Claim) -> RunResult:
        """Drive a run a worker claimed, under its lease (see ``runtime/_worker.py``).

        Every append, the run's and its sub-runs', is fenced by the claim: once the lease
        is lost, the next one raises ``LeaseLostError`` and nothing more is written.
        """
        await self.open()
        with fenced(claim.fence):
            self.make_run_dirs(claim.run_id)
            state = await self._fold(claim.run_id)
            return await self._continue(state, None, reason="resume")

    async def resume(self, run_id: str) -> RunResult:
        """Continue ``run_id`` from the end of its log (a finished run returns its result)."""
        await self.open()
        validate_id(run_id, what="run id")
        async with self._locked(run_id):
            state = await self._fold(run_id)
            return await self._continue(state, None, reason="resume")

    async def retry(self, run_id: str) -> RunResult:
        """Run a failed run again from its failed step, with the same workflow version and input."""
        await self.open()
        validate_id(run_id, what="run id")
        async with self._locked(run_id):
            state = await self._fold(run_id)
            if state.status is not RunStatus.FAILED:
                raise ConfigError(
                    f"run {run_id!r} is {state.status.value}; only a failed run can be retried",
                    code="run_not_failed",
                )
            return await self._continue(state, None, reason="retry")

    async def fork(
        self,
        source_run_id: str,
        /,
        *,
        at: str,
        run_id: str | None = None,
        input: object = SAME_INPUT,
        workflow: Workflow | str | os.PathLike[str] | None = None,
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
        return await fork_run(
            self,
            source_run_id,
            at=at,
            run_id=run_id,
            input=input,
            workflow=workflow,
            model_slots=model_slots,
            prompts=prompts,
            policy=policy,
        )

    async def replay(self, run_id: str) -> ReplayResult:
        """Rebuild ``run_id``'s state from its log; calls nothing external, writes nothing."""
        await self.open()
        validate_id(run_id, what="run id")
        state = await self._fold(run_id)
        version = await self.catalog.load(state.workflow_version_id)
        execution = lwir_walk(self, version, state, sub_runner=self, replay_only=True)
        output = await execution.replay()
        visited = execution.visited
        # A composite step (a map) replayed whole was not descended into: its branches
        # were reached through it.
        unreached = sorted(
            path
            for path, record in state.steps.items()
            if record.status == "completed"
            and path not in visited
            and not any(path.startswith(f"{ancestor}[") for ancestor in visited)
        )
        return ReplayResult(
            run_id=run_id,
            state=state,
            output=state.output if state.status is RunStatus.COMPLETED else output,
            frontier=tuple(execution.frontier),
            replayed_steps=execution.run.replayed,
            unreached=tuple(unreached),
        )

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
        state = await self._fold(run_id)
        if state.finished:
            raise ConfigError(
                f"run {run_id!r} is already {state.status.value}; there is nothing to cancel",
                code="run_finished",
            )
        request = CancelRequest.new(reason)
        # Innermost first: a parent whose owner acts on its request at once must find
        # its children's requests already there, or a child could finish meanwhile.
        family = await self._unfinished_family(state)
        for member in reversed(family):
            await write_request(self.kv, member.run_id, request)
        recorded_here = False
        for member in reversed(family):
            if not await self._free_to_cancel(member):
                continue  # a worker holds it: it acts on the request within its poll
            lock = RunLock(self, member.run_id)
            if not await lock.try_acquire():
                continue
            try:
                current = await self._fold(member.run_id)
                if not current.finished:
                    await self._record_cancelled(current, request)
                    recorded_here = True
            finally:
                await lock.release()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            state = await self._fold(run_id)
            if state.finished or loop.time() >= deadline:
                break
            await asyncio.sleep(min(POLL_INTERVAL / 2, max(0.0, deadline - loop.time())))
        return CancelOutcome(
            run_id=run_id,
            status=state.status,
            recorded_by_owner=state.finished and not recorded_here,
            sub_run_ids=tuple(member.run_id for member in family[1:]),
        )

    async def stuck_runs(self) -> list[StuckRun]:
        """Runs nobody drives that need a look: expired leases, intents without outcome."""
        return await find_stuck_runs(self)

    async def interrupted_runs(self, runs: Sequence[RunInfo]) -> dict[str, str]:
        """Of ``runs``, the unfinished ones nobody drives now (their process died): run id
        -> one line saying why. Derived, never recorded (``runtime/_liveness.py``)."""
        await self.open()
        return await interrupted_runs(self, runs)

    async def lease_holder(self, state: RunState) -> str | None:
        """The worker whose live lease covers ``state``'s run, if any.

        Its own lease (a submitted run, or a sub-run a worker's run queued), else an
        ancestor's (a sub-run driven inline, under its root's lease).
        """
        queue = self._require().queue
        if queue is None:
            return None
        current = state
        for _ in range(64):  # sub-runs nest at most 32 deep (_workflows._MAX_DEPTH)
            holder = await queue.holder(current.run_id)
            if holder is not None or current.parent_run_id is None:
                return holder
            current = await self._fold(current.parent_run_id)
        return None

    async def _free_to_cancel(self, state: RunState) -> bool:
        """Whether no worker's lease covers ``state``'s run, so it may be cancelled here.

        A run in the queue that nobody holds is settled there first (done, ``cancelled``),
        so no worker claims it while its cancellation is recorded; if one claimed it just
        before, it is the one to act.
        """
        if await self.lease_holder(state) is not None:
            return False
        queue = self._require().queue
        if queue is None or await queue.get(state.run_id) is None:
            return True
        return await queue.settle(state.run_id, "cancelled")

    async def _unfinished_family(self, state: RunState) -> list[RunState]:
        """``state`` and its unfinished sub-runs, parents before children."""
        family = [state]
        position = 0
        while position < len(family) and len(family) < 10_000:
            for sub_run_id in unfinished_sub_runs(family[position]):
                records = await self.events.read(sub_run_id)
                if records:
                    sub_state = fold(sub_run_id, records)
                    if not sub_state.finished:
                        family.append(sub_state)
            position += 1
        return family

    async def _record_cancelled(self, state: RunState, request: CancelRequest) -> None:
        """Append ``RunCancelled`` to a run this process holds, and drop the request."""
        await self.events.append(
            state.run_id,
            [RunCancelled(reason=request.reason)],
            sync=True,
            expected_seq=state.last_seq,
        )
        await self.kv.delete(cancel_key(state.run_id))

    async def get_state(self, run_id: str) -> RunState:
        """The folded state of ``run_id``."""
        await self.open()
        validate_id(run_id, what="run id")
        return await self._fold(run_id)

    async def run_child(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool = False,
    ) -> JsonValue:
        """Start or continue a sub-run (used by ``workflow`` steps); return its output.

        Under a worker, the sub-run is queued for any worker (``runtime/_distributed.py``).
        """
        self.check_callables(version)
        worker = current_worker()
        queue = self._require().queue
        if worker is not None and queue is not None and not retry_failed:
            return await run_child_on_queue(
                self,
                worker,
                queue,
                version,
                input,
                run_id=run_id,
                parent_run_id=parent_run_id,
                parent_step_path=parent_step_path,
            )
        async with self._locked(run_id, shared=False):
            result = await self._start_or_continue(
                version, input, run_id, parent_run_id, parent_step_path, retry_failed=retry_failed
            )
        return result.output

    # --- internals --------------------------------------------------------------------

    def _load(self, workflow: Workflow | str | os.PathLike[str]) -> tuple[Workflow, Path | None]:
        if isinstance(workflow, Workflow):
            return workflow, None
        path = Path(workflow).absolute()
        return load_workflow(path), path

    def check_callables(self, version: WorkflowVersion, *, trusted: bool | None = None) -> None:
        """Fail before anything is written if a step names a function or tool we lack.

        A computed version (``version.trusted`` false, or ``trusted=False`` from a caller
        that knows it was computed) may name registered functions only, and is checked
        without importing anything; a function it may not call (or, with imports off, any
        unregistered one) is ``FunctionNotAllowedError``. Its sub-workflows are checked by
        their own trust.
        """
        trusted = version.trusted if trusted is None else trusted and version.trusted
        for step in _steps(version.workflow.steps):
            if isinstance(step, DecisionStep) and step.agent is not None:
                resolve_slot(self.model_slots, step.agent.slot)
                self._check_tools(version, step.id, step.agent.tools)
            elif isinstance(step, ExecuteStep | DecisionStep) and step.fn is not None:
                self.functions.check_offered(
                    step.fn, workflow=version.name, step=step.id, computed=not trusted
                )
                self.functions.resolve(step.fn)
            elif isinstance(step, ToolStep):
                self._check_tools(version, step.id, (step.tool,))
            if isinstance(step, ExecuteStep | ToolStep) and step.fixer is not None:
                resolve_slot(self.model_slots, step.fixer.slot)
            if isinstance(step, AgentStep):
                resolve_slot(self.model_slots, step.slot)
                self._check_tools(version, step.id, step.tools)
        for child in version.children.values():
            self.check_callables(child)

    def registered_workflows(self) -> list[Workflow]:
        """The workflows registered by name, in registration order."""
        return list(self._registered.values())

    def available_workflows(self, version: WorkflowVersion, step: AgentStep) -> dict[str, str]:
        """An orchestrator's workflows as they are now: name → definition hash.

        Found again (files next to the run's workflow file, registered names), not taken
        from the pinned version: the manifest compares the configuration at hand with the
        one the session started with. A workflow that cannot be found is ``(missing)``.
        """
        source = Path(version.source) if version.source else None
        available: dict[str, str] = {}
        for reference in step.workflows:
            try:
                found, _ = self.catalog.find(reference, source, where=f"step {step.id!r}")
            except ConfigError:
                # Named as the run pinned it (a file's name is inside the file), so only
                # the hash shows as changed.
                pinned = version.children.get(reference)
                available[reference if pinned is None else pinned.name] = "(missing)"
                continue
            available[found.name] = definition_hash(found)
        return available

    def _check_tools(self, version: WorkflowVersion, step_id: str, names: Iterable[str]) -> None:
        for name in names:
            if name not in self.toolset.registry:
                known = ", ".join(self.toolset.registry.names()) or "none"
                raise ConfigError(
                    f"workflow {version.name!r} step {step_id!r} uses tool {name!r}, "
                    f"which is not registered (registered: {known})",
                    code="unknown_tool",
                )

    async def _fold(self, run_id: str) -> RunState:
        records = await self.events.read(run_id)
        if not records:
            raise ConfigError(f"there is no run {run_id!r} in this store", code="run_not_found")
        return fold(run_id, records)

    async def _start_or_continue(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        run_id: str,
        parent_run_id: str | None,
        parent_step_path: str | None,
        *,
        retry_failed: bool = False,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunResult:
        records = await self.events.read(run_id)
        if records:
            state = fold(run_id, records)
            _check_same_run(state, version, input)
            reason = "retry" if retry_failed and state.status is RunStatus.FAILED else "resume"
            return await self._continue(state, version, reason=reason)
        self.make_run_dirs(run_id)
        execution = lwir_walk(self, version, RunState(run_id=run_id), sub_runner=self)
        started = version.run_started(
            input,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
            outer_loop=outer_loop,
        )
        await execution.run.append([started], sync=False)
        # Committed now (without fsync), not held for the first step's commit: a process
        # killed inside a long first step must leave a run that `resume <id>` finds and
        # the run index shows.
        await execution.run.writer.drain()
        return await self._drive(execution)

    def make_run_dirs(self, run_id: str) -> None:
        """Create ``runs/<runId>/harness/`` (0700) for a new run."""
        try:
            # One level at a time: ``mkdir(parents=True)`` gives the parents it creates
            # the default mode, which would leave ``runs/<runId>`` readable by others.
            run_dir = self.data_dir.run_dir(run_id)
            for directory in (run_dir, self.data_dir.harness_dir(run_id)):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot create the scratch directory of run {run_id!r}: {exc}"
            ) from exc

    @staticmethod
    def result_of(state: RunState) -> RunResult:
        """The result of a finished run; ``RunFailedError`` if it failed or was cancelled."""
        if state.status is RunStatus.CANCELLED:
            raise RunFailedError(
                f"run {state.run_id!r} was cancelled", cause_code="cancelled", run_id=state.run_id
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

    async def _continue(
        self, state: RunState, version: WorkflowVersion | None, *, reason: str
    ) -> RunResult:
        if state.finished and not (state.status is RunStatus.FAILED and reason == "retry"):
            return self.result_of(state)
        request = await read_request(self.kv, state.run_id)
        if request is not None:
            # Cancelled while no process ran it, or while its owner was dying: record it
            # now rather than run another step.
            await self._record_cancelled(state, request)
            raise RunFailedError(
                f"run {state.run_id!r} was cancelled", cause_code="cancelled", run_id=state.run_id
            )
        if version is None:
            version = await self.catalog.load(state.workflow_version_id)
        # Fail closed before anything runs: every session this resume would continue,
        # here and in the sub-runs it would resume, must find the configuration it
        # started with.
        await self._check_drift(state, version)
        self.check_callables(version)
        execution = lwir_walk(self, version, state, sub_runner=self, retrying=reason == "retry")
        await execution.run.append([RunResumed(reason=reason, pid=os.getpid())], sync=False)
        return await self._drive(execution)

    async def _check_drift(
        self,
        state: RunState,
        version: WorkflowVersion,
        depth: int = 0,
        root: tuple[RunState, WorkflowVersion] | None = None,
    ) -> None:
        """Raise ``CapabilityDriftError`` if an unfinished session's manifest changed.

        ``root`` is the run being resumed, which the error offers to fork (at the step
        that holds the drifted session, or the sub-run that does).
        """
        root = root or (state, version)
        for session in state.sessions.values():
            if session.completed or session.manifest_hash is None or session.step_path is None:
                continue
            step = step_at(version.workflow, session.step_path)
            manifest = None if step is None else session_manifest(self, version, step, session.role)
            if manifest is None:
                continue
            if manifest_hash(manifest) != session.manifest_hash:
                error = drift_error(
                    run_id=state.run_id,
                    role=session.role,
                    old=session.manifest,
                    new=manifest,
                    fork=await fork_hint(self, *root),
                )
                if error is not None:
                    raise error
        if depth >= 32:
            return
        for sub_run_id in unfinished_sub_runs(state):
            records = await self.events.read(sub_run_id)
            if records:
                sub_state = fold(sub_run_id, records)
                if not sub_state.finished:
                    sub_version = await self.catalog.load(sub_state.workflow_version_id)
                    await self._check_drift(sub_state, sub_version, depth + 1, root)

    async def _drive(self, execution: LwirWalk) -> RunResult:
        with counting() as tally, self.sync_threads.bound():
            output = await execution.execute()
        return RunResult(
            replayed_calls=tally.replayed.total(),
            made_calls=tally.made.total(),
            run_id=execution.run_id,
            status=execution.state.status,
            output=output,
            executed_steps=execution.run.executed,
            replayed_steps=execution.run.replayed,
            state=execution.state,
        )
