"""A ``ModelProvider`` over the official ``anthropic`` SDK (the ``anthropic`` extra).

For users who already configure an ``anthropic.AsyncAnthropic``, or reach Claude through
``AsyncAnthropicBedrock`` or ``AsyncAnthropicVertex`` (whose request signing and URLs
the SDK owns). One translation of the Messages wire: the body is
``_anthropic._wire_request``'s (``model``, ``max_tokens`` and ``messages`` as the SDK's
arguments, every other field through ``extra_body``, untouched), and the answer's dict
is read by ``_anthropic._response``. A stream is the SDK's stream of decoded events fed
to ``AnthropicStream``: decoded by the SDK, not by our SSE parser, because Bedrock
sends them in AWS's binary event-stream framing, not as SSE.

Retries are ours, the SDK's are off on a copy of the client
(``with_options(max_retries=0)``); the client given is the caller's, left open by
``aclose``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Mapping
from typing import TYPE_CHECKING, Any

from little_workflow._extras import require
from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._anthropic import _response, _wire_request
from little_workflow.harness.models._anthropic_stream import AnthropicStream
from little_workflow.harness.models._messages import ModelRequest, ModelResponse
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._retry import RetryPolicy, Sleep
from little_workflow.harness.models._sdk_client import SdkClient
from little_workflow.harness.models._sdk_errors import sdk_result
from little_workflow.harness.models._sdk_stream import Opened, SdkEvents
from little_workflow.harness.models._sse import SseEvent
from little_workflow.harness.models._streaming import drive

if TYPE_CHECKING:
    import anthropic

__all__ = ["AnthropicSDKProvider"]

_ARGUMENTS = ("model", "max_tokens", "messages")


def _arguments(body: Mapping[str, object], *, stream: bool) -> dict[str, Any]:
    arguments: dict[str, Any] = {name: body[name] for name in _ARGUMENTS}
    arguments["extra_body"] = {k: v for k, v in body.items() if k not in _ARGUMENTS}
    if stream:
        # An argument, not a body field: Bedrock and Vertex move it into the URL.
        arguments["stream"] = True
    return arguments


async def _events(stream: Any) -> AsyncGenerator[SseEvent, None]:
    # The accumulator reads an event as the wire sends it: its type and its JSON.
    async for event in stream:
        data = event.to_dict(mode="json")
        yield SseEvent(event=str(data.get("type", "message")), data=json.dumps(data))


class AnthropicSDKProvider:
    """A ``ModelProvider`` over an ``anthropic.AsyncAnthropic`` client (``kind`` ``anthropic``).

    ``client`` is any async client of the SDK (``AsyncAnthropic``,
    ``AsyncAnthropicBedrock``, ``AsyncAnthropicVertex``) as the caller configured it;
    without one, ``anthropic.AsyncAnthropic()`` is made (it reads ``ANTHROPIC_API_KEY``)
    and closed by ``aclose``. ``default_max_tokens`` is sent when a request has none (the
    API requires it). Failed calls are retried here as by ``AnthropicProvider``
    (``max_retries``, ``backoff``, ``max_backoff``, ``sleep``); the client's own
    ``max_retries`` is ignored.
    """

    kind: str = "anthropic"

    def __init__(
        self,
        client: anthropic.AsyncAnthropic
        | anthropic.AsyncAnthropicBedrock
        | anthropic.AsyncAnthropicVertex
        | None = None,
        *,
        default_max_tokens: int = 4096,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 60.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        require("anthropic", "AnthropicSDKProvider")
        import anthropic

        if default_max_tokens < 1:
            raise ConfigError(f"default_max_tokens must be positive, not {default_max_tokens!r}")
        self.default_max_tokens = default_max_tokens
        self._retries = RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_backoff, sleep=sleep
        )
        self._sdk = SdkClient(
            anthropic,
            client,
            owner="AnthropicSDKProvider",
            provider=self.kind,
            path="/v1/messages",
            make=anthropic.AsyncAnthropic,
            sdk_error=anthropic.AnthropicError,
        )
        self.base_url = self._sdk.base_url
        self._errors = self._sdk.errors
        self._events = SdkEvents(self._errors, self._retries, self._open_stream)

    def __repr__(self) -> str:
        return repr(self._sdk)

    def _read(self, data: dict[str, object], request: ModelRequest) -> ModelResponse:
        return self._sdk.read(_response, data, request, expected="a message")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Messages API call through the SDK, retried as configured."""
        arguments = _arguments(_wire_request(request, self.default_max_tokens), stream=False)

        async def attempt() -> object:
            try:
                answer: object = await self._sdk.calls.messages.create(**arguments)
            except ValueError as exc:
                # The SDK refuses, before sending, a call it expects to outlast its
                # default timeout (a large max_tokens): the same call would fail again.
                raise ModelProviderError(
                    f"anthropic model call to {self._errors.url} was refused by the SDK: "
                    f"{exc} (stream the call, give the client a timeout, or lower max_tokens)",
                    provider=self.kind,
                ) from exc
            return answer

        answer = await self._retries.run(attempt, self._errors.failure_of)
        return self._read(sdk_result(answer, self._errors), request)

    async def _open_stream(self, body: Mapping[str, object]) -> Opened:
        stream = await self._sdk.calls.messages.create(**_arguments(body, stream=True))
        return Opened(_events(stream), stream.close)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """One streamed Messages API call: ``complete``'s answer, delta by delta.

        Retried until the first event, never after (as ``AnthropicProvider.stream``).
        """
        body = _wire_request(request, self.default_max_tokens)
        answer = request.response_format.name if request.response_format is not None else None
        return self._read(
            await drive(self._events, body, AnthropicStream(answer), on_delta), request
        )

    async def aclose(self) -> None:
        """Close the client if this provider made it; idempotent."""
        await self._sdk.aclose()
