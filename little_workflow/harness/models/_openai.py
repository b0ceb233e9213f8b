"""An OpenAI-compatible Chat Completions client: OpenAI, vLLM, Ollama, llama.cpp's server.

``POST {base_url}/chat/completions``. Tool calls travel as ``{"type": "function",
"function": {"name", "arguments"}}`` where ``arguments`` is a JSON *string*: the model
writes it, and small local models sometimes write it wrong. Such arguments are not an
error of the call (retrying would cost another call for likely the same text): the
``ToolCall`` keeps the raw text as ``{RAW_ARGUMENTS_KEY: text}``, which fails the tool's
argument validation, so the harness hands the problem back to the model; sent back to
the server, that tool call carries the raw text verbatim, as the model wrote it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import JsonValue, ValidationError

from little_workflow.codec import sha256_digest
from little_workflow.errors import ModelProviderError
from little_workflow.harness.models._http import JsonPoster, Sleep, read_api_key
from little_workflow.harness.models._messages import (
    ContentPart,
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
)
from little_workflow.harness.models._openai_stream import OpenAIStream
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._streaming import drive

if TYPE_CHECKING:
    import httpx

__all__ = ["RAW_ARGUMENTS_KEY", "OpenAICompatibleProvider", "dump_arguments", "parse_arguments"]

#: The key under which a tool call keeps arguments that are not a JSON object.
RAW_ARGUMENTS_KEY = "__raw_arguments__"

_FINISH_REASONS = {"function_call": "tool_calls"}


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


def parse_arguments(text: object) -> dict[str, JsonValue]:
    """Tool-call arguments from their wire form (a JSON string holding an object).

    An empty string or ``None`` means no arguments; an object (some servers send one) is
    taken as it is; anything that does not parse to a JSON object is kept raw under
    ``RAW_ARGUMENTS_KEY``.
    """
    if isinstance(text, dict):
        return text
    if text is None or (isinstance(text, str) and not text.strip()):
        return {}
    raw = text if isinstance(text, str) else json.dumps(text)
    try:
        value = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return {RAW_ARGUMENTS_KEY: raw}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: raw}


def dump_arguments(arguments: Mapping[str, JsonValue]) -> str:
    """The wire form of tool-call arguments: compact JSON, or the raw text kept by parsing."""
    raw = arguments.get(RAW_ARGUMENTS_KEY)
    if len(arguments) == 1 and isinstance(raw, str):
        return raw
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _unsendable(text: str) -> ModelProviderError:
    # Not retryable: the same request fails the same way; the step fails and says why.
    return ModelProviderError(f"openai request cannot be sent: {text}", provider="openai")


def _data_url(part: ImagePart | FilePart) -> str:
    if part.data is None:
        assert part.url is not None  # a part has one or the other
        return part.url
    return f"data:{part.media_type};base64,{part.data}"


def _wire_part(part: ContentPart, where: str) -> dict[str, object] | None:
    """A content part in Chat Completions form; ``None`` for a part this API cannot take back."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        return {"type": "image_url", "image_url": {"url": _data_url(part)}}
    if isinstance(part, FilePart):
        if part.data is None:
            raise _unsendable(
                f"{where}: a file part with a url cannot go to the Chat Completions API, which "
                "takes files as data only; fetch it and use FilePart.of(data, media_type)"
            )
        file: dict[str, object] = {"file_data": _data_url(part)}
        if part.filename:
            file["filename"] = part.filename
        return {"type": "file", "file": file}
    # Chat Completions has no field for reasoning sent back: servers that answer with
    # ``reasoning_content`` (vLLM, DeepSeek) ask that it is not sent again.
    return None


def _wire_content(message: Message, where: str) -> str | list[dict[str, object]]:
    if message.content is None or isinstance(message.content, str):
        return message.content or ""
    parts = [_wire_part(part, where) for part in message.content]
    kept = [part for part in parts if part is not None]
    if all(part["type"] == "text" for part in kept):
        # Text alone goes as a string, which every compatible server takes.
        return "".join(str(part["text"]) for part in kept)
    if message.role != "user":
        raise _unsendable(
            f"{where}: only a user message may hold images or files on the Chat Completions "
            f"API, not a {message.role} message"
        )
    return kept


def _wire_message(message: Message, position: int) -> dict[str, object]:
    where = f"messages[{position}]"
    if message.role == "tool":
        # The wire has no error flag for a tool result: the harness puts the error text
        # in ``content``, which is what the model reads either way.
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.text or "",
        }
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.text,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": dump_arguments(call.arguments)},
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": _wire_content(message, where)}


def _tool_choice(choice: str) -> object:
    if choice in ("auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def _wire_request(request: ModelRequest, max_tokens_param: str) -> dict[str, object]:
    body: dict[str, object] = {
        "model": request.model,
        "messages": [
            _wire_message(message, position) for position, message in enumerate(request.messages)
        ],
    }
    if request.tools:
        tools: list[dict[str, object]] = []
        for tool in request.tools:
            function: dict[str, object] = {"name": tool.name}
            if tool.description:
                function["description"] = tool.description
            function["parameters"] = tool.parameters
            tools.append({"type": "function", "function": function})
        body["tools"] = tools
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body[max_tokens_param] = request.max_tokens
    if request.top_p is not None:
        body["top_p"] = request.top_p
    if request.stop:
        body["stop"] = list(request.stop)
    if request.seed is not None:
        body["seed"] = request.seed
    if request.tool_choice is not None:
        body["tool_choice"] = _tool_choice(request.tool_choice)
    # OpenAI refuses parallel_tool_calls on a request without tools.
    if request.parallel_tool_calls is not None and request.tools:
        body["parallel_tool_calls"] = request.parallel_tool_calls
    if request.response_format is not None:
        answer = request.response_format
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": answer.name, "schema": answer.schema_, "strict": answer.strict},
        }
    # Last, so a provider-specific field can also replace one set above.
    body.update(request.extra)
    return body


def _text(content: object) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts: keep the text ones
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str)) or None
    raise TypeError(f"content is a {type(content).__name__}")


def _content(wire: Mapping[str, object]) -> str | tuple[ContentPart, ...] | None:
    """The answer's content: its text, after its reasoning when the server sent some.

    vLLM, DeepSeek and llama.cpp send the reasoning as ``reasoning_content``; Ollama and
    OpenRouter as ``reasoning``. Kept as a ``ReasoningPart`` (for the record and for
    whoever reads it); an answer without reasoning keeps the plain string form.
    """
    text = _text(wire.get("content"))
    reasoning = wire.get("reasoning_content")
    if not isinstance(reasoning, str):
        reasoning = wire.get("reasoning")
    if not isinstance(reasoning, str) or not reasoning:
        return text
    parts: list[ContentPart] = [ReasoningPart(provider="openai", text=reasoning)]
    if text:
        parts.append(TextPart(text=text))
    return tuple(parts)


def _tool_calls(raw: object, response_id: str) -> tuple[ToolCall, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TypeError("tool_calls is not a list")
    calls: list[ToolCall] = []
    for position, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("function"), dict):
            raise TypeError(f"tool_calls[{position}] has no function")
        function = item["function"]
        # Some local servers leave the id out; the harness needs one to pair the result.
        call_id = item.get("id") or f"call_{response_id}_{position}"
        calls.append(
            ToolCall(
                id=str(call_id),
                name=str(function.get("name") or ""),
                arguments=parse_arguments(function.get("arguments")),
            )
        )
    return tuple(calls)


def _response(data: dict[str, object], request: ModelRequest) -> ModelResponse:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise TypeError("the answer has no choices")
    choice = choices[0]
    wire = choice.get("message")
    if not isinstance(wire, dict):
        raise TypeError("choices[0] has no message")
    response_id = data.get("id")
    if not isinstance(response_id, str) or not response_id:
        # llama.cpp and some proxies have answered without an id; a digest of the answer
        # keeps the item log's deduplication working.
        response_id = "chatcmpl-" + sha256_digest(data, trusted=True)[7:31]
    calls = _tool_calls(wire.get("tool_calls"), response_id)
    finish = choice.get("finish_reason")
    finish_reason = _FINISH_REASONS.get(str(finish), str(finish)) if finish else "stop"
    if calls and finish_reason == "stop":
        finish_reason = "tool_calls"  # Ollama has said "stop" while asking for tools
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    model = data.get("model")
    return ModelResponse(
        id=response_id,
        model=model if isinstance(model, str) and model else request.model,
        message=Message(role="assistant", content=_content(wire), tool_calls=calls),
        finish_reason=finish_reason,
        usage=Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            cached_input_tokens=_detail(usage, "prompt_tokens_details", "cached_tokens"),
            cache_write_tokens=_detail(usage, "prompt_tokens_details", "cache_write_tokens"),
            reasoning_tokens=_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        ),
    )


def _detail(usage: Mapping[str, object], group: str, field: str) -> int:
    """A count inside one of the usage's detail objects; 0 where the server sent none.

    Local servers (Ollama, llama.cpp) leave the details out or send ``null``.
    """
    details = usage.get(group)
    value = details.get(field) if isinstance(details, dict) else None
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


class OpenAICompatibleProvider:
    """A ``ModelProvider`` over the Chat Completions API (``kind`` ``openai``).

    ``base_url`` ends before ``/chat/completions``: ``https://api.openai.com/v1``,
    ``http://localhost:8000/v1`` (vLLM), ``http://localhost:11434/v1`` (Ollama),
    ``http://localhost:8080/v1`` (llama.cpp). The key is read once, now, from the
    environment variable ``api_key_env`` (``environ`` replaces ``os.environ``, for tests);
    when it is unset no ``Authorization`` header is sent, as local servers expect.

    A failed call is retried ``max_retries`` times (429, 5xx, a dropped connection),
    waiting ``backoff * 2**n`` seconds capped at ``max_backoff``, or what ``Retry-After``
    says; ``sleep`` is injectable. ``max_tokens_param`` names the field the limit goes
    in: newer OpenAI models want ``max_completion_tokens``. ``client`` is used as it is
    and left open by ``aclose``.
    """

    kind: str = "openai"

    def __init__(
        self,
        base_url: str = "https://api.openai.com/v1",
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeout: float = 120.0,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 60.0,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        environ: Mapping[str, str] | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key_env = api_key_env
        self._max_tokens_param = max_tokens_param
        key = read_api_key(api_key_env, environ)
        all_headers = {"content-type": "application/json", "accept": "application/json"}
        all_headers.update(headers or {})
        if key is not None:
            all_headers["authorization"] = f"Bearer {key}"
        self._poster = JsonPoster(
            provider=self.kind,
            url=f"{self.base_url}/chat/completions",
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
            f"OpenAICompatibleProvider(base_url={self.base_url!r}, "
            f"api_key_env={self.api_key_env!r} ({key}))"
        )

    def _body(self, request: ModelRequest) -> dict[str, object]:
        return _wire_request(request, self._max_tokens_param)

    def _read(self, data: dict[str, object], request: ModelRequest) -> ModelResponse:
        try:
            return _response(data, request)
        except (TypeError, ValueError, ValidationError) as exc:
            raise ModelProviderError(
                f"openai model call to {self._poster.url} answered something that is not a "
                f"chat completion: {exc}",
                provider=self.kind,
                status=200,
            ) from exc

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Chat Completions call, retried as configured."""
        return self._read(await self._poster.post(self._body(request)), request)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """One streamed Chat Completions call: ``complete``'s answer, delta by delta.

        Sent with ``stream_options.include_usage``, so the usage comes too. Retried as
        configured until the first event; a failure after it is raised (retryable when
        the stream was cut or the server said it failed), never retried here.
        """
        body = {**self._body(request), "stream": True, "stream_options": {"include_usage": True}}
        return self._read(await drive(self._poster, body, OpenAIStream(), on_delta), request)

    async def aclose(self) -> None:
        """Close the connections this provider opened; idempotent."""
        await self._poster.aclose()
