"""The ``ModelProvider`` protocol: one async call from a request to a response."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from little_workflow.harness.models._messages import ModelRequest, ModelResponse

__all__ = ["ModelProvider"]


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
