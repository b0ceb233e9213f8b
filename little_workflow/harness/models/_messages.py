"""The provider-neutral conversation model: messages, content parts, requests, responses.

Every model provider (OpenAI-compatible, Anthropic, scripted, the SDK adapters)
translates between its wire format and these models, so the harness, the event log and
the replay of a recorded call never depend on a provider. They are frozen pydantic
models that dump to plain JSON in camelCase, which is how they appear in
``harness.model.called`` / ``responded`` events.

A message's ``content`` is either a string (plain text: the common case, and the only
form logs written before content parts hold) or a tuple of **content parts** in order:
``TextPart``, ``ImagePart``, ``FilePart`` and ``ReasoningPart``. Tool calls stay in
``Message.tool_calls`` and tool results in ``tool`` messages, as before. ``Message.text``
is the text of either form, for code that only reads text.

A ``ReasoningPart`` is what a provider requires to be sent back on the next turn
(Anthropic's signed ``thinking`` and ``redacted_thinking`` blocks, OpenAI's reasoning
items with their encrypted content); it is recorded with the answer and replayed as it
was, and a provider sends back only the parts that ``provider`` names as its own.

Streaming (``ModelDelta``) is a view of an answer as it arrives; only the completed
``ModelResponse`` is ever recorded.
"""

from __future__ import annotations

import base64
from typing import Annotated, Any, Literal, Self, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "ContentPart",
    "FilePart",
    "ImagePart",
    "Message",
    "ModelDelta",
    "ModelOptions",
    "ModelRequest",
    "ModelResponse",
    "ReasoningPart",
    "ResponseFormat",
    "Role",
    "TextPart",
    "ToolCall",
    "ToolChoice",
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


def _drop_defaults(
    model: BaseModel, data: dict[str, Any], defaults: dict[str, object]
) -> dict[str, Any]:
    """``data`` without the fields of ``defaults`` that ``model`` leaves at their default.

    The fields added after the first stored logs are left out of a dump when unset, so a
    request or a usage recorded today has the bytes it had before them (smaller events,
    the same digests where a dump is hashed, as the scripted provider's response ids are).
    """
    for name, default in defaults.items():
        if getattr(model, name) == default:
            data.pop(name, None)
            data.pop(to_camel(name), None)
    return data


class TextPart(_Model):
    """Text, as one part of a message's content."""

    type: Literal["text"] = "text"
    text: str


class _Media(_Model):
    """Bytes (base64, in ``data``) or a URL the provider fetches, never both."""

    media_type: str
    #: The bytes, base64-encoded (standard alphabet, padded). Large ones are stored once
    #: in the run's blob store, content-addressed, like any large payload.
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.data is None) == (self.url is None):
            raise ValueError(f"{self.__class__.__name__} takes either data or url, not both")
        return self

    def decoded(self) -> bytes:
        """The decoded ``data``; ``ValueError`` for a part that only has a URL."""
        if self.data is None:
            raise ValueError(f"this {self.__class__.__name__} has a url, not data")
        return base64.b64decode(self.data, validate=True)


class ImagePart(_Media):
    """An image: ``ImagePart.of(png_bytes, "image/png")`` or ``ImagePart(url=..., ...)``."""

    type: Literal["image"] = "image"

    @classmethod
    def of(cls, data: bytes, media_type: str) -> ImagePart:
        """An image part holding ``data``."""
        return cls(media_type=media_type, data=base64.b64encode(data).decode("ascii"))


class FilePart(_Media):
    """A file (a PDF, a text file) sent to the model, with its name when it has one."""

    type: Literal["file"] = "file"
    filename: str | None = None

    @classmethod
    def of(cls, data: bytes, media_type: str, filename: str | None = None) -> FilePart:
        """A file part holding ``data``."""
        return cls(
            media_type=media_type,
            data=base64.b64encode(data).decode("ascii"),
            filename=filename,
        )


class ReasoningPart(_Model):
    """A reasoning (thinking) block of an assistant answer, kept to be sent back.

    ``provider`` is the wire format that produced it (``anthropic``, ``openai``): a
    provider sends back only its own, since another would refuse a foreign signature.
    ``signature`` is Anthropic's thinking signature; ``data`` holds what is opaque to us
    (Anthropic's ``redacted_thinking`` data, OpenAI's ``encrypted_content``); ``id`` is
    the provider's item id where it has one.
    """

    type: Literal["reasoning"] = "reasoning"
    provider: str
    text: str = ""
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    #: True for Anthropic's ``redacted_thinking`` (``data`` holds it, ``text`` is empty).
    redacted: bool = False


ContentPart: TypeAlias = Annotated[
    TextPart | ImagePart | FilePart | ReasoningPart, Field(discriminator="type")
]


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

    ``content`` is a string, or content parts in order (see the module docstring).
    """

    role: Role
    content: str | tuple[ContentPart, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False

    @property
    def text(self) -> str | None:
        """The message's text: ``content`` itself, or its text parts joined; ``None`` if none."""
        if self.content is None or isinstance(self.content, str):
            return self.content
        texts = [part.text for part in self.content if isinstance(part, TextPart)]
        return "".join(texts) if texts else None

    @property
    def parts(self) -> tuple[TextPart | ImagePart | FilePart | ReasoningPart, ...]:
        """``content`` as parts: a string is one ``TextPart``, ``None`` none."""
        if self.content is None:
            return ()
        if isinstance(self.content, str):
            return (TextPart(text=self.content),)
        return self.content


def _empty_object_schema() -> dict[str, JsonValue]:
    return {"type": "object", "properties": {}}


class ToolSpec(_Model):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, JsonValue] = Field(default_factory=_empty_object_schema)


#: ``auto`` (the model decides), ``none`` (no tool), ``required`` (some tool), or the
#: name of the one tool the model must call.
ToolChoice: TypeAlias = str


class ResponseFormat(_Model):
    """The answer must be JSON matching ``schema`` (structured output).

    A provider uses its native mode where it has one (OpenAI's ``response_format``
    ``json_schema``; Anthropic's forced tool); the harness validates the answer either way.
    """

    name: str = "answer"
    schema_: dict[str, JsonValue] = Field(alias="schema")
    #: OpenAI's ``strict``: the server constrains decoding to the schema.
    strict: bool = True


class ModelOptions(_Model):
    """Request options a slot or a model step sets, beyond temperature and max tokens.

    ``ModelSlot(options=...)`` gives a slot's defaults; a step's own options replace them
    field by field (``over``). ``None`` (or an empty ``stop``/``extra``) leaves a field to
    the provider's default, and out of the wire request.
    """

    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    def over(self, base: ModelOptions) -> ModelOptions:
        """These options over ``base``: each field set here wins; ``extra`` is merged."""
        fields: dict[str, Any] = {
            name: getattr(self, name) if name in self.model_fields_set else getattr(base, name)
            for name in type(self).model_fields
            if name != "extra"
        }
        return ModelOptions(**fields, extra={**base.extra, **self.extra})

    def identity(self) -> dict[str, JsonValue]:
        """The options that are set, as JSON (what a step's identity or a manifest holds)."""
        data: dict[str, JsonValue] = self.model_dump(mode="json", by_alias=True)
        return _drop_defaults(self, data, _OPTION_DEFAULTS)


class ModelRequest(_Model):
    """One call to a model: the provider's model name, the conversation, the tools, options.

    Every option is part of the call's identity (its step's identity, or the slot's in the
    capability manifest), so a changed option is drift, never a silent replay. ``extra``
    is merged into the provider's request body as it is (provider-specific fields).
    Options left at their defaults are left out of the wire request.
    """

    model: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    extra: dict[str, JsonValue] = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_defaults(self, handler(self), _REQUEST_OPTION_DEFAULTS)


class Usage(_Model):
    """Tokens a call consumed, as the provider reported them.

    ``input_tokens`` counts every input token, cached or not (Anthropic's cache reads and
    writes included, so the figure means what OpenAI's ``prompt_tokens`` means);
    ``cached_input_tokens`` and ``cache_write_tokens`` are the parts of it read from and
    written to the provider's prompt cache; ``reasoning_tokens`` is the part of
    ``output_tokens`` spent thinking.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @model_serializer(mode="wrap")
    def _compact(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_defaults(self, handler(self), _USAGE_DETAIL_DEFAULTS)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
        )


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


_REQUEST_OPTION_DEFAULTS: dict[str, object] = {
    "top_p": None,
    "stop": (),
    "seed": None,
    "tool_choice": None,
    "parallel_tool_calls": None,
    "response_format": None,
    "extra": {},
}
_OPTION_DEFAULTS: dict[str, object] = {
    name: default for name, default in _REQUEST_OPTION_DEFAULTS.items() if name != "response_format"
}
_USAGE_DETAIL_DEFAULTS: dict[str, object] = {
    "cached_input_tokens": 0,
    "cache_write_tokens": 0,
    "reasoning_tokens": 0,
}


class ModelDelta(_Model):
    """A piece of an answer as it streams in: never recorded, only shown.

    ``kind`` ``text`` and ``reasoning`` carry ``text``; ``tool_call`` carries the call's
    ``index`` in the answer, its ``tool_call_id`` and ``name`` on its first delta, and a
    piece of its arguments' JSON text in ``text``.
    """

    kind: Literal["text", "reasoning", "tool_call"]
    text: str = ""
    index: int = 0
    tool_call_id: str | None = None
    name: str | None = None
