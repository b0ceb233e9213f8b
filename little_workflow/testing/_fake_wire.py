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

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from little_workflow.harness.models import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    dump_arguments,
    parse_arguments,
)

__all__ = [
    "WireError",
    "anthropic_error_body",
    "anthropic_request",
    "anthropic_response",
    "openai_error_body",
    "openai_request",
    "openai_response",
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


def _openai_message(wire: object, position: int, open_calls: dict[str, str]) -> Message:
    where = f"messages[{position}]"
    _require(isinstance(wire, dict), f"Invalid type for '{where}': expected an object.", where)
    assert isinstance(wire, dict)
    role = wire.get("role")
    content = _parts_text(wire.get("content"), f"{where}.content")
    if role in ("system", "developer", "user"):
        return Message(role="user" if role == "user" else "system", content=content or "")
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
    try:
        return ModelRequest(
            model=body["model"],
            messages=tuple(messages),
            tools=tuple(tools),
            temperature=_number_in(body, "temperature", 2),
            max_tokens=max_tokens,
        )
    except ValidationError as exc:
        raise WireError(400, f"Invalid request: {exc}") from exc


def openai_response(response: ModelResponse) -> dict[str, Any]:
    """A Chat Completions response body for ``response``."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": response.message.text,
        "refusal": None,
    }
    if response.message.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": dump_arguments(call.arguments)},
            }
            for call in response.message.tool_calls
        ]
    usage = response.usage
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
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.input_tokens + usage.output_tokens,
        },
    }


def _blocks(content: object, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        _require(bool(content), f"{where}: text content blocks must be non-empty")
        return [{"type": "text", "text": content}]
    _require(isinstance(content, list), f"{where}: Input should be a valid list")
    assert isinstance(content, list)
    for index, block in enumerate(content):
        _require(isinstance(block, dict), f"{where}.{index}: Input should be a valid dictionary")
        kind = block.get("type")
        if kind == "text":
            _require(
                isinstance(block.get("text"), str) and bool(block["text"]),
                f"{where}.{index}: text content blocks must be non-empty",
            )
        elif kind == "tool_use":
            _require(
                isinstance(block.get("id"), str)
                and isinstance(block.get("name"), str)
                and isinstance(block.get("input"), dict),
                f"{where}.{index}.tool_use: id, name and input (an object) are required",
            )
        elif kind == "tool_result":
            _require(
                isinstance(block.get("tool_use_id"), str),
                f"{where}.{index}.tool_result.tool_use_id: Field required",
            )
        else:
            raise WireError(
                400, f"{where}.{index}: the fake server has no support for {kind!r} blocks"
            )
    return content


def _result_text(content: object, where: str) -> str:
    if content is None:
        return ""
    text = _parts_text(content, where)
    return text or ""


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
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            calls = [
                ToolCall(id=b["id"], name=b["name"], arguments=b["input"])
                for b in blocks
                if b["type"] == "tool_use"
            ]
            messages.append(
                Message(role="assistant", content=text or None, tool_calls=tuple(calls))
            )
            open_calls = {call.id: call.name for call in calls}
            continue
        _require(
            all(b["type"] != "tool_use" for b in blocks),
            f"{where}: tool_use blocks belong in an assistant message",
        )
        texts: list[str] = []
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                texts.append(block["text"])
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
                    content=_result_text(block.get("content"), f"{where}.content.{index}.content"),
                    is_error=bool(block.get("is_error", False)),
                )
            )
        if texts:
            messages.append(Message(role="user", content="\n\n".join(texts)))
        open_calls = {}
    return messages


def anthropic_request(body: object) -> ModelRequest:
    """Validate a Messages API request body; its provider-neutral form."""
    _require(isinstance(body, dict), "There was an issue with the JSON body of your request.")
    assert isinstance(body, dict)
    _require(isinstance(body.get("model"), str) and bool(body["model"]), "model: Field required")
    _require("max_tokens" in body, "max_tokens: Field required")
    max_tokens = _positive_int(
        body["max_tokens"], "max_tokens: Input should be greater than or equal to 1", "max_tokens"
    )
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
    try:
        return ModelRequest(
            model=body["model"],
            messages=tuple(messages),
            tools=tuple(tools),
            temperature=_number_in(body, "temperature", 1),
            max_tokens=max_tokens,
        )
    except ValidationError as exc:
        raise WireError(400, f"invalid request: {exc}") from exc


def anthropic_response(response: ModelResponse) -> dict[str, Any]:
    """A Messages API response body for ``response``."""
    content: list[dict[str, Any]] = []
    if response.message.text:
        content.append({"type": "text", "text": response.message.text})
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
        "usage": {
            "input_tokens": response.usage.input_tokens,
            "output_tokens": response.usage.output_tokens,
        },
    }
