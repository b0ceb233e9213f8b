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
API counts apart, so the figure means what OpenAI's ``prompt_tokens`` means.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._http import JsonPoster, Sleep, read_api_key
from little_workflow.harness.models._messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
)

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


def _assistant_blocks(message: Message) -> list[dict[str, object]]:
    # The API refuses empty text blocks.
    blocks: list[dict[str, object]] = []
    if message.text:
        blocks.append({"type": "text", "text": message.text})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
        for call in message.tool_calls
    )
    return blocks


def _tool_result(message: Message) -> dict[str, object]:
    block: dict[str, object] = {
        "type": "tool_result",
        "tool_use_id": message.tool_call_id or "",
        "content": message.text or "",
    }
    if message.is_error:
        block["is_error"] = True
    return block


def _wire_messages(messages: tuple[Message, ...]) -> tuple[str | None, list[dict[str, object]]]:
    system: list[str] = []
    wire: list[dict[str, object]] = []
    # The user message currently collecting tool results, if the last one is such.
    results: list[dict[str, object]] | None = None
    for message in messages:
        if message.role == "system":
            if message.text:
                system.append(message.text)
            continue
        if message.role == "tool":
            if results is None:
                results = []
                wire.append({"role": "user", "content": results})
            results.append(_tool_result(message))
            continue
        if message.role == "user" and results is not None and message.text:
            results.append({"type": "text", "text": message.text})
            results = None
            continue
        results = None
        if message.role == "assistant":
            blocks = _assistant_blocks(message)
            wire.append({"role": "assistant", "content": blocks or ""})
        else:
            wire.append({"role": "user", "content": message.text or ""})
    return ("\n\n".join(system) if system else None), wire


def _wire_request(request: ModelRequest, default_max_tokens: int) -> dict[str, object]:
    system, messages = _wire_messages(request.messages)
    body: dict[str, object] = {
        "model": request.model,
        "max_tokens": request.max_tokens or default_max_tokens,
        "messages": messages,
    }
    if system is not None:
        body["system"] = system
    if request.tools:
        tools: list[dict[str, object]] = []
        for tool in request.tools:
            spec: dict[str, object] = {"name": tool.name}
            if tool.description:
                spec["description"] = tool.description
            spec["input_schema"] = tool.parameters
            tools.append(spec)
        body["tools"] = tools
    if request.temperature is not None:
        body["temperature"] = request.temperature
    return body


def _response(data: dict[str, object], request: ModelRequest) -> ModelResponse:
    content = data.get("content")
    if not isinstance(content, list):
        raise TypeError("the answer has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for position, block in enumerate(content):
        if not isinstance(block, dict):
            raise TypeError(f"content[{position}] is not a block")
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif block.get("type") == "tool_use":
            arguments = block.get("input", {})
            if not isinstance(arguments, dict):
                raise TypeError(f"content[{position}].input is not an object")
            calls.append(
                ToolCall(id=str(block.get("id")), name=str(block.get("name")), arguments=arguments)
            )
        # Other blocks (thinking, server tool results) have no neutral form yet.
    response_id = data.get("id")
    if not isinstance(response_id, str) or not response_id:
        raise TypeError("the answer has no id")
    stop = data.get("stop_reason")
    finish_reason = _STOP_REASONS.get(str(stop), str(stop)) if stop else "stop"
    if calls and finish_reason == "stop":
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
        message=Message(role="assistant", content="".join(texts) or None, tool_calls=tuple(calls)),
        finish_reason=finish_reason,
        usage=Usage(input_tokens=input_tokens, output_tokens=int(usage.get("output_tokens") or 0)),
    )


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

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call, retried as configured."""
        data = await self._poster.post(_wire_request(request, self.default_max_tokens))
        try:
            return _response(data, request)
        except (TypeError, ValueError, ValidationError) as exc:
            raise ModelProviderError(
                f"anthropic model call to {self._poster.url} answered something that is not "
                f"a message: {exc}",
                provider=self.kind,
                status=200,
            ) from exc

    async def aclose(self) -> None:
        """Close the connections this provider opened; idempotent."""
        await self._poster.aclose()
