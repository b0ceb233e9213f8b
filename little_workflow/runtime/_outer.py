"""Outer loops (Layer B): a workflow run again, cycle after cycle, until ``supervise()`` is done.

When ``max_outer_cycles > 1``, cycles share an ``outerLoopId``. The manifest at
``outer-loops/{outerLoopId}.json`` is the cycle-level durability record (the seed's shape,
replaced atomically). Each cycle is one run of the workflow, with the input
``{"input": <the loop's input>, "cycle": n, "previous": [<earlier cycles>]}``; after it,
``supervise(cycle)`` says ``Done(final_output)`` or ``Continue(summary)``.

The order of writes, and why:

1. ``pendingCycleRunId`` is written to the manifest **before** a cycle starts: a resume
   that finds it reuses that run id, so Layers A and C resume the cycle's run.
2. ``OuterLoopCycleCompleted`` is appended to the cycle's run log when ``supervise()``
   returns, **before** the manifest is updated. It is the cycle's commit point: the first
   one for a cycle is authoritative, and a resume that finds it never asks
   ``supervise()`` again for that cycle.
3. The manifest records the cycle and clears ``pendingCycleRunId``; with ``Done``, or
   after the last cycle, it records the result.

One caller at a time drives an ``outerLoopId`` in a data directory (a lock under
``locks/``); a second caller waits, then resumes from what the first committed. A
resume must pass the same workflow definition, ``max_outer_cycles`` and input, or it fails
with ``RunFailedError(cause_code="runtime_config_error")`` before any cycle runs.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from little_workflow._failures import error_code, error_message, is_interruption
from little_workflow.codec import sha256_digest, to_json_value
from little_workflow.durable import FileLock
from little_workflow.errors import (
    ConfigError,
    CorruptDataError,
    InvalidValueError,
    RunFailedError,
    SupervisorError,
    shown,
)
from little_workflow.events import OuterLoopCycleCompleted, OuterLoopCycleResult, RunStatus
from little_workflow.ids import is_valid_id, new_id, validate_id
from little_workflow.lwir import Workflow, definition_hash
from little_workflow.platform._atomic import atomic_write
from little_workflow.platform._threads import call_user
from little_workflow.runtime._host import ServiceHost
from little_workflow.runtime._lwir_program import load_model

if TYPE_CHECKING:
    from little_workflow.runtime._launch import RunResult

__all__ = [
    "Continue",
    "Cycle",
    "CycleRecord",
    "Done",
    "OuterLoopManifest",
    "OuterLoopOutcome",
    "Supervise",
    "read_manifest",
    "run_outer_loop",
]


class OuterHost(ServiceHost, Protocol):
    """What an outer loop uses of the runtime that runs its cycles (a ``Runtime``)."""

    async def run(
        self,
        workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
        input: object = None,
        *,
        run_id: str | None = None,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunResult:
        """Start (or continue) a run: one cycle."""
        ...


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        defer_build=True,  # built on first use, not at import: see ``little_workflow.events``
    )


class OuterLoopGoal(_Model):
    """What the loop works towards: the workflow (by definition hash) and its description."""

    workflow_definition_hash: str
    description: str | None = None


class CycleRecord(_Model):
    """One finished cycle in the manifest."""

    cycle_number: int
    run_id: str
    workflow_version_id: str
    status: str
    output: JsonValue = None
    summary: str | None = None


class OuterLoopResultRecord(_Model):
    """How the loop ended: ``done`` (``supervise()`` said so) or ``exhausted`` (no cycles left)."""

    kind: Literal["done", "exhausted"]
    final_output: JsonValue = None


class OuterLoopManifest(_Model):
    """``outer-loops/{outerLoopId}.json``, field for field as the seed has it."""

    outer_loop_id: str
    goal: OuterLoopGoal
    max_cycles: int = Field(ge=1)
    #: The identity of the loop's input; ``None`` in manifests written before it existed.
    input_hash: str | None = None
    cycles: list[CycleRecord] = Field(default_factory=list)
    #: Written before a cycle starts; cleared once ``supervise()`` has answered for it.
    pending_cycle_run_id: str | None = None
    result: OuterLoopResultRecord | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Cycle:
    """What ``supervise()`` sees: the cycle that just ran, and the ones before it."""

    outer_loop_id: str
    cycle_number: int
    max_cycles: int
    run_id: str
    output: JsonValue
    input: JsonValue
    previous: tuple[CycleRecord, ...]


@dataclass(frozen=True, slots=True)
class Done:
    """``supervise()``'s answer: the loop is done, with this final output."""

    final_output: JsonValue = None


@dataclass(frozen=True, slots=True)
class Continue:
    """``supervise()``'s answer: run another cycle (``summary`` is kept in the manifest)."""

    summary: str | None = None


Supervise = Callable[[Cycle], "Done | Continue | Awaitable[Done | Continue]"]


@dataclass(frozen=True, slots=True, kw_only=True)
class OuterLoopOutcome:
    """How a loop ended, as its manifest records it."""

    outer_loop_id: str
    kind: Literal["done", "exhausted"]
    final_output: JsonValue
    cycles: tuple[CycleRecord, ...]


def manifest_path(runtime: ServiceHost, outer_loop_id: str) -> Path:
    """``outer-loops/{outerLoopId}.json`` in the runtime's data directory."""
    return runtime.data_dir.outer_loops / f"{validate_id(outer_loop_id, what='outer loop id')}.json"


def read_manifest(path: Path) -> OuterLoopManifest | None:
    """The manifest at ``path``, ``None`` if there is none; ``CorruptDataError`` if unreadable.

    A corrupt manifest is reported and left as it is: it is never overwritten.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CorruptDataError(f"cannot read the outer-loop manifest {str(path)!r}: {exc}") from exc
    try:
        manifest = OuterLoopManifest.model_validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "<document>"
        raise _corrupt(path, f"{where}: {first['msg']}") from exc
    # Valid fields that do not fit together would be resumed wrongly (the next cycle's
    # number is the count of recorded cycles), so they are reported like bad JSON.
    if manifest.outer_loop_id != path.stem:
        raise _corrupt(path, f"outerLoopId: {manifest.outer_loop_id!r} is not the file's name")
    for index, cycle in enumerate(manifest.cycles, start=1):
        if cycle.cycle_number != index:
            raise _corrupt(
                path, f"cycles.{index - 1}.cycleNumber: {cycle.cycle_number}, not {index}"
            )
    # Run ids are resumed and looked up: a bad one is reported here, naming the file,
    # rather than as a bare invalid id from deep inside the cycle's run.
    run_ids: dict[str, str | None] = {
        f"cycles.{i}.runId": cycle.run_id for i, cycle in enumerate(manifest.cycles)
    }
    run_ids["pendingCycleRunId"] = manifest.pending_cycle_run_id
    for where, run_id in run_ids.items():
        if run_id is not None and not is_valid_id(run_id):
            raise _corrupt(path, f"{where}: {run_id[:80]!r} is not a valid run id")
    return manifest


def _corrupt(path: Path, problem: str) -> CorruptDataError:
    return CorruptDataError(
        f"the outer-loop manifest {str(path)!r} is not valid ({problem}); "
        "it was left unchanged: restore it from a backup, or use a new outerLoopId"
    )


def _write(path: Path, manifest: OuterLoopManifest) -> None:
    text = manifest.model_dump_json(by_alias=True, indent=2)
    atomic_write(path, text.encode("utf-8") + b"\n")


def _mismatch(reason: str, message: str) -> RunFailedError:
    return RunFailedError(message, cause_code="runtime_config_error", reason=reason)


async def _input_identity(runtime: OuterHost, manifest: OuterLoopManifest) -> str | None:
    """For a manifest without ``inputHash``: the input identity its cycles' runs recorded.

    The in-flight cycle's run counts too: it was started with the loop's input, and
    accepting other input would only fail later, on that run, with a ``run_id_conflict``
    after the wrong ``inputHash`` had been recorded.
    """
    run_ids = [cycle.run_id for cycle in manifest.cycles]
    if manifest.pending_cycle_run_id is not None:
        run_ids.append(manifest.pending_cycle_run_id)
    for run_id in run_ids:
        records = await runtime.events.read(run_id, limit=1)
        if records:
            recorded = getattr(records[0].event, "input", None)
            if isinstance(recorded, dict) and "input" in recorded:
                return sha256_digest(recorded["input"])
    return None


async def _check(
    runtime: OuterHost,
    path: Path,
    manifest: OuterLoopManifest,
    *,
    goal_hash: str,
    max_cycles: int,
    input_hash: str,
) -> OuterLoopManifest:
    """Refuse a resume with other goal, bound or input; adopt an input identity if none."""
    if manifest.goal.workflow_definition_hash != goal_hash:
        raise _mismatch(
            "outer_loop_goal_mismatch",
            f"outer loop {manifest.outer_loop_id!r} was started with workflow "
            f"{manifest.goal.workflow_definition_hash}, not {goal_hash}; use a new outerLoopId "
            "for another workflow",
        )
    if manifest.max_cycles != max_cycles:
        raise _mismatch(
            "outer_loop_max_cycles_mismatch",
            f"outer loop {manifest.outer_loop_id!r} was started with maxCycles "
            f"{manifest.max_cycles}, not {max_cycles}",
        )
    recorded = manifest.input_hash or await _input_identity(runtime, manifest)
    if recorded is not None and recorded != input_hash:
        raise _mismatch(
            "outer_loop_input_mismatch",
            f"outer loop {manifest.outer_loop_id!r} was started with other input; use a new "
            "outerLoopId for new input",
        )
    if manifest.input_hash is None:
        manifest = manifest.model_copy(update={"input_hash": input_hash})
        _write(path, manifest)
    return manifest


async def _supervised(
    runtime: OuterHost, run_id: str, cycle: Cycle, supervise: Supervise
) -> OuterLoopCycleResult:
    """The cycle's committed ``OuterLoopCycleCompleted`` result, asking ``supervise()`` if none."""
    for record in await runtime.events.read(run_id):
        if isinstance(record.event, OuterLoopCycleCompleted):
            return record.event.result  # the first one is authoritative
    where = f"cycle {cycle.cycle_number} of outer loop {cycle.outer_loop_id!r}"
    try:
        answer = await call_user(supervise, cycle)
    except BaseException as exc:
        # The supervisor is user code: whatever it raises (SystemExit included) ends this
        # call with a typed error, and nothing is recorded, so the next call asks again.
        if is_interruption(exc):
            raise
        raise SupervisorError(
            f"supervise() raised {error_code(exc)}: {error_message(exc)} about {where}; "
            "nothing was recorded for the cycle: fix the supervisor and run the loop again "
            "(the cycle's run is kept, and supervise() is asked again)"
        ) from exc
    if isinstance(answer, Done):
        final_output = to_json_value(answer.final_output, where=f"Done.final_output of {where}")
        result = OuterLoopCycleResult(kind="done", final_output=final_output)
    elif isinstance(answer, Continue):
        if answer.summary is not None and not isinstance(answer.summary, str):
            raise InvalidValueError(
                f"Continue.summary of {where} is a {type(answer.summary).__name__}; "
                "give a string or None"
            )
        result = OuterLoopCycleResult(kind="continue", summary=answer.summary)
    else:
        raise ConfigError(
            f"supervise() returned {answer!r}; return Done(final_output) or Continue(summary)"
        )
    event = OuterLoopCycleCompleted(
        outer_loop_id=cycle.outer_loop_id, cycle_number=cycle.cycle_number, result=result
    )
    await runtime.events.append(
        run_id, [event], sync=True, expected_seq=await runtime.events.last_seq(run_id)
    )
    if runtime.crash is not None:
        runtime.crash.committed(1)
    runtime.faults.reached("outer_loop.after_supervise")
    return result


def _check_supervise(supervise: object) -> None:
    """Refuse a ``supervise`` that cannot be called as ``supervise(cycle)`` (``ConfigError``).

    Checked before the first cycle runs, so a wrong signature is a configuration error
    naming the function, not a ``TypeError`` after a cycle's work was paid for.
    """
    name = _callable_name(supervise)
    if not callable(supervise):
        raise ConfigError(f"supervise {name} is not callable", code="supervise_invalid")
    try:
        signature = inspect.signature(supervise)
    except (TypeError, ValueError):
        return  # a builtin without a signature: its call says what is wrong
    try:
        signature.bind(None)  # how _supervised calls it: one positional Cycle
    except TypeError as exc:
        parameters = signature.replace(return_annotation=inspect.Signature.empty)
        raise ConfigError(
            f"supervise function {name}{parameters} cannot be called as supervise(cycle): "
            f"{exc}; it takes the Cycle that just ran and returns Done(...) or Continue(...)",
            code="supervise_invalid",
        ) from None


def _callable_name(value: object) -> str:
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if isinstance(module, str) and isinstance(qualname, str):
        return f"{module}:{qualname}"
    return shown(value)


async def run_outer_loop(
    runtime: OuterHost,
    workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
    input: JsonValue,
    *,
    max_outer_cycles: int,
    supervise: Supervise,
    outer_loop_id: str | None = None,
    timeout: float | None = None,
) -> OuterLoopOutcome:
    """Run (or resume) the outer loop ``outer_loop_id``; see the module docstring.

    ``timeout`` bounds the whole call, the wait for another caller included (a
    ``LockTimeoutError`` if it runs out while waiting, ``TimeoutError`` later); the loop is
    resumable after either, and after a cancellation.
    """
    if max_outer_cycles < 1:
        raise ConfigError(f"max_outer_cycles must be at least 1, not {max_outer_cycles}")
    _check_supervise(supervise)
    await runtime.open()
    target, goal_hash, description = _goal(workflow)
    input_hash = sha256_digest(input)
    # Only a missing id is generated: an empty one is a mistake, refused by manifest_path.
    loop_id = new_id("ol") if outer_loop_id is None else outer_loop_id
    path = manifest_path(runtime, loop_id)
    deadline = None if timeout is None else time.monotonic() + timeout
    lock = FileLock(
        runtime.data_dir.lock_path("outer-loop", loop_id), purpose=f"outer loop {loop_id!r}"
    )
    await lock.acquire(timeout=timeout)
    try:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        async with asyncio.timeout(remaining):
            return await _drive(
                runtime,
                path=path,
                loop_id=loop_id,
                target=target,
                description=description,
                input=input,
                goal_hash=goal_hash,
                input_hash=input_hash,
                max_cycles=max_outer_cycles,
                supervise=supervise,
            )
    finally:
        lock.release()


def _goal(
    workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
) -> tuple[Workflow | Path | Callable[..., Any], str, str | None]:
    """What each cycle runs, the goal's hash and its description.

    A code-first workflow's goal is its qualified name, not its source: as for a run,
    a resumed loop may go on with changed code (docs/code-first.md, "Versioning").
    """
    from little_workflow.runtime._code_api import workflow_spec
    from little_workflow.runtime._code_program import code_workflow

    function = code_workflow(workflow)
    if function is not None:
        spec = workflow_spec(function)
        assert spec is not None
        lines = (inspect.getdoc(function) or "").strip().splitlines()
        return function, sha256_digest(spec.version_id), lines[0] if lines else None
    if callable(workflow):
        named = getattr(workflow, "__qualname__", workflow)
        raise ConfigError(
            f"an outer loop runs a @workflow function or an LWIR workflow, not {named!r}"
        )
    model, source = load_model(workflow)
    return model if source is None else source, definition_hash(model), model.description


async def _drive(
    runtime: OuterHost,
    *,
    path: Path,
    loop_id: str,
    target: Workflow | Path | Callable[..., Any],
    description: str | None,
    input: JsonValue,
    goal_hash: str,
    input_hash: str,
    max_cycles: int,
    supervise: Supervise,
) -> OuterLoopOutcome:
    manifest = read_manifest(path)
    if manifest is None:
        manifest = OuterLoopManifest(
            outer_loop_id=loop_id,
            goal=OuterLoopGoal(workflow_definition_hash=goal_hash, description=description),
            max_cycles=max_cycles,
            input_hash=input_hash,
        )
        _write(path, manifest)
    else:
        manifest = await _check(
            runtime,
            path,
            manifest,
            goal_hash=goal_hash,
            max_cycles=max_cycles,
            input_hash=input_hash,
        )
    while manifest.result is None:
        number = len(manifest.cycles) + 1
        run_id = manifest.pending_cycle_run_id
        if run_id is None:
            run_id = new_id("run")
            manifest = manifest.model_copy(update={"pending_cycle_run_id": run_id})
            _write(path, manifest)  # before the cycle starts
            runtime.faults.reached("outer_loop.before_cycle")
        previous = tuple(manifest.cycles)
        cycle_input: JsonValue = {
            "input": input,
            "cycle": number,
            "previous": [
                {"cycleNumber": c.cycle_number, "output": c.output, "summary": c.summary}
                for c in previous
            ],
        }
        result = await runtime.run(
            target,
            cycle_input,
            run_id=run_id,
            outer_loop=(loop_id, number),
        )
        cycle = Cycle(
            outer_loop_id=loop_id,
            cycle_number=number,
            max_cycles=max_cycles,
            run_id=run_id,
            output=result.output,
            input=input,
            previous=previous,
        )
        decision = await _supervised(runtime, run_id, cycle, supervise)
        record = CycleRecord(
            cycle_number=number,
            run_id=run_id,
            workflow_version_id=result.state.workflow_version_id,
            status=RunStatus.COMPLETED.value,
            output=result.output,
            summary=decision.summary,
        )
        update: dict[str, object] = {
            "cycles": [*manifest.cycles, record],
            "pending_cycle_run_id": None,
        }
        if decision.kind == "done":
            update["result"] = OuterLoopResultRecord(
                kind="done", final_output=decision.final_output
            )
        elif number >= max_cycles:
            update["result"] = OuterLoopResultRecord(kind="exhausted", final_output=result.output)
        manifest = manifest.model_copy(update=update)
        _write(path, manifest)
    return OuterLoopOutcome(
        outer_loop_id=loop_id,
        kind=manifest.result.kind,
        final_output=manifest.result.final_output,
        cycles=tuple(manifest.cycles),
    )


def status(runtime: ServiceHost, outer_loop_id: str) -> OuterLoopManifest:
    """The loop's manifest; ``ConfigError`` (``outer_loop_not_found``) if there is none."""
    manifest = read_manifest(manifest_path(runtime, outer_loop_id))
    if manifest is None:
        raise ConfigError(f"there is no outer loop {outer_loop_id!r}", code="outer_loop_not_found")
    return manifest
