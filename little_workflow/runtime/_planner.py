"""The planner role: a session whose answer is an LWIR workflow, validated turn by turn.

The planner's graph is the standard loop (model, then the tool calls it asked for) plus a
check after each turn: an answer that is not a valid workflow is sent back to the model
with the validation errors, until it is valid or the turns run out. The check runs
again on resume exactly as it ran the first time, since it reads only model answers,
which are replayed; only model and tool calls are recorded.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidValueError, LwirError, PlannerError
from little_workflow.harness._agent import parse_json_answer
from little_workflow.harness._context import Context, Item, run_append_pipeline
from little_workflow.harness._graph import (
    GraphStep,
    call_model,
    loop,
    run_code,
    run_tool_calls,
    sequence,
)
from little_workflow.harness.models import Message
from little_workflow.lwir import (
    AgentStep,
    OutputStep,
    SubWorkflowStep,
    Workflow,
    canonical_definition,
    parse_workflow,
)

if TYPE_CHECKING:
    from little_workflow.runtime._host import RunHost

__all__ = [
    "PLANNER_PREAMBLE",
    "goal_workflow",
    "parse_json_answer",
    "plan_workflow",
    "planner_graph",
    "planner_instructions",
]


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
    if last is None or not last.text:
        return None, "the answer was empty"
    try:
        return parse_json_answer(last.text, "the planner"), None
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


def planner_graph(slot: str, tools: tuple[str, ...], max_turns: int) -> GraphStep:
    """Model and tools, then the check; until a valid workflow or ``max_turns``."""
    return sequence(
        [
            loop(
                [
                    call_model(slot, tools=tools),
                    run_tool_calls(),
                    run_code(_check_plan, id="check"),
                ],
                until=_plan_accepted,
                max_iterations=max_turns,
                id="turns",
            ),
            run_code(_final_plan, id="plan"),
        ],
        id="planner",
    )


def planner_instructions(runtime: RunHost, instructions: str | None) -> str:
    """The preamble, the tools, registered workflows and slots it may use, then its own."""
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


_GOAL_PROMPT = "Goal: ${input.goal}\nThe workflow's input: ${input.data}"


def goal_workflow(
    planner_slot: str, data: dict[str, object], *, max_turns: int, instructions: str | None
) -> Workflow:
    """``Runtime.run_goal``'s workflow: a planner session, then a sub-run of its plan."""
    return Workflow(
        name="goal",
        description="A planned workflow, run.",
        steps=(
            AgentStep(
                id="plan",
                role="planner",
                slot=planner_slot,
                instructions=instructions,
                prompt=_GOAL_PROMPT,
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


def plan_workflow(planner_slot: str, *, max_turns: int) -> Workflow:
    """``Runtime.plan``'s workflow: a planner session whose answer is the output."""
    return Workflow(
        name="plan",
        steps=(
            AgentStep(
                id="plan",
                role="planner",
                slot=planner_slot,
                prompt=_GOAL_PROMPT,
                max_turns=max_turns,
            ),
            OutputStep(id="out", value="${steps.plan.output}"),
        ),
    )
