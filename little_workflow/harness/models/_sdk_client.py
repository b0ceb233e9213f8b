"""The setup both SDK providers share: the caller's client, its retry-less copy, its errors.

``OpenAISDKProvider`` and ``AnthropicSDKProvider`` differ in the wire they translate,
not in how they hold a client: the one given is the caller's (left open by ``aclose``),
or one is made from the environment (closed by ``aclose``); the calls go through a copy
made by ``with_options(max_retries=0)``, which shares the caller's connection pool, so
that ``RetryPolicy`` is the only one retrying; and every error is read by one
``SdkErrors`` that knows the keys the client holds, to redact them.

A base class for the two providers was rejected: the providers' methods have nothing
in common but these few lines, and composition keeps each provider readable alone.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._messages import ModelRequest, ModelResponse
from little_workflow.harness.models._sdk_errors import SdkErrors, client_secrets

__all__ = ["SdkClient"]


class SdkClient:
    """One provider's hold on an SDK client.

    ``sdk`` is the imported SDK module, ``client`` the caller's client or ``None`` to
    make one with ``make`` (a failure of the SDK's base error ``sdk_error``, such as a
    missing key, is a ``ConfigError`` naming ``owner``). ``path`` is the endpoint's path
    below the base URL, for error messages.
    """

    def __init__(
        self,
        sdk: ModuleType,
        client: Any,
        *,
        owner: str,
        provider: str,
        path: str,
        make: Callable[[], Any],
        sdk_error: type[Exception],
    ) -> None:
        self.owner = owner
        self.provider = provider
        self._owned = client is None
        if client is None:
            try:
                client = make()
            except sdk_error as exc:
                raise ConfigError(f"{owner} cannot make a client: {exc}") from exc
        self.given: Any = client
        # A copy sharing the caller's connection pool, with the SDK's retries off.
        self.calls: Any = client.with_options(max_retries=0)
        self.base_url = str(client.base_url).rstrip("/")
        self.errors = SdkErrors(
            sdk, provider=provider, url=f"{self.base_url}{path}", secrets=client_secrets(client)
        )

    def __repr__(self) -> str:
        return f"{self.owner}({type(self.given).__name__}, base_url={self.base_url!r})"

    def read(
        self,
        parse: Callable[[dict[str, object], ModelRequest], ModelResponse],
        data: dict[str, object],
        request: ModelRequest,
        *,
        expected: str,
    ) -> ModelResponse:
        """``parse(data, request)``; an answer it cannot read is a provider error.

        ``expected`` names what the answer should have been (``a chat completion``).
        Keys are redacted: the parser's message may quote the answer.
        """
        try:
            return parse(data, request)
        except (TypeError, ValueError, ValidationError) as exc:
            raise ModelProviderError(
                self.errors.redacted(
                    f"{self.provider} model call to {self.errors.url} answered something "
                    f"that is not {expected}: {exc}"
                ),
                provider=self.provider,
                status=200,
            ) from exc

    async def aclose(self) -> None:
        """Close the client if it was made here; idempotent."""
        if self._owned:
            self._owned = False
            await self.given.close()
