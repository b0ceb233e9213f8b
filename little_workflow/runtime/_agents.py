"""Running an LWIR ``agent`` step: one harness session, durable call by call (Layer C).

The session's id is the step's path. Its manifest is recorded in
``harness.session.started`` when it first starts and checked when it starts again after
a crash; its calls are recorded by ``SessionRecorder``; ``harness.session.completed`` and
the step's ``StepCompleted`` are committed together. A failed attempt (a provider that
stayed down, say) is retried under the step's retry policy, and the retry replays every
call the session already committed.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import TYPE_CHECKING, Any

from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidValueError, StorageError
from little_workflow.events import HarnessSessionCompleted, HarnessSessionStarted
from little_workflow.harness._agent import agent
from little_workflow.harness._harness import AgentHarness
from little_workflow.harness._manifest import drift_error, manifest_hash
from little_workflow.lwir import AgentStep
from little_workflow.runtime._sessions import SessionRecorder, agent_manifest

if TYPE_CHECKING:
    from pathlib import Path

    from little_workflow.runtime._execution import RunExecution, Scope, _Site

__all__ = ["run_agent_step", "scratch_dir"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def scratch_dir(execution: RunExecution, session_id: str) -> Path:
    """``runs/<runId>/harness/<session>``: the session's working directory, created 0700."""
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    name = f"{_UNSAFE.sub('_', session_id)[:80]}-{digest}"
    folder = execution.runtime.data_dir.harness_dir(execution.run_id) / name
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"cannot create the scratch directory {str(folder)!r}: {exc}") from exc
    return folder


def _parse_json_answer(answer: Any, path: str) -> JsonValue:
    if not isinstance(answer, str):
        raise InvalidValueError(f"agent {path!r} gave no answer to read as JSON")
    text = answer.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if fenced is not None:
        text = fenced.group(1)
    try:
        value: JsonValue = json.loads(text)
    except ValueError as exc:
        raise InvalidValueError(
            f"agent {path!r} was asked for JSON but answered {answer[:200]!r}: {exc}"
        ) from exc
    return value


async def run_agent_step(
    execution: RunExecution, step: AgentStep, site: _Site, scope: Scope
) -> JsonValue:
    """Run (or resume) the step's session; commit its output with the step's completion."""
    runtime, path = execution.runtime, site.text
    prompt = execution._render(step.prompt, scope, step, path, "prompt")
    instructions: str | None = None
    if step.instructions is not None:
        rendered = execution._render(step.instructions, scope, step, path, "instructions")
        instructions = rendered if isinstance(rendered, str) else json.dumps(rendered)
    manifest = agent_manifest(runtime, step, {})
    digest = manifest_hash(manifest)
    recorded = execution.state.sessions.get(path)
    if recorded is not None and recorded.manifest_hash not in (None, digest):
        error = drift_error(
            run_id=execution.run_id, role=step.role, old=recorded.manifest, new=manifest
        )
        if error is not None:
            raise error
    started = HarnessSessionStarted(
        session_id=path, role=step.role, step_path=path, manifest=manifest, manifest_hash=digest
    )
    scratch = scratch_dir(execution, path)
    harness = AgentHarness(
        name=f"{execution.run_id}/{path}",
        agent_graph=agent(slot=step.slot, tools=step.tools, max_turns=step.max_turns),
        model_slots=runtime.model_slots,
        tools=runtime.toolset,
    )
    recorder = SessionRecorder(execution.writer, execution.state, path)

    async def call(_attempt: int) -> JsonValue:
        session = execution.state.sessions.get(path)
        if session is None or session.manifest_hash is None:
            await execution.append([started], sync=False)
        ctx = harness.create_context(
            id=f"{execution.run_id}/{path}", instructions=instructions, cwd=str(scratch)
        )
        answer = await harness.execute(ctx, prompt, recorder=recorder)
        return _parse_json_answer(answer, path) if step.output == "json" else answer

    result, _ = await execution._attempts(step, site, call)
    await execution.append(
        [
            HarnessSessionCompleted(session_id=path, output=result),
            execution._completed(step, site, result),
        ],
        sync=True,
    )
    return result
