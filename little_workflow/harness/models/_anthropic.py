"""An Anthropic Messages API client, tool use included.

``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``. The
neutral conversation maps onto the wire like this:

* every ``system`` message goes to the top-level ``system`` (joined by blank lines, in
  order): the API has no system role inside ``messages``;
* an assistant message becomes ``text`` and ``tool_use`` blocks;
* tool results become ``tool_result`` blocks of one ``user`` message: consecutive
  results share it, and a user message right after them joins it as a ``text`` block,
  so the turns alternate as the API expects and the results come first;
* ``max_tokens`` is required by this API: ``default_max_tokens`` when the request has
  none.

Usage reports all input tokens: ``input_tokens`` plus the cache reads and writes the
API counts apart, so the figure means what OpenAI's ``prompt_tokens`` means;
``reasoning_tokens`` is ``output_tokens_details.thinking_tokens`` where the API sends it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._anthropic_stream import AnthropicStream
from little_workflow.harness.models._http import JsonPoster, Sleep, read_api_key
from little_workflow.harness.models._messages import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    ToolCall,
    Usage,
)
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._streaming import drive

if TYPE_CHECKING:
    import httpx

__all__ = ["AnthropicProvider"]

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
}


def _unsendable(text: str) -> ModelProviderError:
    # Not retryable: the same request fails the same way; the step fails and says why.
    return ModelProviderError(f"anthropic request cannot be sent: {text}", provider="anthropic")


def _source(part: ImagePart | FilePart) -> dict[str, object]:
    if part.data is None:
        return {"type": "url", "url": part.url}
    return {"type": "base64", "media_type": part.media_type, "data": part.data}


def _document(part: FilePart, where: str) -> dict[str, object]:
    block: dict[str, object] = {"type": "document"}
    if part.data is not None and part.media_type.startswith("text/"):
        # The API takes plain text documents as text, and only PDFs as base64.
        try:
            text = part.decoded().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _unsendable(f"{where}: a {part.media_type} file that is not UTF-8") from exc
        block["source"] = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        block["source"] = _source(part)
    if part.filename:
        block["title"] = part.filename
    return block


def _block(part: ContentPart, where: str) -> dict[str, object] | None:
    """A content part as a content block; ``None`` for one this API does not take back."""
    if isinstance(part, TextPart):
        # The API refuses empty text blocks.
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return {"type": "image", "source": _source(part)}
    if isinstance(part, FilePart):
        return _document(part, where)
    if part.provider != "anthropic":
        return None  # another vendor's reasoning: this API would refuse its signature
    if part.redacted:
        return {"type": "redacted_thinking", "data": part.data or ""}
    return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}


def _blocks(message: Message, where: str) -> list[dict[str, object]]:
    blocks = [_block(part, where) for part in message.parts]
    kept = [block for block in blocks if block is not None]
    thinking = ("thinking", "redacted_thinking")
    if message.role != "assistant" and any(block["type"] in thinking for block in kept):
        raise _unsendable(f"{where}: only an assistant message may hold reasoning")
    return kept


def _assistant_blocks(message: Message, where: str) -> list[dict[str, object]]:
    blocks = _blocks(message, where)
    if any(block["type"] in ("image", "document") for block in blocks):
        raise _unsendable(f"{where}: an assistant message may not hold images or files")
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _tool_result(message: Message, where: str) -> dict[str, object]:
    block: dict[str, object] = {"type": "tool_result", "tool_use_id": message.tool_call_id or ""}
    if isinstance(message.content, tuple):
        # A tool may answer with images (a screenshot): the API takes text and image blocks.
        parts = _blocks(message, where)
        if any(part["type"] not in ("text", "image") for part in parts):
            raise _unsendable(f"{where}: a tool result may hold only text and images")
        block["content"] = parts
    else:
        block["content"] = message.text or ""
    if message.is_error:
        block["is_error"] = True
    return block


def _user_content(message: Message, where: str) -> str | list[dict[str, object]]:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    return _blocks(message, where)


def _wire_messages(messages: tuple[Message, ...]) -> tuple[str | None, list[dict[str, object]]]:
    system: list[str] = []
    wire: list[dict[str, object]] = []
    # The user message currently collecting tool results, if the last one is such.
    results: list[dict[str, object]] | None = None
    for position, message in enumerate(messages):
        where = f"messages[{position}]"
        if message.role == "system":
            if any(not isinstance(part, TextPart) for part in message.parts):
                raise _unsendable(f"{where}: a system message may hold text only")
            if message.text:
                system.append(message.text)
            continue
        if message.role == "tool":
            if results is None:
                results = []
                wire.append({"role": "user", "content": results})
            results.append(_tool_result(message, where))
            continue
        if message.role == "user" and results is not None:
            content = _user_content(message, where)
            if isinstance(content, str):
                content = [{"type": "text", "text": content}] if content else []
            results.extend(content)
            results = None
            continue
        results = None
        if message.role == "assistant":
            blocks = _assistant_blocks(message, where)
            wire.append({"role": "assistant", "content": blocks or ""})
        else:
            wire.append({"role": "user", "content": _user_content(message, where)})
    return ("\n\n".join(system) if system else None), wire


def _tool_choice(request: ModelRequest) -> dict[str, object] | None:
    choice = request.tool_choice
    if choice is None and request.response_format is not None:
        # Structured output is a forced tool (see ``_wire_request``). With other tools
        # offered too, the model must call some tool: one of them to work, or this one
        # to answer.
        choice = "required" if request.tools else request.response_format.name
    parallel = request.parallel_tool_calls
    if choice is None and parallel is not False:
        return None
    kinds = {None: "auto", "auto": "auto", "none": "none", "required": "any"}
    wire: dict[str, object] = (
        {"type": kinds[choice]} if choice in kinds else {"type": "tool", "name": choice}
    )
    if parallel is False and wire["type"] != "none":
        wire["disable_parallel_tool_use"] = True
    return wire


def _wire_request(request: ModelRequest, default_max_tokens: int) -> dict[str, object]:
    system, messages = _wire_messages(request.messages)
    body: dict[str, object] = {
        "model": request.model,
        "max_tokens": request.max_tokens or default_max_tokens,
        "messages": messages,
    }
    if system is not None:
        body["system"] = system
    tools: list[dict[str, object]] = []
    for tool in request.tools:
        spec: dict[str, object] = {"name": tool.name}
        if tool.description:
            spec["description"] = tool.description
        spec["input_schema"] = tool.parameters
        tools.append(spec)
    answer = request.response_format
    if answer is not None:
        # The answer is the input of a tool call (``_response`` turns it back into text).
        if any(tool.name == answer.name for tool in request.tools):
            raise _unsendable(
                f"the response format is named {answer.name!r}, like one of the tools; "
                "rename it (ResponseFormat(name=...))"
            )
        tools.append(
            {
                "name": answer.name,
                "description": "Give your final answer by calling this tool.",
                "input_schema": answer.schema_,
            }
        )
    if tools:
        body["tools"] = tools
        choice = _tool_choice(request)
        if choice is not None:
            body["tool_choice"] = choice
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop_sequences"] = list(request.stop)
    # ``seed`` is not sent: the Messages API has no seed (it stays in the call's identity).
    # Last, so a provider-specific field (thinking, metadata, top_k) can also replace one.
    body.update(request.extra)
    return body


def _reasoning(block: Mapping[str, object], position: int) -> ReasoningPart:
    if block.get("type") == "redacted_thinking":
        data = block.get("data")
        if not isinstance(data, str):
            raise TypeError(f"content[{position}].data is not a string")
        return ReasoningPart(provider="anthropic", data=data, redacted=True)
    thinking, signature = block.get("thinking"), block.get("signature")
    if not isinstance(thinking, str) or not isinstance(signature, str | None):
        raise TypeError(f"content[{position}] is a thinking block without its text")
    return ReasoningPart(provider="anthropic", text=thinking, signature=signature)


def _read_blocks(
    content: list[object], answer: ResponseFormat | None
) -> tuple[list[ContentPart], list[ToolCall], bool]:
    """The answer's parts and tool calls, and whether it called the answer tool."""
    parts: list[ContentPart] = []
    calls: list[ToolCall] = []
    answered = False
    for position, block in enumerate(content):
        if not isinstance(block, dict):
            raise TypeError(f"content[{position}] is not a block")
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            if parts and isinstance(parts[-1], TextPart):
                parts[-1] = TextPart(text=parts[-1].text + block["text"])
            else:
                parts.append(TextPart(text=block["text"]))
        elif kind in ("thinking", "redacted_thinking"):
            parts.append(_reasoning(block, position))
        elif kind == "tool_use":
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise TypeError(f"content[{position}].input is not an object")
            if answer is not None and block.get("name") == answer.name:
                # The forced answer tool: its input is the structured answer, and any
                # text around it was the model thinking aloud.
                text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
                parts = [part for part in parts if not isinstance(part, TextPart)]
                parts.append(TextPart(text=text))
                answered = True
                continue
            calls.append(
                ToolCall(id=str(block.get("id")), name=str(block.get("name")), arguments=arguments)
            )
        # Other blocks (server tool use and its results) have no neutral form yet.
    return parts, calls, answered


def _response(data: dict[str, object], request: ModelRequest) -> ModelResponse:
    content = data.get("content")
    if not isinstance(content, list):
        raise TypeError("the answer has no content list")
    parts, calls, answered = _read_blocks(content, request.response_format)
    response_id = data.get("id")
    if not isinstance(response_id, str) or not response_id:
        raise TypeError("the answer has no id")
    stop = data.get("stop_reason")
    finish_reason = _STOP_REASONS.get(str(stop), str(stop)) if stop else "stop"
    if answered and not calls:
        finish_reason = "stop"  # the answer tool ends the turn: nothing is left to call
    elif calls and finish_reason == "stop":
        finish_reason = "tool_calls"
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    input_tokens = sum(
        int(usage.get(field) or 0)
        for field in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    model = data.get("model")
    return ModelResponse(
        id=response_id,
        model=model if isinstance(model, str) and model else request.model,
        message=Message(role="assistant", content=_content(parts), tool_calls=tuple(calls)),
        finish_reason=finish_reason,
        usage=Usage(
            input_tokens=input_tokens,
            output_tokens=int(usage.get("output_tokens") or 0),
            cached_input_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0),
            reasoning_tokens=_thinking_tokens(usage),
        ),
    )


def _thinking_tokens(usage: Mapping[str, object]) -> int:
    """``output_tokens_details.thinking_tokens``: the part of the output spent thinking."""
    details = usage.get("output_tokens_details")
    value = details.get("thinking_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _content(parts: list[ContentPart]) -> str | tuple[ContentPart, ...] | None:
    # Text alone keeps the plain string form that logs written before parts hold.
    if not parts:
        return None
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return tuple(parts)


class AnthropicProvider:
    """A ``ModelProvider`` over Anthropic's Messages API (``kind`` ``anthropic``).

    The key is read once, now, from the environment variable ``api_key_env`` (``environ``
    replaces ``os.environ``, for tests) and sent as ``x-api-key``. Retries follow the
    OpenAI-compatible provider's rules (429, 5xx including 529 "overloaded", a dropped
    connection; ``Retry-After`` honoured; ``sleep`` injectable). ``client`` is used as it
    is and left open by ``aclose``.
    """

    kind: str = "anthropic"

    def __init__(
        self,
        base_url: str = "https://api.anthropic.com",
        *,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        version: str = "2023-06-01",
        default_max_tokens: int = 4096,
        timeout: float = 120.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 60.0,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if default_max_tokens < 1:
            raise ConfigError(f"default_max_tokens must be positive, not {default_max_tokens!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self.version = version
        self.default_max_tokens = default_max_tokens
        key = read_api_key(api_key_env, environ)
        all_headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "anthropic-version": version,
        }
        all_headers.update(headers or {})
        if key is not None:
            all_headers["x-api-key"] = key
        self._poster = JsonPoster(
            provider=self.kind,
            url=f"{self.base_url}/v1/messages",
            headers=all_headers,
            secret=key,
            key_env=api_key_env,
            timeout=timeout,
            max_retries=max_retries,
            backoff=backoff,
            max_backoff=max_backoff,
            sleep=sleep,
            client=client,
        )
        self.has_api_key = key is not None

    def __repr__(self) -> str:
        key = "set" if self.has_api_key else "unset"
        return (
            f"AnthropicProvider(base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r} ({key}), version={self.version!r})"
        )

    def _body(self, request: ModelRequest) -> dict[str, object]:
        return _wire_request(request, self.default_max_tokens)

    def _read(self, data: dict[str, object], request: ModelRequest) -> ModelResponse:
        try:
            return _response(data, request)
        except (TypeError, ValueError, ValidationError) as exc:
            raise ModelProviderError(
                f"anthropic model call to {self._poster.url} answered something that is not "
                f"a message: {exc}",
                provider=self.kind,
                status=200,
            ) from exc

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call, retried as configured."""
        return self._read(await self._poster.post(self._body(request)), request)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """One streamed Messages API call: ``complete``'s answer, delta by delta.

        Retried as configured until the first event; a failure after it is raised
        (retryable when the stream was cut or the server said it was overloaded or
        failed), never retried here.
        """
        body = {**self._body(request), "stream": True}
        answer = request.response_format.name if request.response_format is not None else None
        return self._read(
            await drive(self._poster, body, AnthropicStream(answer), on_delta), request
        )

    async def aclose(self) -> None:
        """Close the connections this provider opened; idempotent."""
        await self._poster.aclose()
