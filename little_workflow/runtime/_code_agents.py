"""The LWIR steps ``ctx.agent`` and ``ctx.decide`` stand for, built from their Python
arguments, and a structured answer turned into the pydantic model asked for.

Built once, here, so a code-first agent is the same ``AgentStep`` an LWIR file declares:
one session runner, one identity, one record, whichever front end started it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, InvalidValueError
from little_workflow.harness.models import FilePart, ImagePart
from little_workflow.lwir import AgentStep, DecisionAgent, DecisionStep, RetryPolicy
from little_workflow.runtime._code_api import WorkflowSpec, workflow_spec
from little_workflow.runtime._code_waits import seconds_of

__all__ = [
    "AgentOutput",
    "agent_step",
    "as_instance",
    "child_workflows",
    "decision_step",
    "tool_names",
]

M = TypeVar("M", bound=BaseModel)

AgentOutput = Literal["text", "json"] | Mapping[str, Any] | type[BaseModel]


def tool_names(tools: Sequence[str | Callable[..., Any]]) -> tuple[str, ...]:
    """Registered tools by name, or as the callables registered (their ``name``)."""
    return tuple(
        tool if isinstance(tool, str) else str(getattr(tool, "name", None) or tool.__name__)
        for tool in tools
    )


def child_workflows(
    slot: str, workflows: Sequence[Callable[..., Coroutine[Any, Any, Any]]]
) -> list[tuple[WorkflowSpec, Any]]:
    """An orchestrator's ``@workflow`` functions with their specs, names unique."""
    children: list[tuple[WorkflowSpec, Any]] = []
    for body in workflows:
        child = workflow_spec(body)
        if child is None:
            named = getattr(body, "__qualname__", body)
            raise ConfigError(f"ctx.agent({slot!r}) workflows: {named!r} is not a @workflow")
        if any(known.name == child.name for known, _ in children):
            raise ConfigError(f"ctx.agent({slot!r}): two of its workflows are named {child.name!r}")
        children.append((child, body))
    return children


def _output(slot: str, output: AgentOutput) -> tuple[type[BaseModel] | None, dict[str, Any] | None]:
    """The pydantic model (if one was given) and the JSON Schema a structured answer obeys."""
    if isinstance(output, type) and issubclass(output, BaseModel):
        return output, output.model_json_schema()
    if isinstance(output, Mapping):
        return None, dict(output)
    if output not in ("text", "json"):
        raise InvalidValueError(
            f"ctx.agent({slot!r}) output: 'text', 'json', a JSON Schema (a dict) or a "
            f"pydantic model class, not {output!r}"
        )
    return None, None


def _attachment(slot: str, part: object) -> JsonValue:
    if not isinstance(part, ImagePart | FilePart):
        raise InvalidValueError(
            f"ctx.agent({slot!r}) attachments: ImagePart or FilePart objects, not "
            f"{type(part).__name__}"
        )
    value: JsonValue = part.model_dump(mode="json", by_alias=True, exclude_none=True)
    return value


def agent_step(
    step_name: str,
    slot: str,
    *,
    prompt: str,
    attachments: Sequence[ImagePart | FilePart] = (),
    tools: Sequence[str | Callable[..., Any]],
    instructions: str | None,
    output: AgentOutput,
    output_tries: int,
    max_turns: int,
    retry: RetryPolicy | None,
    orchestrator: bool,
    ask_user: bool,
    ask_user_timeout: timedelta | float | None,
) -> tuple[AgentStep, type[BaseModel] | None]:
    """The ``AgentStep`` a ``ctx.agent`` call stands for, and the model its answer becomes."""
    wait = seconds_of(ask_user_timeout, f"ctx.agent({slot!r}) ask_user_timeout")
    model, schema = _output(slot, output)
    try:
        step = AgentStep(
            id=step_name,
            slot=slot,
            prompt=prompt,
            attachments=tuple(_attachment(slot, part) for part in attachments),
            tools=tool_names(tools),
            instructions=instructions,
            output="json" if schema is not None else output,
            output_schema=schema,
            output_tries=output_tries,
            max_turns=max_turns,
            retry=retry or RetryPolicy(),
            role="orchestrator" if orchestrator else "worker",
            ask_user=ask_user,
            ask_user_timeout=None if wait is None else f"{wait:.3f}s",
        )
    except ValidationError as exc:
        raise InvalidValueError(f"ctx.agent({slot!r}): {exc}") from exc
    return step, model


def decision_step(
    step_name: str,
    slot: str,
    *,
    prompt: str,
    routes: Sequence[str],
    instructions: str | None,
    tools: Sequence[str | Callable[..., Any]],
    max_turns: int,
    retry: RetryPolicy | None,
) -> DecisionStep:
    """The ``DecisionStep`` (with an agent) a ``ctx.decide`` call stands for."""
    try:
        return DecisionStep(
            id=step_name,
            agent=DecisionAgent(
                slot=slot,
                instructions=instructions,
                prompt=prompt,
                tools=tool_names(tools),
                max_turns=max_turns,
            ),
            routes={route: route for route in routes},
            retry=retry or RetryPolicy(),
        )
    except ValidationError as exc:
        raise InvalidValueError(f"ctx.decide({slot!r}): {exc}") from exc


async def as_instance(model: type[M], answer: Awaitable[JsonValue], path: str) -> M:
    """The agent's answer (JSON its schema accepted) as an instance of ``model``."""
    value = await answer
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        # The JSON Schema check passed: the model has a validator the schema cannot say.
        raise InvalidValueError(
            f"the answer of agent {path!r} is not a {model.__name__}: {exc}"
        ) from exc
