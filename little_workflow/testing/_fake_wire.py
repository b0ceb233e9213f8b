"""The server side of the two wire formats, for ``FakeModelServer``.

Written from the APIs' documentation, apart from the clients in
``little_workflow.harness.models``, so a client test checks the client against the
format rather than against itself. Each ``*_request`` function validates a request body
the way the real API does (required fields, roles, tool calls answered by tool results)
and translates it into the provider-neutral ``ModelRequest`` a ``Script`` answers;
each ``*_response`` function renders a ``ModelResponse`` as the API would. Errors are
``WireError``; ``*_error_body`` gives the vendor's error shape for a status.
"""

from __future__ import annotations

import base64
import hashlib
import json
import mimetypes
import re
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from little_workflow.harness.models import (
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
    ToolSpec,
    Usage,
    dump_arguments,
    parse_arguments,
)

__all__ = [
    "WireError",
    "anthropic_error_body",
    "anthropic_request",
    "anthropic_response",
    "anthropic_usage",
    "forced_answer",
    "openai_error_body",
    "openai_request",
    "openai_response",
    "openai_usage",
    "sign_thinking",
]

# Fixed, so a recorded response is byte-for-byte reproducible.
_CREATED = 1_700_000_000

_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "not_found"}
_OPENAI_CODES = {401: "invalid_api_key", 429: "rate_limit_exceeded"}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_TO_STOP_REASON = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "length": "max_tokens",
    "content_filter": "refusal",
}


class WireError(Exception):
    """A request the real API would refuse: ``status`` and the API's ``message``."""

    def __init__(self, status: int, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


def openai_error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _OPENAI_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    if status == 429:
        kind = "requests"
    return {
        "error": {
            "message": message,
            "type": kind,
            "param": param,
            "code": _OPENAI_CODES.get(status),
        }
    }


def anthropic_error_body(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error shape: ``{"type": "error", "error": {"type", "message"}}``."""
    kind = _ANTHROPIC_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def _require(condition: bool, message: str, param: str | None = None) -> None:
    if not condition:
        raise WireError(400, message, param=param)


def _number_in(body: Mapping[str, Any], field: str, top: float) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    _require(
        isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= top,
        f"Invalid '{field}': expected a number between 0 and {top}, but got {value!r} instead.",
        field,
    )
    return float(value)


def _positive_int(value: object, message: str, param: str) -> int:
    _require(isinstance(value, int) and not isinstance(value, bool) and value >= 1, message, param)
    assert isinstance(value, int)
    return value


def _parts_text(content: object, where: str) -> str | None:
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise WireError(400, f"Invalid type for '{where}'.", param=where)
    texts: list[str] = []
    for position, part in enumerate(content):
        _require(
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str),
            f"Invalid content part '{where}[{position}]': the fake server takes text parts only.",
            where,
        )
        texts.append(part["text"])
    return "".join(texts)


_DATA_URL = re.compile(r"data:(?P<type>[\w.+-]+/[\w.+-]+);base64,(?P<data>[A-Za-z0-9+/]*={0,2})")


def _data_url(url: object, where: str) -> tuple[str, str] | None:
    """A data URL's media type and base64 data; ``None`` for an http(s) URL."""
    _require(isinstance(url, str) and bool(url), f"Missing required parameter: '{where}'.", where)
    assert isinstance(url, str)
    if url.startswith(("http://", "https://")):
        return None
    found = _DATA_URL.fullmatch(url)
    _require(
        found is not None,
        f"Invalid '{where}': expected a URL or a base64 data URL (data:<type>;base64,...).",
        where,
    )
    assert found is not None
    try:
        base64.b64decode(found["data"], validate=True)
    except ValueError:
        raise WireError(400, f"Invalid base64 data in '{where}'.", param=where) from None
    return found["type"], found["data"]


def _openai_part(part: object, where: str) -> ContentPart:
    _require(isinstance(part, dict), f"Invalid type for '{where}': expected an object.", where)
    assert isinstance(part, dict)
    kind = part.get("type")
    if kind == "text":
        _require(isinstance(part.get("text"), str), f"Missing required parameter: '{where}.text'.")
        return TextPart(text=part["text"])
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        decoded = _data_url(url, f"{where}.image_url.url")
        if decoded is None:
            assert isinstance(url, str)
            guessed = mimetypes.guess_type(url)[0] or "application/octet-stream"
            return ImagePart(url=url, media_type=guessed)
        media_type, data = decoded
        _require(
            media_type.startswith("image/"),
            f"Invalid MIME type for '{where}.image_url.url': {media_type}.",
            where,
        )
        return ImagePart(media_type=media_type, data=data)
    if kind == "file":
        file = part.get("file")
        _require(isinstance(file, dict), f"Missing required parameter: '{where}.file'.", where)
        assert isinstance(file, dict)
        decoded = _data_url(file.get("file_data"), f"{where}.file.file_data")
        _require(decoded is not None, f"Invalid '{where}.file.file_data': expected a data URL.")
        assert decoded is not None
        filename = file.get("filename")
        return FilePart(
            media_type=decoded[0],
            data=decoded[1],
            filename=filename if isinstance(filename, str) else None,
        )
    raise WireError(
        400,
        f"Invalid value: {kind!r}. Supported values are: 'text', 'image_url', 'input_audio', "
        "'refusal', 'audio', and 'file'.",
        param=f"{where}.type",
    )


def _openai_user_content(content: object, where: str) -> str | tuple[ContentPart, ...]:
    if content is None or isinstance(content, str):
        return content or ""
    _require(isinstance(content, list), f"Invalid type for '{where}'.", where)
    assert isinstance(content, list)
    _require(bool(content), f"Invalid '{where}': empty array.", where)
    return tuple(_openai_part(part, f"{where}[{index}]") for index, part in enumerate(content))


def _openai_message(wire: object, position: int, open_calls: dict[str, str]) -> Message:
    where = f"messages[{position}]"
    _require(isinstance(wire, dict), f"Invalid type for '{where}': expected an object.", where)
    assert isinstance(wire, dict)
    role = wire.get("role")
    if role == "user":
        return Message(role="user", content=_openai_user_content(wire.get("content"), where))
    content = _parts_text(wire.get("content"), f"{where}.content")
    if role in ("system", "developer"):
        return Message(role="system", content=content or "")
    if role == "tool":
        call_id = wire.get("tool_call_id")
        _require(
            isinstance(call_id, str),
            f"Missing required parameter: '{where}.tool_call_id'.",
            f"{where}.tool_call_id",
        )
        assert isinstance(call_id, str)
        _require(
            call_id in open_calls,
            "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
            "message with 'tool_calls'.",
            f"{where}.role",
        )
        return Message(
            role="tool", tool_call_id=call_id, name=open_calls.pop(call_id), content=content or ""
        )
    _require(
        role == "assistant",
        f"Invalid value: {role!r}. Supported values are: 'system', 'assistant', 'user', "
        "'tool', and 'developer'.",
        f"{where}.role",
    )
    calls: list[ToolCall] = []
    raw_calls = wire.get("tool_calls") or []
    _require(isinstance(raw_calls, list), f"Invalid type for '{where}.tool_calls'.", where)
    for index, call in enumerate(raw_calls):
        at = f"{where}.tool_calls[{index}]"
        _require(
            isinstance(call, dict) and isinstance(call.get("id"), str),
            f"Missing required parameter: '{at}.id'.",
            at,
        )
        _require(call.get("type") == "function", f"Invalid value for '{at}.type'.", f"{at}.type")
        function = call.get("function")
        _require(
            isinstance(function, dict) and isinstance(function.get("name"), str),
            f"Missing required parameter: '{at}.function.name'.",
            f"{at}.function",
        )
        arguments = function.get("arguments")
        _require(
            isinstance(arguments, str),
            f"Invalid type for '{at}.function.arguments': expected a string, but got "
            f"{type(arguments).__name__} instead.",
            f"{at}.function.arguments",
        )
        calls.append(
            ToolCall(id=call["id"], name=function["name"], arguments=parse_arguments(arguments))
        )
        open_calls[call["id"]] = function["name"]
    return Message(role="assistant", content=content, tool_calls=tuple(calls))


def openai_request(body: object) -> ModelRequest:
    """Validate a Chat Completions request body; its provider-neutral form."""
    _require(isinstance(body, dict), "We could not parse the JSON body of your request.")
    assert isinstance(body, dict)
    _require(
        isinstance(body.get("model"), str) and bool(body["model"]),
        "you must provide a model parameter",
        "model",
    )
    wire_messages = body.get("messages")
    _require(isinstance(wire_messages, list), "Missing required parameter: 'messages'.", "messages")
    assert isinstance(wire_messages, list)
    _require(
        bool(wire_messages),
        "Invalid 'messages': empty array. Expected an array with minimum length 1.",
        "messages",
    )
    messages: list[Message] = []
    open_calls: dict[str, str] = {}
    for position, wire in enumerate(wire_messages):
        if open_calls and not (isinstance(wire, dict) and wire.get("role") == "tool"):
            raise WireError(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(open_calls)}",
                param=f"messages[{position}].role",
            )
        messages.append(_openai_message(wire, position, open_calls))
    tools: list[ToolSpec] = []
    for index, tool in enumerate(body.get("tools") or []):
        function = tool.get("function") if isinstance(tool, dict) else None
        _require(
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and isinstance(function, dict)
            and isinstance(function.get("name"), str),
            f"Missing required parameter: 'tools[{index}].function.name'.",
            f"tools[{index}]",
        )
        assert isinstance(function, dict)
        tools.append(
            ToolSpec(
                name=function["name"],
                description=function.get("description") or "",
                parameters=function.get("parameters") or {"type": "object", "properties": {}},
            )
        )
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens"))
    if max_tokens is not None:
        max_tokens = _positive_int(
            max_tokens, "Invalid 'max_tokens': expected an integer >= 1.", "max_tokens"
        )
    unknown = sorted(set(body) - _OPENAI_FIELDS - _OPENAI_PASSED)
    _require(not unknown, f"Unrecognized request argument supplied: {', '.join(unknown)}")
    try:
        return ModelRequest(
            model=body["model"],
            messages=tuple(messages),
            tools=tuple(tools),
            temperature=_number_in(body, "temperature", 2),
            max_tokens=max_tokens,
            top_p=_number_in(body, "top_p", 1),
            stop=_openai_stop(body.get("stop")),
            seed=_openai_seed(body.get("seed")),
            tool_choice=_openai_tool_choice(body.get("tool_choice"), tools),
            parallel_tool_calls=_openai_parallel(body, tools),
            response_format=_openai_response_format(body.get("response_format")),
            extra={key: body[key] for key in sorted(_OPENAI_PASSED & set(body))},
        )
    except ValidationError as exc:
        raise WireError(400, f"Invalid request: {exc}") from exc


#: The fields ``openai_request`` reads into the neutral request, and the transport's own.
_OPENAI_FIELDS = frozenset(
    {
        "model", "messages", "tools", "temperature", "max_tokens", "max_completion_tokens",
        "top_p", "stop", "seed", "tool_choice", "parallel_tool_calls", "response_format",
        "stream", "stream_options",
    }
)  # fmt: skip
#: Fields the real API takes that the neutral request has no place for: they arrive in
#: ``extra``, so a test sees a provider-specific field pass through.
_OPENAI_PASSED = frozenset(
    {
        "n", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
        "logit_bias", "user", "metadata", "store", "reasoning_effort", "service_tier",
        "modalities", "audio", "prediction", "verbosity", "prompt_cache_key",
        "safety_identifier", "web_search_options",
    }
)  # fmt: skip


def _openai_stop(stop: object) -> tuple[str, ...]:
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    _require(
        isinstance(stop, list) and len(stop) <= 4 and all(isinstance(s, str) for s in stop),
        "Invalid 'stop': expected a string or an array of at most 4 strings.",
        "stop",
    )
    assert isinstance(stop, list)
    return tuple(stop)


def _openai_seed(seed: object) -> int | None:
    _require(
        seed is None or (isinstance(seed, int) and not isinstance(seed, bool)),
        "Invalid type for 'seed': expected an integer.",
        "seed",
    )
    assert seed is None or isinstance(seed, int)
    return seed


def _openai_tool_choice(choice: object, tools: list[ToolSpec]) -> str | None:
    if choice is None:
        return None
    if choice in ("auto", "none", "required"):
        _require(
            bool(tools) or choice == "none",
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified.",
            "tool_choice",
        )
        assert isinstance(choice, str)
        return choice
    function = choice.get("function") if isinstance(choice, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    _require(
        isinstance(choice, dict) and choice.get("type") == "function" and isinstance(name, str),
        "Invalid value for 'tool_choice': expected 'none', 'auto', 'required' or "
        "{'type': 'function', 'function': {'name': ...}}.",
        "tool_choice",
    )
    assert isinstance(name, str)
    _require(
        any(tool.name == name for tool in tools),
        f"Invalid value for 'tool_choice': no function named {name!r} was specified in "
        "the 'tools' parameter.",
        "tool_choice",
    )
    return name


def _openai_parallel(body: Mapping[str, Any], tools: list[ToolSpec]) -> bool | None:
    parallel = body.get("parallel_tool_calls")
    if parallel is None:
        return None
    _require(
        isinstance(parallel, bool),
        "Invalid type for 'parallel_tool_calls': expected a boolean.",
        "parallel_tool_calls",
    )
    _require(
        bool(tools),
        "Invalid value for 'parallel_tool_calls': 'parallel_tool_calls' is only allowed "
        "when 'tools' are specified.",
        "parallel_tool_calls",
    )
    assert isinstance(parallel, bool)
    return parallel


def _openai_response_format(value: object) -> ResponseFormat | None:
    if value is None or (isinstance(value, dict) and value.get("type") == "text"):
        return None
    spec = value.get("json_schema") if isinstance(value, dict) else None
    _require(
        isinstance(value, dict) and value.get("type") == "json_schema" and isinstance(spec, dict),
        "Invalid 'response_format': the fake server takes {'type': 'text'} or "
        "{'type': 'json_schema', 'json_schema': {...}}.",
        "response_format",
    )
    assert isinstance(spec, dict)
    name = spec.get("name")
    _require(
        isinstance(name, str) and re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name) is not None,
        "Invalid 'response_format.json_schema.name': expected a string of at most 64 letters, "
        "digits, underscores or dashes.",
        "response_format.json_schema.name",
    )
    schema = spec.get("schema", {})
    _require(
        isinstance(schema, dict),
        "Invalid type for 'response_format.json_schema.schema': expected an object.",
        "response_format.json_schema.schema",
    )
    return ResponseFormat(name=name, schema_=schema, strict=bool(spec.get("strict", False)))


def openai_response(response: ModelResponse) -> dict[str, Any]:
    """A Chat Completions response body for ``response``."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": response.message.text,
        "refusal": None,
    }
    reasoning = [p.text for p in response.message.parts if isinstance(p, ReasoningPart)]
    if reasoning:
        # As vLLM and DeepSeek answer: OpenAI itself keeps reasoning on its side.
        message["reasoning_content"] = "".join(reasoning)
    if response.message.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": dump_arguments(call.arguments)},
            }
            for call in response.message.tool_calls
        ]
    return {
        "id": response.id,
        "object": "chat.completion",
        "created": _CREATED,
        "model": response.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": response.finish_reason,
            }
        ],
        "usage": openai_usage(response.usage),
    }


def openai_usage(usage: Usage) -> dict[str, Any]:
    """Chat Completions' ``usage`` object for a neutral ``Usage``."""
    # OpenAI reports both details on every answer, zeros included; a cache write only
    # where there was one (as ``prompt_tokens_details.cache_write_tokens``).
    prompt_details: dict[str, int] = {"cached_tokens": usage.cached_input_tokens}
    if usage.cache_write_tokens:
        prompt_details["cache_write_tokens"] = usage.cache_write_tokens
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.output_tokens,
        "prompt_tokens_details": prompt_details,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }


_IMAGE_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")


def sign_thinking(text: str) -> str:
    """The signature the fake gives a thinking block, and checks when it comes back.

    The real API signs thinking so that a client cannot alter it; so does the fake, with a
    digest, which is enough to catch a client that edits, drops or reorders what it sends.
    """
    return base64.b64encode(hashlib.sha256(b"fake-thinking\0" + text.encode()).digest()).decode()


def _source(block: Mapping[str, Any], where: str, media: tuple[str, ...]) -> None:
    source = block.get("source")
    _require(isinstance(source, dict), f"{where}.source: Field required")
    assert isinstance(source, dict)
    kind = source.get("type")
    if kind == "url":
        _require(isinstance(source.get("url"), str), f"{where}.source.url: Field required")
        return
    if kind == "text" and block.get("type") == "document":
        _require(isinstance(source.get("data"), str), f"{where}.source.data: Field required")
        return
    _require(kind == "base64", f"{where}.source.type: Input should be 'base64' or 'url'")
    _require(
        source.get("media_type") in media,
        f"{where}.source.media_type: Input should be {', '.join(map(repr, media))}",
    )
    try:
        base64.b64decode(str(source.get("data")), validate=True)
    except ValueError:
        raise WireError(400, f"{where}.source.data: invalid base64 data") from None


def _check_block(block: Mapping[str, Any], where: str) -> None:
    kind = block.get("type")
    if kind == "text":
        _require(
            isinstance(block.get("text"), str) and bool(block["text"]),
            f"{where}: text content blocks must be non-empty",
        )
    elif kind == "image":
        _source(block, where, _IMAGE_TYPES)
    elif kind == "document":
        _source(block, where, ("application/pdf",))
    elif kind == "tool_use":
        _require(
            isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
            and isinstance(block.get("input"), dict),
            f"{where}.tool_use: id, name and input (an object) are required",
        )
    elif kind == "tool_result":
        _require(
            isinstance(block.get("tool_use_id"), str),
            f"{where}.tool_result.tool_use_id: Field required",
        )
        inner = block.get("content")
        if isinstance(inner, list):
            for index, part in enumerate(inner):
                _require(
                    isinstance(part, dict) and part.get("type") in ("text", "image"),
                    f"{where}.content.{index}: a tool result holds text and image blocks",
                )
                _check_block(part, f"{where}.content.{index}")
    elif kind == "thinking":
        thinking = block.get("thinking")
        _require(isinstance(thinking, str), f"{where}.thinking: Field required")
        _require(
            block.get("signature") == sign_thinking(str(thinking)),
            f"{where}: Invalid `signature` in `thinking` block",
        )
    elif kind == "redacted_thinking":
        _require(isinstance(block.get("data"), str), f"{where}.data: Field required")
    else:
        raise WireError(400, f"{where}: the fake server has no support for {kind!r} blocks")


def _blocks(content: object, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        _require(bool(content), f"{where}: text content blocks must be non-empty")
        return [{"type": "text", "text": content}]
    _require(isinstance(content, list), f"{where}: Input should be a valid list")
    assert isinstance(content, list)
    for index, block in enumerate(content):
        _require(isinstance(block, dict), f"{where}.{index}: Input should be a valid dictionary")
        _check_block(block, f"{where}.{index}")
    return content


def _part(block: Mapping[str, Any]) -> ContentPart:
    """The neutral part of a checked text, image, document or thinking block."""
    kind = block["type"]
    if kind == "text":
        return TextPart(text=block["text"])
    if kind == "thinking":
        return ReasoningPart(
            provider="anthropic", text=block["thinking"], signature=block["signature"]
        )
    if kind == "redacted_thinking":
        return ReasoningPart(provider="anthropic", data=block["data"], redacted=True)
    return _media_part(kind == "image", block["source"], block.get("title"))


def _media_part(image: bool, source: Mapping[str, Any], title: str | None) -> ContentPart:
    if source["type"] == "url":
        guessed = mimetypes.guess_type(source["url"])[0] or "application/octet-stream"
        if image:
            return ImagePart(url=source["url"], media_type=guessed)
        return FilePart(url=source["url"], media_type=guessed, filename=title)
    if source["type"] == "text":
        data = base64.b64encode(source["data"].encode()).decode()
        return FilePart(media_type="text/plain", data=data, filename=title)
    if image:
        return ImagePart(media_type=source["media_type"], data=source["data"])
    return FilePart(media_type=source["media_type"], data=source["data"], filename=title)


def _content(parts: list[ContentPart], sep: str) -> str | tuple[ContentPart, ...] | None:
    # Text alone is a string, as the providers send it, so a script compares it as one.
    if not parts:
        return None
    if all(isinstance(part, TextPart) for part in parts):
        return sep.join(part.text for part in parts if isinstance(part, TextPart))
    return tuple(parts)


def _result_content(block: Mapping[str, Any]) -> str | tuple[ContentPart, ...]:
    inner = block.get("content")
    if inner is None:
        return ""
    if isinstance(inner, str):
        return inner
    return _content([_part(part) for part in inner], "") or ""


def _anthropic_messages(wire_messages: list[Any]) -> list[Message]:
    messages: list[Message] = []
    open_calls: dict[str, str] = {}
    for position, wire in enumerate(wire_messages):
        where = f"messages.{position}"
        _require(isinstance(wire, dict), f"{where}: Input should be a valid dictionary")
        role = wire.get("role")
        if role == "system":
            raise WireError(
                400,
                f'{where}: Unexpected role "system". The Messages API accepts a top-level '
                '`system` parameter, not "system" as an input message role.',
            )
        _require(
            role in ("user", "assistant"), f"{where}.role: Input should be 'user' or 'assistant'"
        )
        blocks = _blocks(wire.get("content"), f"{where}.content")
        answered = {b["tool_use_id"] for b in blocks if b["type"] == "tool_result"}
        if open_calls and set(open_calls) - answered:
            raise WireError(
                400,
                f"messages.{position - 1}: `tool_use` ids were found without `tool_result` "
                f"blocks immediately after: {', '.join(sorted(set(open_calls) - answered))}. "
                "Each `tool_use` block must have a corresponding `tool_result` block in the "
                "next message.",
            )
        if role == "assistant":
            _require(not answered, f"{where}: tool_result blocks belong in a user message")
            _require(
                all(b["type"] not in ("image", "document") for b in blocks),
                f"{where}: image and document blocks belong in a user message",
            )
            parts = [_part(b) for b in blocks if b["type"] != "tool_use"]
            calls = [
                ToolCall(id=b["id"], name=b["name"], arguments=b["input"])
                for b in blocks
                if b["type"] == "tool_use"
            ]
            messages.append(
                Message(role="assistant", content=_content(parts, ""), tool_calls=tuple(calls))
            )
            open_calls = {call.id: call.name for call in calls}
            continue
        _require(
            all(b["type"] not in ("tool_use", "thinking", "redacted_thinking") for b in blocks),
            f"{where}: tool_use and thinking blocks belong in an assistant message",
        )
        parts = []
        for index, block in enumerate(blocks):
            if block["type"] != "tool_result":
                parts.append(_part(block))
                continue
            call_id = block["tool_use_id"]
            if call_id not in open_calls:
                raise WireError(
                    400,
                    f"{where}.content.{index}: unexpected `tool_use_id` found in `tool_result` "
                    f"blocks: {call_id}. Each `tool_result` block must have a corresponding "
                    "`tool_use` block in the previous message.",
                )
            messages.append(
                Message(
                    role="tool",
                    tool_call_id=call_id,
                    name=open_calls[call_id],
                    content=_result_content(block),
                    is_error=bool(block.get("is_error", False)),
                )
            )
        if parts:
            messages.append(Message(role="user", content=_content(parts, "\n\n")))
        open_calls = {}
    return messages


#: The fields ``anthropic_request`` reads into the neutral request, and the transport's own.
_ANTHROPIC_FIELDS = frozenset(
    {
        "model", "max_tokens", "messages", "system", "tools", "tool_choice", "temperature",
        "top_p", "stop_sequences", "stream",
    }
)  # fmt: skip
#: Fields the real API takes that the neutral request has no place for (``extra``).
_ANTHROPIC_PASSED = frozenset(
    {"metadata", "thinking", "top_k", "service_tier", "container", "mcp_servers"}
)


def _anthropic_tool_choice(choice: object, tools: list[ToolSpec]) -> tuple[str | None, bool | None]:
    if choice is None:
        return None, None
    kind = choice.get("type") if isinstance(choice, dict) else None
    _require(
        kind in ("auto", "any", "tool", "none"),
        "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', "
        "'tool', 'none'",
    )
    assert isinstance(choice, dict)
    parallel = False if choice.get("disable_parallel_tool_use") else None
    if kind != "tool":
        return {"any": "required"}.get(str(kind), str(kind)), parallel
    name = choice.get("name")
    _require(isinstance(name, str), "tool_choice.tool.name: Field required")
    _require(
        any(tool.name == name for tool in tools),
        f"tool_choice: tool {name!r} was not found in the tools",
    )
    return str(name), parallel


def _stop_sequences(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    _require(
        isinstance(value, list) and all(isinstance(item, str) and item for item in value),
        "stop_sequences: Input should be a valid list of non-empty strings",
    )
    assert isinstance(value, list)
    return tuple(value)


def anthropic_request(body: object) -> ModelRequest:
    """Validate a Messages API request body; its provider-neutral form."""
    _require(isinstance(body, dict), "There was an issue with the JSON body of your request.")
    assert isinstance(body, dict)
    _require(isinstance(body.get("model"), str) and bool(body["model"]), "model: Field required")
    _require("max_tokens" in body, "max_tokens: Field required")
    max_tokens = _positive_int(
        body["max_tokens"], "max_tokens: Input should be greater than or equal to 1", "max_tokens"
    )
    unknown = sorted(set(body) - _ANTHROPIC_FIELDS - _ANTHROPIC_PASSED)
    _require(not unknown, f"{', '.join(unknown)}: Extra inputs are not permitted")
    wire_messages = body.get("messages")
    _require(isinstance(wire_messages, list), "messages: Field required")
    assert isinstance(wire_messages, list)
    _require(bool(wire_messages), "messages: at least one message is required")
    system = body.get("system")
    messages: list[Message] = []
    if system is not None:
        text = _parts_text(system, "system")
        if text:
            messages.append(Message(role="system", content=text))
    messages.extend(_anthropic_messages(wire_messages))
    tools: list[ToolSpec] = []
    for index, tool in enumerate(body.get("tools") or []):
        _require(
            isinstance(tool, dict) and isinstance(tool.get("name"), str),
            f"tools.{index}.name: Field required",
        )
        _require(
            isinstance(tool.get("input_schema"), dict),
            f"tools.{index}.input_schema: Field required",
        )
        tools.append(
            ToolSpec(
                name=tool["name"],
                description=tool.get("description") or "",
                parameters=tool["input_schema"],
            )
        )
    choice, parallel = _anthropic_tool_choice(body.get("tool_choice"), tools)
    try:
        return ModelRequest(
            model=body["model"],
            messages=tuple(messages),
            tools=tuple(tools),
            temperature=_number_in(body, "temperature", 1),
            max_tokens=max_tokens,
            top_p=_number_in(body, "top_p", 1),
            stop=_stop_sequences(body.get("stop_sequences")),
            tool_choice=choice,
            parallel_tool_calls=parallel,
            extra={key: body[key] for key in sorted(_ANTHROPIC_PASSED & set(body))},
        )
    except ValidationError as exc:
        raise WireError(400, f"invalid request: {exc}") from exc


def forced_answer(request: ModelRequest, response: ModelResponse) -> ModelResponse:
    """``response`` as the Messages API gives it when ``request`` forces one tool.

    A forced tool always answers with a call to it: a script that answers such a request
    with JSON text (the structured answer it means) gets that text as the tool's input,
    as the real model's answer would arrive.
    """
    forced = request.tool_choice
    if forced in (None, "auto", "none", "required") or response.message.tool_calls:
        return response
    try:
        arguments = json.loads(response.message.text or "")
    except ValueError:
        return response
    if not isinstance(arguments, dict):
        return response
    reasoning = tuple(p for p in response.message.parts if isinstance(p, ReasoningPart))
    call = ToolCall(id="toolu_" + response.id[-24:], name=str(forced), arguments=arguments)
    message = Message(role="assistant", content=reasoning or None, tool_calls=(call,))
    return response.model_copy(update={"message": message, "finish_reason": "tool_calls"})


def _answer_block(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, ReasoningPart):
        if part.redacted:
            return {"type": "redacted_thinking", "data": part.data or ""}
        return {"type": "thinking", "thinking": part.text, "signature": sign_thinking(part.text)}
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    raise WireError(500, f"the script answered with a {part.type} part, which no model writes")


def anthropic_response(response: ModelResponse) -> dict[str, Any]:
    """A Messages API response body for ``response``."""
    content = [
        _answer_block(part)
        for part in response.message.parts
        if not (isinstance(part, TextPart) and not part.text)
    ]
    content.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in response.message.tool_calls
    )
    return {
        "id": response.id,
        "type": "message",
        "role": "assistant",
        "model": response.model,
        "content": content,
        "stop_reason": _TO_STOP_REASON.get(response.finish_reason, response.finish_reason),
        "stop_sequence": None,
        "usage": anthropic_usage(response.usage),
    }


def anthropic_usage(usage: Usage) -> dict[str, Any]:
    """The Messages API's ``usage`` object for a neutral ``Usage``."""
    # Anthropic's input_tokens is only the uncached part; the neutral figure is the sum.
    cached, written = usage.cached_input_tokens, usage.cache_write_tokens
    wire: dict[str, Any] = {
        "input_tokens": max(usage.input_tokens - cached - written, 0),
        "cache_read_input_tokens": cached,
        "cache_creation_input_tokens": written,
        "output_tokens": usage.output_tokens,
    }
    if usage.reasoning_tokens:
        # The part of output_tokens spent thinking, where the model thought.
        wire["output_tokens_details"] = {"thinking_tokens": usage.reasoning_tokens}
    return wire
