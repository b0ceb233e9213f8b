"""Harness sessions inside a run: Layer C of the seed, and capability manifests.

An ``agent`` step runs a harness session whose id is the step's path. Its model and tool
calls are recorded in the run's own event log by ``SessionRecorder``:

* ``harness.model.called`` (write-behind) then ``harness.model.responded`` (fsynced):
  a call whose response is committed is never made again; its response is replayed
  into the conversation.
* ``harness.tool_call.started`` then ``harness.tool_call.succeeded`` or ``.failed``
  (fsynced); a recorded failure replays as the same error, sent back to the model.
* a call started but without an outcome (the crash boundary) is made again, with the
  arguments it was recorded with.

The recorded calls are looked up by path through a ``MemoTable`` with the ``error``
policy: a recorded call made by a different step definition is a typed error, never a
silently replayed answer to another question.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from little_workflow._failures import error_code, error_message
from little_workflow.codec import JsonValue
from little_workflow.durable import MemoTable
from little_workflow.durable._recorder import Recorded, Unit
from little_workflow.errors import InvalidStepPathError
from little_workflow.events import (
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
)
from little_workflow.harness._manifest import build_manifest
from little_workflow.lwir import (
    AgentStep,
    BranchSegment,
    DecisionStep,
    MapStep,
    Step,
    StepBase,
    Workflow,
    parse_step_path,
)
from little_workflow.runtime._state import RunState
from little_workflow.runtime._tally import current as current_tally
from little_workflow.runtime._waits import ASK_USER

if TYPE_CHECKING:
    from little_workflow.runtime._host import RunHost
    from little_workflow.runtime._workflows import WorkflowVersion
    from little_workflow.runtime._writer import RunWriter

__all__ = ["SessionRecorder", "session_manifest", "session_slot", "step_at"]


def _count_made(unit: Unit) -> None:
    tally = current_tally()
    if tally is not None and unit.kind in ("model", "tool"):
        tally.made[unit.kind] += 1


class SessionRecorder:
    """Records one session's model and tool calls in the run's log (see the module doc)."""

    def __init__(self, writer: RunWriter, state: RunState, session_id: str) -> None:
        self.writer = writer
        self.state = state
        self.session_id = session_id
        self.memo = MemoTable(
            scope=f"session {session_id!r} of run {state.run_id!r}", on_mismatch="error"
        )
        session = state.sessions.get(session_id)
        if session is not None:
            for call in session.calls.values():
                if call.done:
                    value: JsonValue = (
                        call.value
                        if call.ok
                        else {"errorCode": call.error_code, "message": call.message}
                    )
                    self.memo.record(call.call_id, call.identity or "", value, ok=call.ok)

    def replay(self, unit: Unit) -> Recorded | None:
        """The committed outcome of a model or tool call at ``unit.path``."""
        if unit.kind not in ("model", "tool"):
            return None  # Layer C records calls; code and composites run again
        entry = self.memo.lookup(unit.path, unit.identity)
        if entry is None:
            return None
        tally = current_tally()
        if tally is not None:
            tally.replayed[unit.kind] += 1
        if entry.ok:
            return Recorded(value=entry.value)
        detail = entry.value if isinstance(entry.value, dict) else {}
        code, message = detail.get("errorCode"), detail.get("message")
        return Recorded(
            value=None,
            ok=False,
            error_code=code if isinstance(code, str) else "error",
            message=message if isinstance(message, str) else "recorded failure",
        )

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """The recorded detail of a call that started but has no outcome."""
        if unit.kind not in ("model", "tool"):
            return None
        session = self.state.sessions.get(self.session_id)
        call = None if session is None else session.calls.get(unit.path)
        if call is None or call.done:
            return None
        _count_made(unit)  # cut off by the crash: it is made again, from its recorded start
        return call.detail

    async def started(self, unit: Unit) -> None:
        """``harness.model.called`` / ``harness.tool_call.started``."""
        detail = unit.detail
        _count_made(unit)
        if unit.kind == "model":
            slot = detail.get("slot")
            # model_construct: the request is a pydantic dump already, plain JSON; validating
            # it again would walk the whole conversation on every call.
            called = HarnessModelCalled.model_construct(
                session_id=self.session_id,
                call_id=unit.path,
                slot=slot if isinstance(slot, str) else "",
                request=detail.get("request"),
                identity=unit.identity,
            )
            await self.writer.append([called], sync=False)
        elif unit.kind == "tool":
            name = detail.get("name")
            await self.writer.append(
                [
                    HarnessToolCallStarted(
                        session_id=self.session_id,
                        call_id=unit.path,
                        tool_name=name if isinstance(name, str) else "",
                        arguments=detail.get("arguments"),
                        identity=unit.identity,
                    )
                ],
                # A start that says what will happen elsewhere (a sub-run's id) must be
                # durable before it happens; the rest can ride with the outcome.
                sync=unit.durable_start,
            )

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """``harness.model.responded`` / ``harness.tool_call.succeeded``, fsynced."""
        if unit.kind == "model":
            responded = HarnessModelResponded.model_construct(
                session_id=self.session_id, call_id=unit.path, response=value
            )
            await self.writer.append([responded], sync=True)
        elif unit.kind == "tool":
            await self.writer.append(
                [
                    HarnessToolCallSucceeded(
                        session_id=self.session_id, call_id=unit.path, result=value
                    )
                ],
                sync=True,
            )
        else:
            return
        self.memo.record(unit.path, unit.identity, value)

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """``harness.tool_call.failed``, fsynced; a failed model call is not recorded."""
        if unit.kind != "tool":
            return
        code = error_code(error)
        message = getattr(error, "message", None) or error_message(error)
        await self.writer.append(
            [
                HarnessToolCallFailed(
                    session_id=self.session_id,
                    call_id=unit.path,
                    error_code=code,
                    message=str(message),
                )
            ],
            sync=True,
        )
        self.memo.record(
            unit.path, unit.identity, {"errorCode": code, "message": message}, ok=False
        )


def session_manifest(
    runtime: RunHost, version: WorkflowVersion, step: StepBase, role: str
) -> dict[str, JsonValue] | None:
    """The capability manifest of ``step``'s ``role`` session, with the configuration now.

    ``None`` if the step has no such session. A slot or tool that is not configured shows
    as ``(missing)``: a drift to report, not a crash.
    """
    workflows: dict[str, str] = {}
    uses = session_slot(step, role)
    if uses is None:
        return None
    slot_name, tools = uses
    if isinstance(step, AgentStep) and role == "orchestrator":
        workflows = runtime.available_workflows(version, step)
    slot = runtime.model_slots.get(slot_name)
    registry = runtime.toolset.registry
    hashes = {
        name: (registry.get(name).schema_hash if name in registry else "(missing)")
        for name in tools
    }
    if isinstance(step, AgentStep) and role == step.role and step.ask_user:
        from little_workflow.runtime._ask_user import ask_user_tool

        hashes[ASK_USER] = ask_user_tool().schema_hash
    return build_manifest(
        role=role,
        model_slot_id=slot.slot_id if slot is not None else "(missing)",
        model_options=slot.options.identity() if slot is not None else None,
        tools=hashes,
        available_workflows=list(workflows.items()),
    )


def session_slot(step: StepBase, role: str) -> tuple[str, tuple[str, ...]] | None:
    """The model slot and tools of ``step``'s ``role`` session; ``None`` if it has none."""
    if isinstance(step, AgentStep) and role == step.role:
        return step.slot, step.tools
    if isinstance(step, DecisionStep) and step.agent is not None and role == "decider":
        return step.agent.slot, step.agent.tools
    fixer = getattr(step, "fixer", None)
    if role == "fixer" and fixer is not None:
        return fixer.slot, ()
    return None


def step_at(workflow: Workflow, path: str) -> StepBase | None:
    """The step definition a step path runs (``m[k].worker.visit[1]`` → ``worker``)."""
    try:
        parsed = parse_step_path(path)
    except InvalidStepPathError:
        return None
    steps: tuple[Step, ...] = workflow.steps
    found: StepBase | None = None
    for segment in parsed.segments:
        if isinstance(segment, BranchSegment):
            if not isinstance(found, MapStep):
                return None
            steps = found.body
            continue
        found = next((step for step in steps if step.id == segment.step_id), None)
        if found is None:
            return None
    return found
