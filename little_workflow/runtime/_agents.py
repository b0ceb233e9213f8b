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
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_workflow.codec import JsonValue
from little_workflow.errors import (
    ConfigError,
    InvalidValueError,
    LwirError,
    PlannerError,
    StorageError,
    ToolArgumentsError,
)
from little_workflow.events import HarnessSessionCompleted, HarnessSessionStarted
from little_workflow.harness._agent import agent
from little_workflow.harness._context import Context, Item, run_append_pipeline
from little_workflow.harness._graph import (
    GraphStep,
    call_model,
    loop,
    run_code,
    run_tool_calls,
    sequence,
)
from little_workflow.harness._harness import AgentHarness, ToolHook, Toolset
from little_workflow.harness._manifest import drift_error, manifest_hash
from little_workflow.harness._tools import tool
from little_workflow.harness.models import Message
from little_workflow.ids import new_id
from little_workflow.lwir import AgentStep, canonical_definition, parse_workflow
from little_workflow.runtime._sessions import SessionRecorder, agent_manifest
from little_workflow.runtime._workflows import WorkflowVersion

if TYPE_CHECKING:
    from pathlib import Path

    from little_workflow.runtime._execution import RunExecution, Scope, _Site
    from little_workflow.runtime._runtime import Runtime

__all__ = ["START_WORKFLOW", "run_agent_step", "scratch_dir"]

#: The orchestrator's built-in tool.
START_WORKFLOW = "start_workflow"

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


PLANNER_PREAMBLE = """\
You are a planner. You turn a goal into a workflow, written in LWIR: a JSON document
{"lwir": 1, "name": "<name>", "steps": [...]} whose steps run from the first one on.
Step kinds (every step has an "id", unique, made of letters, digits, "_" and "-"):
- {"id", "kind": "tool", "tool": "<tool name>", "with": {arguments}}: one tool call;
- {"id", "kind": "agent", "slot": "<model slot>", "prompt": "<text>", "tools": [names]}:
  a model that may call tools until it answers;
- {"id", "kind": "workflow", "workflow": "<registered workflow name>", "with": {input}};
- {"id", "kind": "map", "items": "${...a list...}", "key": "<item field>", "body": [steps]}:
  its body once per item ("${item}" is the item);
- {"id", "kind": "output", "value": <the result>}: the end; one at the top level.
Strings may refer to earlier results: "${input.<field>}", "${steps.<id>.output}".
Answer with the workflow as one JSON object and nothing else."""


def _answer_json(ctx: Context) -> tuple[Any, str | None]:
    """The last answer parsed as JSON: ``(value, None)``, or ``(None, problem)``."""
    last = ctx.items.last_assistant()
    if last is None or not last.content:
        return None, "the answer was empty"
    try:
        return _parse_json_answer(last.content, "planner"), None
    except InvalidValueError as exc:
        return None, exc.message


def _check_plan(ctx: Context, _input: object) -> JsonValue:
    """After each planner turn: accept a valid workflow, or tell the model what is wrong."""
    last = ctx.items.last_assistant()
    if last is None or last.tool_calls:
        return {"valid": False}
    document, problem = _answer_json(ctx)
    if problem is None:
        try:
            workflow = parse_workflow(document, source="your workflow")
        except LwirError as exc:
            problem = exc.message
        else:
            return {"valid": True, "plan": canonical_definition(workflow)}
    feedback = (
        f"That is not a valid workflow: {problem}\n"
        "Answer again with the corrected workflow as one JSON object."
    )
    run_append_pipeline(ctx, [Item(message=Message(role="user", content=feedback))])
    return {"valid": False, "problem": problem}


def _plan_accepted(_ctx: Context, output: Any) -> bool:
    return isinstance(output, dict) and output.get("valid") is True


def _final_plan(ctx: Context, _input: object) -> JsonValue:
    """The planner's output: its last answer, which ``_check_plan`` accepted, as LWIR."""
    document, problem = _answer_json(ctx)
    if problem is None:
        try:
            return canonical_definition(parse_workflow(document, source="the plan"))
        except LwirError as exc:
            problem = exc.message
    raise PlannerError(f"the planner gave no valid workflow in its turns: {problem}")


def _planner_graph(step: AgentStep) -> GraphStep:
    return sequence(
        [
            loop(
                [
                    call_model(step.slot, tools=step.tools),
                    run_tool_calls(),
                    run_code(_check_plan, id="check"),
                ],
                until=_plan_accepted,
                max_iterations=step.max_turns,
                id="turns",
            ),
            run_code(_final_plan, id="plan"),
        ],
        id="planner",
    )


def _planner_instructions(runtime: Runtime, instructions: str | None) -> str:
    parts = [PLANNER_PREAMBLE]
    tools = list(runtime.toolset.registry)
    if tools:
        parts.append("Tools:\n" + "\n".join(f"- {each.name}: {each.description}" for each in tools))
    workflows = runtime.registered_workflows()
    if workflows:
        parts.append(
            "Registered workflows:\n"
            + "\n".join(
                f"- {each.name}: {each.description or '(no description)'}" for each in workflows
            )
        )
    if runtime.model_slots:
        parts.append("Model slots: " + ", ".join(sorted(runtime.model_slots)))
    if instructions:
        parts.append(instructions)
    return "\n\n".join(parts)


def _orchestrator_toolset(execution: RunExecution, step: AgentStep, path: str) -> Toolset:
    """The runtime's tools plus ``start_workflow`` over the step's pinned workflows."""
    available: dict[str, WorkflowVersion] = {}
    for reference in step.workflows:
        child = execution.version.child(reference)
        if available.setdefault(child.name, child) is not child:
            raise ConfigError(
                f"orchestrator {path!r}: two of its workflows are named {child.name!r}"
            )
    listing = "\n".join(
        f"- {name}: {version.workflow.description or '(no description)'}"
        for name, version in sorted(available.items())
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
        return await execution.runtime.run_child(
            available[name],
            workflow_input,
            run_id=sub_run_id,
            parent_run_id=execution.run_id,
            parent_step_path=path,
            retry_failed=execution.retrying,
        )

    return Toolset(
        [*execution.runtime.toolset.registry, start],
        hooks={START_WORKFLOW: ToolHook(prepare=prepare, run=run)},
    )


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
    manifest = agent_manifest(runtime, step, runtime.available_workflows(execution.version, step))
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
    toolset, tool_names = runtime.toolset, step.tools
    graph: GraphStep = agent(slot=step.slot, tools=tool_names, max_turns=step.max_turns)
    if step.role == "orchestrator":
        toolset = _orchestrator_toolset(execution, step, path)
        graph = agent(slot=step.slot, tools=(*step.tools, START_WORKFLOW), max_turns=step.max_turns)
    elif step.role == "planner":
        instructions = _planner_instructions(runtime, instructions)
        graph = _planner_graph(step)
    harness = AgentHarness(
        name=f"{execution.run_id}/{path}",
        agent_graph=graph,
        model_slots=runtime.model_slots,
        tools=toolset,
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
        if step.output == "json" and step.role != "planner":
            return _parse_json_answer(answer, path)
        return answer

    result, _ = await execution._attempts(step, site, call)
    await execution.append(
        [
            HarnessSessionCompleted(session_id=path, output=result),
            execution._completed(step, site, result),
        ],
        sync=True,
    )
    return result
