"""A provider of one's own: ``BudgetProvider`` stops paying for tokens past a budget.

It wraps any other ``ModelProvider`` (the OpenAI-compatible or Anthropic client, an SDK
adapter, a provider of yours) and refuses a call once the tokens its calls consumed
reach ``max_tokens``. It shows everything a provider has to do:

* ``kind``: the name capability manifests record; a run whose agent session started on
  one kind refuses to resume on another (``CapabilityDriftError``). A wrapper names
  itself and what it wraps, so swapping the wrapped provider counts as a change.
* ``complete``: one call; a failure is ``ModelProviderError`` with the status when there
  was one and ``retryable`` saying whether the same request may succeed later.
* ``stream`` (optional): the same answer, handed out piece by piece to ``on_delta``;
  ``call_model`` uses it when someone watches and the provider has it.
* ``aclose``: release what the provider holds.

The budget counts what *this process* paid: a resumed run replays its committed model
calls from the log without calling any provider, so a replayed call costs nothing and
counts nothing, which is exactly what a budget for money should do. The check is made
before each call, so the call that crosses the budget is the last one made.
"""

from __future__ import annotations

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import (
    DeltaSink,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    call_model,
)

__all__ = ["BudgetProvider"]


class BudgetProvider:
    """``inner``, until its calls have consumed ``max_tokens`` (input plus output)."""

    def __init__(self, inner: ModelProvider, *, max_tokens: int) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, not {max_tokens!r}")
        self.inner = inner
        self.max_tokens = max_tokens
        self.spent = 0
        self.kind = f"budget:{inner.kind}"

    def _check(self) -> None:
        if self.spent >= self.max_tokens:
            # Not retryable: asking again will not make the budget larger.
            raise ModelProviderError(
                f"the token budget of {self.max_tokens} is spent ({self.spent} used); "
                "raise max_tokens, or resume the run later with a new budget",
                provider=self.kind,
            )

    def _count(self, response: ModelResponse) -> ModelResponse:
        self.spent += response.usage.input_tokens + response.usage.output_tokens
        return response

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The inner provider's answer, if the budget is not spent."""
        self._check()
        return self._count(await self.inner.complete(request))

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """Streamed when the inner provider streams, else its complete answer at once."""
        self._check()
        return self._count(await call_model(self.inner, request, on_delta))

    async def aclose(self) -> None:
        """Close the inner provider."""
        await self.inner.aclose()
