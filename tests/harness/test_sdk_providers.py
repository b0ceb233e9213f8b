"""The providers over the official SDKs: the conformance suite, then what only they do.

Each provider is built over an SDK client the test configures, as a user would, pointed
at a local ``FakeModelServer``; the fake records every request, so retries are counted
on the server, not in the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from little_workflow.harness.models import (
    AnthropicSDKProvider,
    Message,
    ModelProvider,
    ModelRequest,
    OpenAISDKProvider,
)
from little_workflow.testing.fake_models import FakeModelServer
from little_workflow.testing.provider_conformance import (
    CONFORMANCE_KEY,
    ModelProviderConformance,
    ProviderUnderTest,
    ScriptSource,
)

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

KINDS = ("openai-sdk", "anthropic-sdk")


def sdk_provider(kind: str, server: FakeModelServer, key: str, **options: Any) -> ModelProvider:
    """A provider of ``kind`` over a default-configured SDK client aimed at ``server``.

    The client keeps the SDK's default ``max_retries`` (2): the provider must turn it off.
    """
    if kind == "openai-sdk":
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=key)
        return OpenAISDKProvider(client, **options)
    client = anthropic.AsyncAnthropic(base_url=server.url, api_key=key)
    return AnthropicSDKProvider(client, **options)


class SdkProviders:
    """Opens SDK providers behind fake servers; ``aclose`` closes them all."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._opened: list[tuple[ProviderUnderTest, Any]] = []

    async def __call__(
        self, script: ScriptSource, *, max_retries: int = 2, client_key: str | None = None
    ) -> ProviderUnderTest:
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        server = FakeModelServer(script, api_key=CONFORMANCE_KEY, echo_credentials=True)
        server.start()
        key = client_key or CONFORMANCE_KEY
        provider = sdk_provider(self.kind, server, key, max_retries=max_retries, sleep=sleep)
        opened = ProviderUnderTest(provider=provider, server=server, api_key=key, sleeps=sleeps)
        self._opened.append((opened, provider._given))  # type: ignore[attr-defined]
        return opened

    async def aclose(self) -> None:
        for opened, client in self._opened:
            await opened.provider.aclose()
            await client.close()  # the caller's client: the provider leaves it open
            if opened.server is not None:
                await asyncio.to_thread(opened.server.stop)
        self._opened.clear()


class TestSdkProviderConformance(ModelProviderConformance):
    @pytest.fixture(params=KINDS)
    async def open_provider(self, request: pytest.FixtureRequest) -> AsyncIterator[SdkProviders]:
        providers = SdkProviders(request.param)
        yield providers
        await providers.aclose()


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest(model="sdk-model", messages=(Message(role="user", content=text),))
