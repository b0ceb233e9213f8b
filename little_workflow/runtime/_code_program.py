"""A code-first workflow as ``_launch`` runs it (``CodeProgram``), and how runs of it start.

A code-first run records, in its ``RunStarted``: the workflow's name, its qualified name
as the ``workflowVersionId`` (``code:pkg.module:review``), a hash of the body's source as
the ``definitionHash``, and the events it declares (``declaredEvents``, docs/waits.md);
each step function is pinned the first time the run calls it (``_code_pins``). The code is
the developer's: a resume with changed code is accepted as long as it replays the log
cleanly (``NonDeterminismError`` otherwise, ``_code_run``), and the change is recorded
(``code.drifted``), or refused with ``CodeDriftError`` under ``on_code_drift="refuse"``. A
resume, a retry or a worker finds the function again by its qualified name
(``load_workflow_function``); one that cannot be imported is a typed ``ConfigError``
(``workflow_not_importable``) before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from little_workflow._tracing import queued
from little_workflow.codec import JsonValue, dumps, sha256_digest
from little_workflow.errors import ConfigError
from little_workflow.events import CodeDrifted, RunStarted
from little_workflow.ids import new_id, validate_id
from little_workflow.lwir import Workflow
from little_workflow.lwir._models import TRUSTED_GRAPH
from little_workflow.runtime._agents import SessionRun
from little_workflow.runtime._code_api import (
    CODE_VERSION_PREFIX,
    WorkflowSpec,
    load_workflow_function,
    workflow_spec,
)
from little_workflow.runtime._code_drift import CodeDrift, RecordingDrift, resume_checks
from little_workflow.runtime._code_run import CodeRun, bind_input
from little_workflow.runtime._core import DurableRun
from little_workflow.runtime._host import RunHost, StoreHost, SubRunner
from little_workflow.runtime._input_types import check_code_input
from little_workflow.runtime._launch import FrontEnd, Launcher, RunResult
from little_workflow.runtime._queues import check_queue
from little_workflow.runtime._run_lock import locked
from little_workflow.runtime._state import RunState, is_code_run, read_state
from little_workflow.runtime._workflows import WorkflowVersion
from little_workflow.storage import DEFAULT_QUEUE, RunQueue

__all__ = [
    "CodeHost",
    "CodeProgram",
    "code_workflow",
    "is_code_run",
    "load_code_program",
    "run_code",
    "submit_code",
]

_REFERENCE_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class CodeHost(RunHost, StoreHost, SubRunner, Protocol):
    """What running code-first workflows uses: a run's resources and the launcher."""

    @property
    def on_code_drift(self) -> CodeDrift:
        """What a resume does when the code a run pinned changed: accept or refuse."""
        ...

    @property
    def queue(self) -> RunQueue:
        """The store's run queue (``submit``)."""
        ...

    def launcher(self, sub_runner: SubRunner | None = None) -> Launcher:
        """The launcher of this host's runs."""
        ...

    async def open(self) -> object:
        """Open the store (idempotent)."""
        ...


def code_workflow(workflow: object) -> Callable[..., Any] | None:
    """``workflow`` if it is a ``@workflow`` function, the one a ``module:function`` string
    names (imported), or ``None`` (an LWIR model or file)."""
    if workflow_spec(workflow) is not None:
        assert callable(workflow)
        return workflow
    if (
        isinstance(workflow, str)
        and _REFERENCE_RE.fullmatch(workflow)
        and not Path(workflow).exists()
    ):
        return load_workflow_function(workflow)
    return None


def load_code_program(host: CodeHost, state: RunState) -> CodeProgram:
    """The program of an existing code-first run: its function, found by qualified name."""
    qualified = state.workflow_version_id[len(CODE_VERSION_PREFIX) :]
    return CodeProgram(host, load_workflow_function(qualified))


class CodeProgram:
    """A ``@workflow`` function as ``_launch`` runs it (the code-first ``Program``)."""

    def __init__(self, host: CodeHost, function: Callable[..., Any]) -> None:
        spec = workflow_spec(function)
        if spec is None:
            raise ConfigError(f"{function!r} is not a @workflow function")
        self.host = host
        self.function = function
        self.spec: WorkflowSpec = spec
        #: An accepted code drift the next pass records first (``check_resume``).
        self._drifted: CodeDrifted | None = None

    def run_started(
        self,
        input: JsonValue,
        *,
        parent_run_id: str | None,
        parent_step_path: str | None,
        outer_loop: tuple[str, int] | None,
    ) -> RunStarted:
        """The ``RunStarted`` of a new run of it with ``input``."""
        return RunStarted(
            workflow_name=self.spec.name,
            definition_hash=self.spec.source_hash,
            workflow_version_id=self.spec.version_id,
            input=input,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
            outer_loop_id=None if outer_loop is None else outer_loop[0],
            cycle_number=None if outer_loop is None else outer_loop[1],
            declared_events=self.spec.events,
        )

    def check_same_run(self, state: RunState, input: JsonValue) -> None:
        """Refuse an existing run id of another workflow or input (``run_id_conflict``)."""
        if state.workflow_version_id != self.spec.version_id:
            differs = "another workflow"
        elif sha256_digest(state.input) != sha256_digest(input):
            differs = "other input"
        else:
            return
        raise ConfigError(
            f"run {state.run_id!r} already exists with {differs}; resume it, or start a new run "
            "with another run id",
            code="run_id_conflict",
        )

    async def check_resume(self, state: RunState) -> None:
        """Before anything runs: every unfinished agent session must find the
        configuration it started with (``CapabilityDriftError``), and changed code is
        accepted (recorded by the next pass) or refused (``CodeDriftError``); the replay
        itself checks that the log still fits the code."""
        self._drifted = await resume_checks(self.host, state, self.spec, self.host.on_code_drift)

    def front_end(self, state: RunState, *, retrying: bool) -> FrontEnd:
        """A pass of the body over ``state`` (recording an accepted drift first)."""
        front = self._code_run(state, retrying=retrying)
        drifted, self._drifted = self._drifted, None
        return front if drifted is None else RecordingDrift(front, drifted)

    def _code_run(self, state: RunState, *, retrying: bool) -> CodeRun:
        # Pinned: a hit is checked by ``CodeRun.site`` against the call's identity,
        # before the memo is asked.
        run = DurableRun(self.host, state, pinned=True, retrying=retrying)
        sessions = SessionRun(
            run=run, host=self.host, version=self._version(), sub_runner=self.host
        )
        return CodeRun(run, self.spec, self.function, self._start_child, sessions)

    def _version(self) -> WorkflowVersion:
        """A stand-in LWIR version for the agents' sessions: it names the workflow, and
        offers an orchestrator no LWIR sub-workflows."""
        workflow = Workflow.model_validate(
            {"name": self.spec.name, "steps": [{"id": "output", "kind": "output", "value": None}]},
            context={TRUSTED_GRAPH: True},
        )
        return WorkflowVersion(
            workflow=workflow,
            definition_hash=self.spec.source_hash,
            version_id=self.spec.version_id,
        )

    async def _start_child(
        self,
        function: Callable[..., Any],
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool,
    ) -> JsonValue:
        async with locked(self.host, run_id, shared=False):
            result = await self.host.launcher().start_or_continue(
                CodeProgram(self.host, function),
                input,
                run_id,
                parent_run_id=parent_run_id,
                parent_step_path=parent_step_path,
                retry_failed=retry_failed,
            )
        return result.output


async def run_code(
    host: CodeHost,
    function: Callable[..., Any],
    input: object,
    *,
    run_id: str | None = None,
    outer_loop: tuple[str, int] | None = None,
) -> RunResult:
    """Start (or, for an existing ``run_id``, continue) a run of ``function`` with ``input``.

    The input is checked (plain JSON, and it fits the body's keyword arguments) before
    anything is written.
    """
    await host.open()
    program = CodeProgram(host, function)
    dumps(input, where="run input")
    check_code_input(function, input, where=repr(program.spec.qualified))
    bind_input(function, input, where=f"workflow {program.spec.qualified!r}")
    run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
    async with locked(host, run_id):
        return await host.launcher().start_or_continue(
            program,
            input,  # type: ignore[arg-type]
            run_id,
            outer_loop=outer_loop,
        )


async def submit_code(
    host: CodeHost,
    function: Callable[..., Any],
    input: object,
    *,
    run_id: str | None = None,
    queue: str = DEFAULT_QUEUE,
) -> str:
    """Commit a run of ``function``'s ``RunStarted`` and queue it for a worker; its id.

    As ``Runtime.submit``: an existing ``run_id`` of the same workflow and input is
    queued again (a submit cut between its two writes), anything else is refused.
    """
    await host.open()
    queue_name = await check_queue(host.queue, queue)
    program = CodeProgram(host, function)
    dumps(input, where="run input")
    check_code_input(function, input, where=repr(program.spec.qualified))
    bind_input(function, input, where=f"workflow {program.spec.qualified!r}")
    run_input: JsonValue = input  # type: ignore[assignment]
    run_id = new_id("run") if run_id is None else validate_id(run_id, what="run id")
    if await host.events.read(run_id, limit=1):
        program.check_same_run(await read_state(host.events, run_id), run_input)
    else:
        started = program.run_started(
            run_input, parent_run_id=None, parent_step_path=None, outer_loop=None
        )
        await host.events.append(run_id, [queued(started, run_id)], expected_seq=0)
    await host.queue.submit(run_id, queue=queue_name)
    return run_id
