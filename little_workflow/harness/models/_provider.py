"""The ``ModelProvider`` protocol: one async call from a request to a response.

Streaming is optional: a provider that can stream also has ``stream(request, on_delta)``
(``StreamingModelProvider``), which hands each piece of the answer to ``on_delta`` as it
arrives and returns the same complete ``ModelResponse`` that ``complete`` would.
``call_model`` is the one place that chooses between the two.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

from little_workflow.harness.models._messages import ModelDelta, ModelRequest, ModelResponse

__all__ = ["DeltaSink", "ModelProvider", "StreamingModelProvider", "call_model"]

#: Receives the pieces of a streamed answer; it must not raise (a failing watcher must
#: not fail the call) and should return quickly.
DeltaSink = Callable[[ModelDelta], Awaitable[None]]


@runtime_checkable
class ModelProvider(Protocol):
    """Turns a ``ModelRequest`` into a ``ModelResponse``; one implementation per wire format.

    ``kind`` names the implementation in capability manifests (``openai``,
    ``anthropic``, ``scripted``). Errors are ``ModelProviderError`` (transport, HTTP
    status, malformed answer) with the status and a short reason, never the API key.
    """

    kind: str

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Make the call and return the model's answer."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class StreamingModelProvider(ModelProvider, Protocol):
    """A ``ModelProvider`` that can also stream its answer."""

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Make the call, handing each delta to ``on_delta``; the complete answer.

        A failure before the first delta is retried like ``complete``'s; once deltas
        have been handed out, a failure is raised (the caller's durable unit re-issues
        the whole call, and watchers see it start again).
        """
        ...


async def call_model(
    provider: ModelProvider, request: ModelRequest, on_delta: DeltaSink | None = None
) -> ModelResponse:
    """``provider.stream`` when there is someone to stream to and it can; else ``complete``."""
    stream = getattr(provider, "stream", None) if on_delta is not None else None
    if stream is not None and on_delta is not None:
        response: ModelResponse = await stream(request, on_delta)
        return response
    return await provider.complete(request)
