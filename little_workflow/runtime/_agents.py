"""Harness sessions of a run: agent steps, agent decisions, fixers (Layer C durable).

Every session goes through ``run_session``: its id (an ``agent`` step's or a decision's
path; ``<path>#fix[<n>]`` for a fixer), its capability manifest recorded in
``harness.session.started`` the first time and compared the next (any difference is a
``CapabilityDriftError``, before any call), its model and tool calls recorded by
``SessionRecorder``, its working directory under ``runs/<runId>/harness/``. The callers
commit ``harness.session.completed`` with what the session produced, together with the
step's own ``StepCompleted`` where there is one.

Roles: ``worker`` (the standard agent over the step's tools), ``orchestrator`` (also
``start_workflow`` over its pinned workflows, each a sub-run whose id is recorded before
it starts), ``planner`` (see ``_planner``), ``decider`` (a decision's agent, answering
a route) and ``fixer`` (consulted when a step fails for good).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import ValidationError

from little_workflow.artifacts import StepArtifacts
from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, InvalidValueError, StorageError, ToolArgumentsError
from little_workflow.events import HarnessSessionCompleted, HarnessSessionStarted
from little_workflow.harness._manifest import drift_error, manifest_hash
from little_workflow.ids import new_id
from little_workflow.lwir import AgentStep, DecisionStep, FixerPolicy, StepBase
from little_workflow.runtime._core import Arguments, DurableRun, Site, StepUnit
from little_workflow.runtime._host import RunHost, SubRunner
from little_workflow.runtime._sessions import SessionRecorder, session_manifest, session_slot
from little_workflow.runtime._state import RunState
from little_workflow.runtime._waits import ASK_USER
from little_workflow.runtime._workflows import WorkflowVersion
from little_workflow.storage._dirs import make_private_dirs

# The harness (agent graphs, tools, model messages, with their pydantic models) and
# ``_planner`` are imported inside the functions that run a session: ``_lwir_walk``
# imports this module, and a run without agent steps (most resumes) should not pay
# ~25 ms of imports for them. So are the model message types, the model-call limits and
# ask_user (with the harness's model clients behind them): a resume through the CLI of a
# run of ``execute`` steps imports none of the harness (``tests/test_lazy_imports.py``).
if TYPE_CHECKING:
    from pathlib import Path

    from pydantic import TypeAdapter

    from little_workflow.harness._graph import GraphStep
    from little_workflow.harness._harness import ToolHook, Toolset
    from little_workflow.harness._tools import Tool
    from little_workflow.harness.models import FilePart, ImagePart, ResponseFormat

__all__ = [
    "START_WORKFLOW",
    "Fixer",
    "Render",
    "SessionRun",
    "Startable",
    "decide_with_agent",
    "fixer_decisions",
    "pinned_workflows",
    "run_agent_step",
    "run_fixer",
    "run_session",
    "scratch_dir",
]

#: The orchestrator's built-in tool.
START_WORKFLOW = "start_workflow"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_FIX_SUFFIX = re.compile(r"#fix\[[0-9]+\]\Z")

#: Renders a template of a step: ``(value, step, path, field)`` -> the value, or a step
#: failure (``template_error``). The front end's, with its scope.
Render = Callable[[JsonValue, StepBase, str, str], JsonValue]


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionRun:
    """What a session of a run needs: the core, the resources, the version, the sub-runner."""

    run: DurableRun
    host: RunHost
    version: WorkflowVersion
    sub_runner: SubRunner


class Fixer:
    """A step's fixer as the core's ``on_give_up`` handler (``GiveUpHandler``)."""

    def __init__(self, session: SessionRun, step: StepBase, spec: FixerPolicy) -> None:
        self.session = session
        self.step = step
        self.spec = spec

    def corrected(self, state: RunState, site: Site, arguments: Arguments) -> Arguments:
        """The last recorded decision's corrected arguments, if it asked for a retry."""
        fixes = fixer_decisions(state, site.text)
        if fixes and fixes[-1].get("action") == "retry":
            corrected = fixes[-1].get("with")
            return dict(corrected) if isinstance(corrected, dict) else arguments
        return arguments

    def may_consult(self, state: RunState, site: Site) -> bool:
        """Whether the fixer has consultations left (``maxFixes``)."""
        return len(fixer_decisions(state, site.text)) < self.spec.max_fixes

    async def consult(
        self, site: Site, arguments: Arguments, error_code: str, message: str
    ) -> bool:
        """Run the fixer session; whether it asked for one more attempt."""
        decision = await run_fixer(
            self.session,
            self.step,
            site,
            arguments=arguments,
            error_code=error_code,
            message=message,
        )
        return decision.get("action") == "retry"


def scratch_dir(host: RunHost, run_id: str, session_id: str) -> Path:
    """``runs/<runId>/harness/<session>``: the session's working directory, created 0700.

    Made here, when the session starts, and not when the run starts: most runs have no
    harness session, and a directory per run (two, with ``harness/``) is most of a data
    directory's size at many runs. Each missing level is made 0700 (``make_private_dirs``).
    """
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:8]
    name = f"{_UNSAFE.sub('_', session_id)[:80]}-{digest}"
    folder = host.data_dir.harness_dir(run_id) / name
    try:
        make_private_dirs(folder)
    except OSError as exc:
        raise StorageError(f"cannot create the scratch directory {str(folder)!r}: {exc}") from exc
    return folder


async def run_session(
    session: SessionRun,
    *,
    session_id: str,
    step: StepBase,
    role: str,
    prompt: JsonValue,
    instructions: str | None,
    graph: GraphStep,
    toolset: Toolset | None = None,
    attachments: Sequence[ImagePart | FilePart] = (),
) -> JsonValue:
    """Run (or resume) one harness session of the run; its final answer.

    The manifest is the one ``session_manifest`` computes for ``step`` and ``role``, so
    the drift check at resume and this one agree.
    """
    from little_workflow.harness._harness import AgentHarness
    from little_workflow.runtime._model_limits import limited_slots

    runtime = session.host
    execution = session.run
    manifest = session_manifest(runtime, session.version, step, role)
    if manifest is None:
        raise ConfigError(f"step {step.id!r} has no {role} session")
    digest = manifest_hash(manifest)
    recorded = execution.state.sessions.get(session_id)
    if recorded is not None and recorded.manifest_hash not in (None, digest):
        error = drift_error(run_id=execution.run_id, role=role, old=recorded.manifest, new=manifest)
        if error is not None:
            raise error
    if recorded is None or recorded.manifest_hash is None:
        started = HarnessSessionStarted(
            session_id=session_id,
            role=role,
            step_path=execution_path(session_id),
            manifest=manifest,
            manifest_hash=digest,
            slot=_slot_name(step, role),
        )
        await execution.append([started], sync=False)
    harness = AgentHarness(
        name=f"{execution.run_id}/{session_id}",
        agent_graph=graph,
        model_slots=limited_slots(runtime.model_slots, runtime.permits),
        tools=toolset if toolset is not None else runtime.toolset,
    )
    # What the session's tools redact is scrubbed from every event of the run: the
    # session's final answer, or a later step's output, may repeat it.
    harness.secret_sink = execution.writer.secrets
    ctx = harness.create_context(
        id=f"{execution.run_id}/{session_id}",
        instructions=instructions,
        cwd=str(scratch_dir(runtime, execution.run_id, session_id)),
    )
    ctx.artifacts = StepArtifacts(runtime.artifacts, execution.run_id, session_id)
    ctx.memory = runtime.memory.bound(execution.run_id, session_id)
    recorder = SessionRecorder(execution.writer, execution.state, session_id)
    return await harness.execute(ctx, prompt, recorder=recorder, attachments=attachments)


@functools.cache
def _media() -> TypeAdapter[ImagePart | FilePart]:
    # Built on first use: the part models' schemas are deferred (see ``little_workflow.events``).
    from pydantic import Field, TypeAdapter

    from little_workflow.harness.models import FilePart, ImagePart

    return TypeAdapter(Annotated[ImagePart | FilePart, Field(discriminator="type")])


def attachment_part(value: object, where: str) -> ImagePart | FilePart:
    """The image or file part an agent step's rendered attachment stands for."""
    from little_workflow.harness.models import FilePart, ImagePart

    if isinstance(value, ImagePart | FilePart):
        return value
    try:
        part = _media().validate_python(value)
        if part.data is not None:
            part.decoded()  # base64 a provider would refuse is refused here, named
    except (ValidationError, ValueError) as exc:
        why = (
            "; ".join(str(error["msg"]) for error in exc.errors())
            if isinstance(exc, ValidationError)
            else f"data is not base64 ({exc})"
        )
        raise InvalidValueError(
            f'{where}: an attachment is an image or file part, {{"type": "image" | '
            f'"file", "mediaType": ..., "data": <base64> or "url": ...}}: {why}'
        ) from exc
    return part


def _slot_name(step: StepBase, role: str) -> str | None:
    uses = session_slot(step, role)
    return None if uses is None else uses[0]


def execution_path(session_id: str) -> str:
    """The step path a session belongs to (a fixer's id adds ``#fix[<n>]`` to it).

    Only that suffix is cut: a branch key may hold ``#`` too (``m["a#b"].fix``).
    """
    return _FIX_SUFFIX.sub("", session_id)


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class Startable:
    """A workflow an orchestrator may start: its description for the model, and how to
    run it as a sub-run (``start(input, sub_run_id)`` -> its output)."""

    description: str
    start: Callable[[dict[str, JsonValue] | None, str], Awaitable[JsonValue]]


def pinned_workflows(session: SessionRun, step: AgentStep, path: str) -> dict[str, Startable]:
    """An LWIR orchestrator's startable workflows: the step's pinned ``workflows``."""
    available: dict[str, WorkflowVersion] = {}
    for reference in step.workflows:
        child = session.version.child(reference)
        if available.setdefault(child.name, child) is not child:
            raise ConfigError(
                f"orchestrator {path!r}: two of its workflows are named {child.name!r}"
            )

    def starter(version: WorkflowVersion) -> Startable:
        async def start(workflow_input: dict[str, JsonValue] | None, sub_run_id: str) -> JsonValue:
            return await session.sub_runner.run_child(
                version,
                workflow_input,
                run_id=sub_run_id,
                parent_run_id=session.run.run_id,
                parent_step_path=path,
                retry_failed=session.run.retrying,
            )

        return Startable(version.workflow.description or "(no description)", start)

    return {name: starter(version) for name, version in available.items()}


def _orchestrator_hook(
    session: SessionRun, available: Mapping[str, Startable]
) -> tuple[Tool[..., Any], ToolHook]:
    """``start_workflow`` over the ``available`` workflows, and its hook."""
    from little_workflow.harness._harness import ToolHook
    from little_workflow.harness._tools import tool

    listing = "\n".join(
        f"- {name}: {startable.description}" for name, startable in sorted(available.items())
    )

    async def start_workflow(workflow: str, input: dict[str, Any] | None = None) -> JsonValue:
        """Start a workflow as a sub-run and wait for its output.

        Args:
            workflow: The name of the workflow to start.
            input: The workflow's input.
        """
        raise AssertionError("start_workflow runs through its hook")  # pragma: no cover

    start = tool(
        start_workflow,
        description="Start one of these workflows as a sub-run and wait for its output:\n"
        + listing,
    )

    def prepare(detail: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
        arguments = detail.get("arguments")
        recorded: dict[str, JsonValue] = dict(arguments) if isinstance(arguments, dict) else {}
        recorded["subRunId"] = new_id("run")
        return {**detail, "arguments": recorded}

    async def run(detail: Mapping[str, JsonValue], _ctx: object) -> JsonValue:
        arguments = detail.get("arguments")
        recorded = arguments if isinstance(arguments, dict) else {}
        name, sub_run_id = recorded.get("workflow"), recorded.get("subRunId")
        if not isinstance(name, str) or name not in available:
            raise ToolArgumentsError(
                f"unknown workflow {name!r}; available: {', '.join(sorted(available)) or 'none'}"
            )
        workflow_input = recorded.get("input")
        if workflow_input is not None and not isinstance(workflow_input, dict):
            raise ToolArgumentsError("argument 'input' must be an object")
        assert isinstance(sub_run_id, str)
        return await available[name].start(workflow_input, sub_run_id)

    return start, ToolHook(prepare=prepare, run=run)


def output_format(step: AgentStep) -> ResponseFormat | None:
    """The structured output an agent step asks for, named after its schema's title.

    Not strict: OpenAI's strict mode refuses most schemas as people write them (every
    property required, no additional ones); the answer is validated here either way.
    """
    from little_workflow.harness.models import ResponseFormat

    if step.output_schema is None:
        return None
    title = step.output_schema.get("title")
    name = re.sub(r"[^A-Za-z0-9_-]", "_", title)[:64] if isinstance(title, str) and title else ""
    return ResponseFormat(name=name or "answer", schema_=step.output_schema, strict=False)


async def run_agent_step(
    session: SessionRun,
    step: AgentStep,
    unit: StepUnit,
    render: Render,
    startable: Mapping[str, Startable] | None = None,
) -> JsonValue:
    """Run (or resume) the step's session; commit its output with the step's completion.

    An orchestrator starts the ``startable`` workflows (default: the step's pinned ones).
    """
    from little_workflow.harness._agent import agent
    from little_workflow.harness._harness import Toolset
    from little_workflow.runtime._ask_user import ask_user_hook, ask_user_tool
    from little_workflow.runtime._planner import (
        parse_json_answer,
        planner_graph,
        planner_instructions,
    )

    path = unit.site.text
    prompt = render(step.prompt, step, path, "prompt")
    instructions: str | None = None
    if step.instructions is not None:
        instructions = _text(render(step.instructions, step, path, "instructions"))
    # Built-in tools (their calls run through hooks): an orchestrator's start_workflow,
    # and ask_user when the step offers it.
    built_in: dict[str, tuple[Tool[..., Any], ToolHook]] = {}
    if step.role == "orchestrator":
        if startable is None:
            startable = pinned_workflows(session, step, path)
        built_in[START_WORKFLOW] = _orchestrator_hook(session, startable)
    if step.ask_user:
        built_in[ASK_USER] = (ask_user_tool(), ask_user_hook(session.run, unit, step))
    tools = (*step.tools, *built_in)
    toolset: Toolset | None = None
    if built_in:
        toolset = Toolset(
            [
                *(found for found in session.host.toolset.registry if found.name not in built_in),
                *(pair[0] for pair in built_in.values()),
            ],
            hooks={name: pair[1] for name, pair in built_in.items()},
        )
    graph: GraphStep = agent(
        slot=step.slot,
        tools=tools,
        max_turns=step.max_turns,
        output=output_format(step),
        output_tries=step.output_tries,
    )
    if step.role == "planner":
        instructions = planner_instructions(session.host, instructions)
        graph = planner_graph(step.slot, tools, step.max_turns)

    async def call(_attempt: int, _arguments: object) -> JsonValue:
        # Checked inside the step, so a malformed one fails it (recorded), like its calls.
        attachments = tuple(
            attachment_part(
                render(item, step, path, f"attachments[{i}]"), f"{path}.attachments[{i}]"
            )
            for i, item in enumerate(step.attachments)
        )
        answer = await run_session(
            session,
            session_id=path,
            step=step,
            role=step.role,
            prompt=prompt,
            instructions=instructions,
            graph=graph,
            toolset=toolset,
            attachments=attachments,
        )
        if step.output == "json" and step.role != "planner" and step.output_schema is None:
            return parse_json_answer(answer, f"agent {path!r}")
        return answer

    run = session.run
    result, _ = await run.attempts(unit, call)
    await run.append(
        [
            HarnessSessionCompleted(session_id=path, output=result),
            run.completed(unit, result),
        ],
        sync=True,
    )
    return result


DECIDER_PREAMBLE = """\
You decide which way a workflow goes on. Answer with exactly one of these route names:
{routes}
or with {{"route": "<route name>", "output": <anything worth passing on>}}."""


async def decide_with_agent(
    session: SessionRun, step: DecisionStep, site: Site, render: Render
) -> JsonValue:
    """One attempt of an agent decision: its answer (a route name, or route + output).

    The caller records ``harness.session.completed`` with the step's completion.
    """
    from little_workflow.harness._agent import agent
    from little_workflow.runtime._planner import parse_json_answer

    decider = step.agent
    assert decider is not None
    path = site.text
    prompt = render(decider.prompt, step, path, "agent.prompt")
    routes = "\n".join(f"- {name}" for name in step.routes)
    instructions = DECIDER_PREAMBLE.format(routes=routes)
    if decider.instructions is not None:
        own = render(decider.instructions, step, path, "agent.instructions")
        instructions = f"{_text(own)}\n\n{instructions}"
    answer = await run_session(
        session,
        session_id=path,
        step=step,
        role="decider",
        prompt=prompt,
        instructions=instructions,
        graph=agent(slot=decider.slot, tools=decider.tools, max_turns=decider.max_turns),
    )
    text = answer.strip() if isinstance(answer, str) else answer
    if isinstance(text, str) and text in step.routes:
        return text
    try:
        return parse_json_answer(text, f"decision {path!r}")
    except InvalidValueError:
        return text


FIXER_PREAMBLE = """\
You are a fixer. A workflow step failed for good: its retries are used up. You see the
step, the arguments it was called with and the error. If corrected arguments would make
it succeed, answer {"action": "retry", "with": {<the corrected arguments>}}; otherwise
answer {"action": "give_up", "reason": "<why>"}. Answer with that JSON object only."""


def fixer_decisions(state: RunState, step_path: str) -> list[dict[str, JsonValue]]:
    """The decisions of the fixer sessions of ``step_path`` that completed, in order."""
    return [
        session.output
        for session in state.sessions.values()
        if session.role == "fixer"
        and session.step_path == step_path
        and session.completed
        and isinstance(session.output, dict)
    ]


def _decision(answer: Any) -> dict[str, JsonValue]:
    from little_workflow.runtime._planner import parse_json_answer

    try:
        value = parse_json_answer(answer, "the fixer")
    except InvalidValueError as exc:
        return {"action": "give_up", "reason": f"the fixer's answer was not a decision: {exc}"}
    if isinstance(value, dict) and value.get("action") == "retry":
        corrected = value.get("with")
        if isinstance(corrected, dict):
            return {"action": "retry", "with": corrected}
    if isinstance(value, dict) and value.get("action") == "give_up":
        reason = value.get("reason")
        return {"action": "give_up", "reason": reason if isinstance(reason, str) else ""}
    return {"action": "give_up", "reason": f"the fixer's answer was not a decision: {value!r}"}


async def run_fixer(
    session: SessionRun,
    step: StepBase,
    site: Site,
    *,
    arguments: Mapping[str, JsonValue] | None,
    error_code: str,
    message: str,
) -> dict[str, JsonValue]:
    """Consult the step's fixer (a durable session); its decision, recorded.

    The session id is ``<step path>#fix[<n>]``, ``n`` counting the step's completed
    fixes, so each consultation is its own session and a resume finds the one in flight.
    """
    from little_workflow.harness._agent import agent

    fixer = getattr(step, "fixer", None)
    assert fixer is not None
    path = site.text
    session_id = f"{path}#fix[{len(fixer_decisions(session.run.state, path))}]"
    instructions = FIXER_PREAMBLE + (f"\n\n{fixer.instructions}" if fixer.instructions else "")
    prompt: JsonValue = {
        # The step as its document writes it: ``kind`` is a default, so dumped explicitly.
        "step": {
            "kind": step.kind,
            **step.model_dump(mode="json", by_alias=True, exclude_defaults=True),
        },
        "arguments": dict(arguments) if arguments is not None else None,
        "error": {"code": error_code, "message": message},
    }
    answer = await run_session(
        session,
        session_id=session_id,
        step=step,
        role="fixer",
        prompt=prompt,
        instructions=instructions,
        graph=agent(slot=fixer.slot, tools=(), max_turns=1),
    )
    decision = _decision(answer)
    await session.run.append(
        [HarnessSessionCompleted(session_id=session_id, output=decision)], sync=True
    )
    return decision
