"""The provider-neutral conversation model: messages, tool calls, requests, responses.

Every model provider (OpenAI-compatible, Anthropic, scripted) translates between its wire
format and these models, so the harness, the event log and the replay of a recorded call
never depend on a provider. They are frozen pydantic models that dump to plain JSON in
camelCase, which is how they appear in ``harness.model.called`` / ``responded`` events.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "Message",
    "ModelRequest",
    "ModelResponse",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

Role = Literal["system", "user", "assistant", "tool"]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        allow_inf_nan=False,
        # Schemas are built on first use, not at import: see ``little_workflow.events``.
        defer_build=True,
    )


class ToolCall(_Model):
    """A tool call the model asked for: its provider-given id, the tool, the arguments."""

    id: str
    name: str
    arguments: dict[str, JsonValue] = Field(default_factory=dict)


class Message(_Model):
    """One message of a conversation.

    * ``system``: instructions (``content``).
    * ``user``: the person's or the caller's text (``content``).
    * ``assistant``: the model's text (``content``, may be ``None``) and ``tool_calls``.
    * ``tool``: the result of one tool call (``tool_call_id``, ``name``, ``content``);
      ``is_error`` when the tool raised and ``content`` is the error.
    """

    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False


def _empty_object_schema() -> dict[str, JsonValue]:
    return {"type": "object", "properties": {}}


class ToolSpec(_Model):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=_empty_object_schema)


class ModelRequest(_Model):
    """One call to a model: the provider's model name, the conversation, the tools."""

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None


class Usage(_Model):
    """Tokens a call consumed, as the provider reported them."""

    input_tokens: int = 0
    output_tokens: int = 0


class ModelResponse(_Model):
    """What the model answered: one assistant message, and why it stopped.

    ``id`` is the provider's response id; the item log deduplicates by it, so a turn
    re-issued after a crash that yields the identical response is not recorded twice.
    """

    id: str
    model: str
    message: Message
    #: ``stop`` (answered), ``tool_calls`` (asked for tools), ``length`` (cut off), ...
    finish_reason: str = "stop"
    usage: Usage = Field(default_factory=Usage)
