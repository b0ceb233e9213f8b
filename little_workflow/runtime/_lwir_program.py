"""An LWIR workflow as ``_launch`` runs it, and the checks made before it runs.

``LwirProgram`` is the LWIR ``Program``: a pinned ``WorkflowVersion`` with the sub-runner
its ``workflow`` steps use. Before a run starts or continues, every function, tool and
model slot it names must be there (``check_callables``: nothing is written otherwise),
and a resume must find each unfinished session's capabilities as they were
(``check_drift``, which offers a fork at the first step a resume would run:
``fork_hint``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from little_workflow._tracing import queued
from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import ConfigError, LittleWorkflowError
from little_workflow.events import RunStarted, RunStatus
from little_workflow.harness._manifest import drift_error, manifest_hash
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import (
    AgentStep,
    DecisionStep,
    ExecuteStep,
    MapStep,
    Step,
    ToolStep,
    Workflow,
    definition_hash,
    load_workflow,
)
from little_workflow.runtime._host import RunHost, SubRunner
from little_workflow.runtime._lwir_walk import LwirWalk, lwir_walk
from little_workflow.runtime._sessions import session_manifest, step_at
from little_workflow.runtime._state import RunState, fold, read_state, unfinished_sub_runs
from little_workflow.runtime._workflows import WorkflowVersion
from little_workflow.storage import PayloadLog, RunQueue

__all__ = [
    "LwirProgram",
    "ReplayResult",
    "available_workflows",
    "check_callables",
    "check_drift",
    "check_same_run",
    "fork_hint",
    "load_model",
    "replay_run",
]


def load_model(workflow: Workflow | str | os.PathLike[str]) -> tuple[Workflow, Path | None]:
    """A workflow given as a model or a file: the model, and the file's absolute path."""
    if isinstance(workflow, Workflow):
        return workflow, None
    path = Path(workflow).absolute()
    return load_workflow(path), path


def check_same_run(state: RunState, version: WorkflowVersion, input: JsonValue) -> None:
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


def _steps(steps: Iterable[Step]) -> Iterable[Step]:
    for step in steps:
        yield step
        if isinstance(step, MapStep):
            yield from _steps(step.body)


def _check_slot(host: RunHost, name: str) -> None:
    """``ConfigError`` unless ``host`` has the model slot ``name``.

    The harness's slots (and the model types they name) are imported here, by a workflow
    that uses a model only: checking a run of ``execute`` steps, such as a resume through
    the CLI, imports none of the harness.
    """
    from little_workflow.harness._slots import resolve_slot

    resolve_slot(host.model_slots, name)


def check_callables(
    host: RunHost, version: WorkflowVersion, *, trusted: bool | None = None
) -> None:
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
            _check_slot(host, step.agent.slot)
            _check_tools(host, version, step.id, step.agent.tools)
        elif isinstance(step, ExecuteStep | DecisionStep) and step.fn is not None:
            host.functions.check_offered(
                step.fn, workflow=version.name, step=step.id, computed=not trusted
            )
            host.functions.resolve(step.fn)
        elif isinstance(step, ToolStep):
            _check_tools(host, version, step.id, (step.tool,))
        if isinstance(step, ExecuteStep | ToolStep) and step.fixer is not None:
            _check_slot(host, step.fixer.slot)
        if isinstance(step, AgentStep):
            _check_slot(host, step.slot)
            _check_tools(host, version, step.id, step.tools)
    for child in version.children.values():
        check_callables(host, child)


def _check_tools(
    host: RunHost, version: WorkflowVersion, step_id: str, names: Iterable[str]
) -> None:
    for name in names:
        if name not in host.toolset.registry:
            known = ", ".join(host.toolset.registry.names()) or "none"
            raise ConfigError(
                f"workflow {version.name!r} step {step_id!r} uses tool {name!r}, "
                f"which is not registered (registered: {known}); register it with "
                "Runtime(tools=[...]), or on the command line with --setup module:attr naming "
                "a RuntimeSetup whose tools has it",
                code="unknown_tool",
            )


def available_workflows(host: RunHost, version: WorkflowVersion, step: AgentStep) -> dict[str, str]:
    """An orchestrator's workflows as they are now: name → definition hash.

    Found again (files next to the run's workflow file, registered names), not taken
    from the pinned version: the manifest compares the configuration at hand with the
    one the session started with. A workflow that cannot be found is ``(missing)``.
    """
    source = Path(version.source) if version.source else None
    available: dict[str, str] = {}
    for reference in step.workflows:
        try:
            found, _ = host.catalog.find(reference, source, where=f"step {step.id!r}")
        except ConfigError:
            # Named as the run pinned it (a file's name is inside the file), so only
            # the hash shows as changed.
            pinned = version.children.get(reference)
            available[reference if pinned is None else pinned.name] = "(missing)"
            continue
        available[found.name] = definition_hash(found)
    return available


async def fork_hint(
    host: RunHost, state: RunState, version: WorkflowVersion
) -> tuple[str, str] | None:
    """``(run id, path)``: where forking ``state`` keeps all its replayable work.

    The first step its walk cannot replay (the frontier a resume would continue from), so
    a fork there keeps every completed step before it. ``None`` if the log cannot be
    walked (the error that says so comes from the resume itself).
    """
    walk = lwir_walk(host, version, state, replay_only=True)
    try:
        await walk.replay()
    except LittleWorkflowError:
        return None
    return (state.run_id, walk.frontier[0]) if walk.frontier else None


async def check_drift(
    host: RunHost,
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
        manifest = None if step is None else session_manifest(host, version, step, session.role)
        if manifest is None:
            continue
        if manifest_hash(manifest) != session.manifest_hash:
            error = drift_error(
                run_id=state.run_id,
                role=session.role,
                old=session.manifest,
                new=manifest,
                fork=await fork_hint(host, *root),
            )
            if error is not None:
                raise error
    if depth >= 32:
        return
    for sub_run_id in unfinished_sub_runs(state):
        records = await host.events.read(sub_run_id)
        if records:
            sub_state = fold(sub_run_id, records)
            if not sub_state.finished:
                sub_version = await host.catalog.load(sub_state.workflow_version_id)
                await check_drift(host, sub_state, sub_version, depth + 1, root)


class LwirProgram:
    """A pinned LWIR version as ``_launch`` runs it (the LWIR ``Program``)."""

    def __init__(self, host: RunHost, version: WorkflowVersion, sub_runner: SubRunner) -> None:
        self.host = host
        self.version = version
        self.sub_runner = sub_runner

    def run_started(
        self,
        input: JsonValue,
        *,
        parent_run_id: str | None,
        parent_step_path: str | None,
        outer_loop: tuple[str, int] | None,
    ) -> RunStarted:
        """The version's ``RunStarted`` for ``input``."""
        return self.version.run_started(
            input,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
            outer_loop=outer_loop,
        )

    def check_same_run(self, state: RunState, input: JsonValue) -> None:
        """``check_same_run`` against this version."""
        check_same_run(state, self.version, input)

    async def check_resume(self, state: RunState) -> None:
        """Every session this resume would continue, here and in the sub-runs it would
        resume, must find the configuration it started with; every callable must be there."""
        await check_drift(self.host, state, self.version)
        self.host.check_callables(self.version)

    def front_end(self, state: RunState, *, retrying: bool) -> LwirWalk:
        """A walk of this version over ``state``."""
        return lwir_walk(
            self.host, self.version, state, sub_runner=self.sub_runner, retrying=retrying
        )


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


async def replay_run(host: RunHost, state: RunState, version: WorkflowVersion) -> ReplayResult:
    """Walk ``state``'s run without executing anything (``Runtime.replay``)."""
    walk = lwir_walk(host, version, state, replay_only=True)
    output = await walk.replay()
    visited = walk.run.visited
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
        run_id=state.run_id,
        state=state,
        output=state.output if state.status is RunStatus.COMPLETED else output,
        frontier=tuple(walk.frontier),
        replayed_steps=walk.run.replayed,
        unreached=tuple(unreached),
    )


async def submit_version(
    events: PayloadLog,
    queue: RunQueue,
    version: WorkflowVersion,
    input: JsonValue,
    *,
    run_id: str | None,
    queue_name: str,
) -> str:
    """Commit a run of ``version``'s ``RunStarted`` and queue it on ``queue_name``; its id.

    As ``Runtime.submit``: an existing ``run_id`` of the same workflow and input is queued
    again (a submit cut between its two writes), anything else is refused.
    """
    run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
    if await events.read(run_id, limit=1):
        check_same_run(await read_state(events, run_id), version, input)
    else:
        started = queued(version.run_started(input), run_id)
        await events.append(run_id, [started], expected_seq=0)
    await queue.submit(run_id, queue=queue_name)
    return run_id
