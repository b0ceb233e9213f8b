"""The official SDKs' exceptions, as the ``ModelProviderError`` the httpx providers raise.

Both SDKs (generated from one template) raise ``APIStatusError`` for a refused call,
with the response already read; ``APIConnectionError`` (``APITimeoutError`` is one) for
a call that got no answer; and, reading a stream, the HTTP library's own transport
errors. A refusal is classified by ``_http.refusal`` from the response's status, body
and headers, exactly as the httpx providers classify theirs, so a 429, its
``Retry-After``, a spent quota or an ``x-should-retry`` mean the same whichever client
made the call. The SDK's message is not used: it quotes the error body whole, which
may quote the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models._http import redact_all, refusal

__all__ = ["SdkErrors", "client_secrets", "sdk_result"]

ON_KEY = "check the API key the SDK client was given"


def _transport_errors() -> tuple[type[Exception], ...]:
    # What a stream read raises when the connection drops: httpx2's (the SDKs' HTTP
    # library), or httpx's when the user handed the openai SDK an httpx client.
    import httpx

    found: list[type[Exception]] = [httpx.TransportError]
    try:
        import httpx2
    except ImportError:  # an SDK release on httpx again
        pass
    else:
        found.append(httpx2.TransportError)
    return tuple(found)


def _url_of(exc: object, default: str) -> str:
    request = getattr(exc, "request", None)
    url = getattr(request, "url", None)
    # Without the query: Azure's holds only api-version, others may hold more.
    return str(url).split("?", 1)[0] if url is not None else default


class SdkErrors:
    """Classifies one SDK's exceptions for one provider (``sdk``: the imported module)."""

    def __init__(self, sdk: ModuleType, *, provider: str, url: str, secrets: Sequence[str]):
        self._sdk: Any = sdk
        self.provider = provider
        self.url = url
        self.secrets = tuple(secrets)
        self._transport = _transport_errors()

    def redacted(self, text: str) -> str:
        """``text`` with every key the client holds replaced by ``[redacted]``."""
        return redact_all(text, self.secrets)

    def error(
        self, text: str, *, status: int | None, retryable: bool, url: str | None = None
    ) -> ModelProviderError:
        """A ``ModelProviderError`` for this provider saying ``text``, keys redacted."""
        return ModelProviderError(
            self.redacted(f"{self.provider} model call to {url or self.url} failed: {text}"),
            provider=self.provider,
            status=status,
            retryable=retryable,
        )

    def transport(self, exc: BaseException, *, after: int | None = None) -> ModelProviderError:
        """A call (or, ``after`` some events, a stream) that lost its connection: retryable."""
        cause = exc.__cause__ if isinstance(exc, self._sdk.APIConnectionError) else None
        shown = cause if cause is not None else exc
        what = f"{type(shown).__name__}: {str(shown) or 'connection failed'}"
        if after is not None:
            what = f"the stream was cut after {after} events: {what}"
        return self.error(what, status=None, retryable=True, url=_url_of(exc, self.url))

    def is_status(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the SDK's error for an answer (refused, or reported in a stream)."""
        return isinstance(exc, self._sdk.APIStatusError)

    def is_transport(self, exc: BaseException) -> bool:
        """Whether ``exc`` says the call got no (whole) answer."""
        return isinstance(exc, (self._sdk.APIConnectionError, *self._transport))

    def failure_of(self, exc: Exception) -> tuple[ModelProviderError, BaseException | None] | None:
        """``exc`` as a failure of the call, for ``RetryPolicy.run``; ``None``: not one."""
        if isinstance(exc, self._sdk.APIResponseValidationError):
            failure = self.error(
                "it answered something the SDK could not read",
                status=exc.status_code,
                retryable=False,
                url=_url_of(exc, self.url),
            )
            return failure, None
        response: Any = getattr(exc, "response", None)
        if self.is_status(exc) and response is not None and response.status_code >= 400:
            failure = refusal(
                response,
                provider=self.provider,
                url=_url_of(exc, self.url),
                secrets=self.secrets,
                on_key=ON_KEY,
            )
            # Not chained: the SDK's exception quotes the error body, and so any key in it.
            return failure, None
        if self.is_transport(exc):
            return self.transport(exc), exc
        return None


#: Where the SDKs' clients hold what a message must not show: the API key, Anthropic's
#: ``auth_token``, Vertex's OAuth ``access_token``, and Bedrock's AWS credentials (the
#: access key id too: it names the account, and a server may quote it back).
_SECRETS = (
    "api_key",
    "auth_token",
    "access_token",
    "aws_access_key",
    "aws_secret_key",
    "aws_session_token",
)


def client_secrets(client: object) -> list[str]:
    """The keys an SDK client holds (see ``_SECRETS``), to redact."""
    found = (getattr(client, name, None) for name in _SECRETS)
    return [value for value in found if isinstance(value, str) and value]


def sdk_result(answer: object, errors: SdkErrors) -> dict[str, object]:
    """The SDK's answer model as the JSON object the API sent, for the wire's parser.

    ``to_dict`` keeps the fields as the server sent them, those this SDK release does
    not know included (``reasoning_content``); an answer that was not a JSON object
    comes back from the SDK as text, which no parser can read.
    """
    to_dict = getattr(answer, "to_dict", None)
    if to_dict is None:
        shown = " ".join(str(answer).split())[:200]
        raise errors.error(
            f"it answered with a body that is not a JSON object: {shown or 'empty'}",
            status=200,
            retryable=False,
        )
    data: dict[str, object] = to_dict(mode="json")
    return data
