"""The worked example of a provider of one's own (docs/models.md) passes the conformance
suite unchanged, over a real provider and fake server, and enforces its budget."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from examples.custom_provider.budget import BudgetProvider
from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import Message, ModelRequest, ScriptedProvider
from little_workflow.testing.provider_conformance import (
    BuiltinProviders,
    ModelProviderConformance,
    ProviderUnderTest,
    ScriptSource,
)


class BudgetOver:
    """Opens a builtin provider of ``kind`` and wraps it in a generous budget."""

    def __init__(self, kind: str) -> None:
        self.inner = BuiltinProviders(kind)

    async def __call__(
        self, script: ScriptSource, *, max_retries: int = 2, client_key: str | None = None
    ) -> ProviderUnderTest:
        opened = await self.inner(script, max_retries=max_retries, client_key=client_key)
        opened.provider = BudgetProvider(opened.provider, max_tokens=10**9)
        return opened

    async def aclose(self) -> None:
        await self.inner.aclose()


class TestBudgetProviderConformance(ModelProviderConformance):
    @pytest.fixture(params=BuiltinProviders.KINDS)
    async def open_provider(self, request: pytest.FixtureRequest) -> AsyncIterator[BudgetOver]:
        providers = BudgetOver(request.param)
        yield providers
        await providers.aclose()


def _request() -> ModelRequest:
    return ModelRequest(model="m", messages=(Message(role="user", content="hi"),))


async def test_the_call_that_crosses_the_budget_is_the_last() -> None:
    reply = {"message": {"content": "ok"}, "usage": {"input_tokens": 30, "output_tokens": 20}}
    inner = ScriptedProvider([reply, reply, reply])
    provider = BudgetProvider(inner, max_tokens=80)
    assert (await provider.complete(_request())).message.text == "ok"
    assert provider.spent == 50
    assert (await provider.complete(_request())).message.text == "ok"
    assert provider.spent == 100
    with pytest.raises(ModelProviderError, match="budget of 80 is spent") as raised:
        await provider.complete(_request())
    assert raised.value.retryable is False
    assert provider.kind == "budget:scripted"


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        BudgetProvider(ScriptedProvider(["x"]), max_tokens=0)
