"""A ``ModelProvider`` over the official ``openai`` SDK (the ``openai`` extra).

For users who already configure an ``openai.AsyncOpenAI`` or ``openai.AsyncAzureOpenAI``
(Azure deployments and Entra ID tokens, proxies, a custom ``http_client``, default
headers): the client makes the HTTP calls, this project does the rest as for
``OpenAICompatibleProvider``. There is one translation of the Chat Completions wire:
the body is ``_openai._wire_request``'s, sent as it is (``model`` and ``messages`` as
the SDK's arguments, every other field through ``extra_body``, so no field is renamed
or dropped by an SDK release that does not know it), and the answer's dict is read by
``_openai._response``. A stream is the SDK's stream, its bytes parsed by our SSE
parser into ``OpenAIStream``, so a streamed answer is the completed one.

Retries are ours (``RetryPolicy``, the same rules and ``Retry-After`` handling as the
httpx provider); the SDK's are turned off on a copy of the client
(``with_options(max_retries=0)``), so a call is never retried twice over. The client
given is the caller's: ``aclose`` leaves it open.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from little_workflow._extras import require
from little_workflow.harness.models._messages import ModelRequest, ModelResponse
from little_workflow.harness.models._openai import _response, _wire_request
from little_workflow.harness.models._openai_stream import OpenAIStream
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._retry import RetryPolicy, Sleep
from little_workflow.harness.models._sdk_client import SdkClient
from little_workflow.harness.models._sdk_errors import sdk_result
from little_workflow.harness.models._sdk_stream import Opened, SdkEvents
from little_workflow.harness.models._sse import iter_sse
from little_workflow.harness.models._streaming import drive

if TYPE_CHECKING:
    import openai

__all__ = ["OpenAISDKProvider"]


def _arguments(body: Mapping[str, object], *, stream: bool) -> dict[str, Any]:
    rest = {k: v for k, v in body.items() if k not in ("model", "messages")}
    arguments: dict[str, Any] = {
        "model": body["model"],
        "messages": body["messages"],
        "extra_body": rest,
    }
    if stream:
        arguments["stream"] = True
    return arguments


class OpenAISDKProvider:
    """A ``ModelProvider`` over an ``openai.AsyncOpenAI`` client (``kind`` ``openai``).

    ``client`` is any async client of the SDK (``AsyncOpenAI``, ``AsyncAzureOpenAI``)
    with its base URL, key, ``http_client`` and timeout as the caller configured them;
    without one, ``openai.AsyncOpenAI()`` is made (the SDK reads ``OPENAI_API_KEY`` and
    ``OPENAI_BASE_URL``) and closed by ``aclose``. Failed calls are retried here
    ``max_retries`` times as by ``OpenAICompatibleProvider`` (``backoff``,
    ``max_backoff``, ``sleep``); the client's own ``max_retries`` is ignored.
    ``max_tokens_param`` names the field the limit goes in.
    """

    kind: str = "openai"

    def __init__(
        self,
        client: openai.AsyncOpenAI | None = None,
        *,
        max_retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 60.0,
        sleep: Sleep = asyncio.sleep,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
    ) -> None:
        require("openai", "OpenAISDKProvider")
        import openai

        self._retries = RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_backoff, sleep=sleep
        )
        self._sdk = SdkClient(
            openai,
            client,
            owner="OpenAISDKProvider",
            provider=self.kind,
            path="/chat/completions",
            make=openai.AsyncOpenAI,
            sdk_error=openai.OpenAIError,
        )
        self.base_url = self._sdk.base_url
        self._max_tokens_param = max_tokens_param
        self._errors = self._sdk.errors
        self._events = SdkEvents(self._errors, self._retries, self._open_stream)

    def __repr__(self) -> str:
        return repr(self._sdk)

    def _read(self, data: dict[str, object], request: ModelRequest) -> ModelResponse:
        return self._sdk.read(_response, data, request, expected="a chat completion")

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """One Chat Completions call through the SDK, retried as configured."""
        arguments = _arguments(_wire_request(request, self._max_tokens_param), stream=False)

        async def attempt() -> object:
            return await self._sdk.calls.chat.completions.create(**arguments)

        answer = await self._retries.run(attempt, self._errors.failure_of)
        return self._read(sdk_result(answer, self._errors), request)

    async def _open_stream(self, body: Mapping[str, object]) -> Opened:
        stream = await self._sdk.calls.chat.completions.create(**_arguments(body, stream=True))
        response = stream.response
        media_type = response.headers.get("content-type", "").partition(";")[0].strip()
        if media_type.lower() != "text/event-stream":
            await stream.close()
            raise self._errors.error(
                f"HTTP {response.status_code} answered a streaming request with content-type "
                f"{media_type or 'none'}, not text/event-stream",
                status=response.status_code,
                retryable=False,
            )
        events = iter_sse(response.aiter_bytes(), provider=self.kind, strict=True)
        return Opened(events, stream.close)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """One streamed Chat Completions call: ``complete``'s answer, delta by delta.

        Sent with ``stream_options.include_usage``; retried until the first event, never
        after (as ``OpenAICompatibleProvider.stream``).
        """
        body = {
            **_wire_request(request, self._max_tokens_param),
            "stream_options": {"include_usage": True},
        }
        return self._read(await drive(self._events, body, OpenAIStream(), on_delta), request)

    async def aclose(self) -> None:
        """Close the client if this provider made it; idempotent."""
        await self._sdk.aclose()
