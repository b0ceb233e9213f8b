"""HTTP plumbing shared by the OpenAI-compatible and Anthropic providers.

One JSON ``POST`` with retries (``post``; ``stream`` for an answer sent as server-sent
events, retried only until its first event): exponential backoff on 408/409/429/5xx and
on a failed or dropped connection, honouring ``Retry-After`` (and OpenAI's ``retry-after-ms``) and
the ``x-should-retry`` header both vendors send. The sleep is injectable, so tests
check the backoff without waiting.

The API key is read once, when the provider is built, from the environment variable it
names (keys never come from workflow files). It lives in one private attribute and the
request headers; it is never formatted into a message, a ``repr`` or a log line, and any
copy of it in an error body (some servers echo the key they refused) is redacted.

No jitter is added to the backoff: one process rarely makes enough concurrent calls to
herd, a rate-limiting server says when to come back through ``Retry-After``, and a
deterministic schedule is what the tests pin.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from little_workflow.errors import ConfigError, ModelProviderError, shown
from little_workflow.harness.models._retry import RetryPolicy, Sleep
from little_workflow.harness.models._sse import DEFAULT_MAX_EVENT_BYTES, SseEvent, iter_sse

if TYPE_CHECKING:
    import httpx

__all__ = ["ErrorResponse", "JsonPoster", "Sleep", "read_api_key", "redact", "refusal"]

# 408 and 409 are what OpenAI's own client retries besides 429 (a request or lock timeout
# on their side); every 5xx is retried, 529 (Anthropic "overloaded") included.
_RETRYABLE_STATUSES = frozenset({408, 409, 429})
_MAX_REASON = 300
_REDACTED = "[redacted]"


class ErrorResponse(Protocol):
    """What the classification of a refused call reads: ``httpx``'s response, or the
    official SDKs' (they use ``httpx2``, whose response has the same shape)."""

    @property
    def status_code(self) -> int: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def text(self) -> str: ...
    @property
    def reason_phrase(self) -> str: ...
    def json(self) -> object: ...


def read_api_key(env_name: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The key in the environment variable ``env_name``; ``None`` if unset, empty or unnamed."""
    if not env_name:
        return None
    value = (os.environ if environ is None else environ).get(env_name, "").strip()
    return value or None


def redact(text: str, secret: str | None) -> str:
    """``text`` with every copy of ``secret`` replaced by ``[redacted]``."""
    if secret and secret in text:
        return text.replace(secret, _REDACTED)
    return text


def redact_all(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every copy of each of ``secrets`` replaced by ``[redacted]``."""
    for secret in secrets:
        text = redact(text, secret)
    return text


def _shorten(text: str, secrets: Iterable[str | None]) -> str:
    # Redacted before it is cut: a key straddling the cut would otherwise survive in part.
    text = " ".join(redact_all(text, secrets).split())
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 3] + "..."


def _reason(response: ErrorResponse, secrets: tuple[str | None, ...]) -> str:
    """A short reason from an error body: ``error.message`` in both vendors' shapes."""
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return _shorten(error["message"], secrets)
        if isinstance(error, str):  # Ollama and some proxies: {"error": "text"}
            return _shorten(error, secrets)
        if isinstance(data.get("message"), str):
            return _shorten(data["message"], secrets)
    text = response.text.strip()
    return _shorten(text, secrets) if text else response.reason_phrase or "no reason given"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    """The wait the server asked for, in seconds (not negative); ``None`` if none."""
    wait: float | None = None
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        try:
            wait = float(milliseconds) / 1000
        except ValueError:
            wait = None
    value = headers.get("retry-after")
    if wait is None and value is not None:
        try:
            wait = float(value)
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                return None
            wait = when.timestamp() - time.time()
    if wait is None or not math.isfinite(wait):
        return None
    return max(wait, 0.0)


def _error_kind(response: ErrorResponse) -> str | None:
    """``error.type`` or ``error.code`` of an error body, in either vendor's shape."""
    try:
        data = response.json()
    except (ValueError, UnicodeDecodeError):
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    for field in ("code", "type"):
        kind = error.get(field)
        if isinstance(kind, str) and kind in _KINDS:
            return kind
    return None


def key_hint(key_env: str | None, has_key: bool) -> str:
    """What a refused key's message advises, for a key read from ``key_env``."""
    if key_env and has_key:
        return f"check the API key in the environment variable {key_env}"
    if key_env:
        return f"the server wants an API key: set the environment variable {key_env}"
    return "the server wants an API key: name its environment variable in api_key_env"


def _hint(status: int, kind: str | None, on_key: str) -> str:
    if kind == "insufficient_quota":
        return "; the account's quota is spent: waiting will not help, check its billing"
    if status in (401, 403):
        return f"; {on_key}"
    if status >= 500:
        return "; the provider failed: try again later"
    return _HINTS.get(status, "")


def refusal(
    response: ErrorResponse,
    *,
    provider: str,
    url: str,
    secrets: Iterable[str | None],
    on_key: str,
) -> ModelProviderError:
    """The error for a call ``response`` refused: its kind, retryability and wait.

    The one classification of both wire formats' refusals, from the status, the error
    body and the headers, whichever client made the call (the httpx providers and the
    SDK adapters). ``on_key`` is the advice a 401 or 403 gives; ``secrets`` are
    redacted from the message.
    """
    secrets = tuple(secrets)
    status = response.status_code
    kind = _error_kind(response)
    rate_limited = (status == 429 and kind != "insufficient_quota") or kind in _RATE_LIMIT_KINDS
    retryable = (status in _RETRYABLE_STATUSES or status >= 500) and kind != "insufficient_quota"
    # Both vendors send x-should-retry to override the status-based rule.
    override = (response.headers.get("x-should-retry") or "").lower()
    if override in ("true", "false"):
        retryable = override == "true"
    reason = _reason(response, secrets)
    text = f"HTTP {status}: {reason}{_hint(status, kind, on_key)}"
    return ModelProviderError(
        redact_all(f"{provider} model call to {url} failed: {text}", secrets),
        provider=provider,
        status=status,
        retryable=retryable,
        rate_limited=rate_limited,
        retry_after=_retry_after(response.headers),
    )


class _Refused(Exception):
    """An attempt's answer failed: the error to raise (its ``retry_after``, the wait)."""

    def __init__(self, failure: ModelProviderError) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Opened(NamedTuple):
    """A stream that answered 2xx with an event stream, and its first event (if any)."""

    response: httpx.Response
    events: AsyncGenerator[SseEvent, None]
    first: SseEvent | None


_T = TypeVar("_T")

#: Error kinds that decide how a refusal is classified: Anthropic's rate-limit type
#: (also sent inside a stream, with no 429 to go by) and OpenAI's spent quota, which
#: comes as a 429 but is not cured by waiting.
_RATE_LIMIT_KINDS = frozenset({"rate_limit_error", "rate_limit_exceeded"})
_KINDS = _RATE_LIMIT_KINDS | {"insufficient_quota"}

_HINTS = {
    404: "; check the base URL and the model name",
    429: "; the provider is rate limiting: slow down, or raise the limit",
}


class JsonPoster:
    """POSTs JSON to one URL with retries; owns its ``httpx.AsyncClient`` unless given one."""

    def __init__(
        self,
        *,
        provider: str,
        url: str,
        headers: Mapping[str, str],
        secret: str | None,
        key_env: str | None,
        timeout: float,
        max_retries: int,
        backoff: float,
        max_backoff: float,
        sleep: Sleep,
        client: httpx.AsyncClient | None,
    ) -> None:
        if max_retries < 0:
            raise ConfigError(f"max_retries must be zero or more, not {max_retries!r}")
        if not (timeout > 0 and backoff >= 0 and max_backoff >= 0):
            raise ConfigError("timeout must be positive, backoff and max_backoff not negative")
        self.provider = provider
        self.url = url
        self._headers = dict(headers)
        self._secret = secret
        self._key_env = key_env
        self._timeout = timeout
        self.max_retries = max_retries
        self._sleep = sleep  # read by tests of the backoff
        self._retries = RetryPolicy(
            max_retries=max_retries, backoff=backoff, max_backoff=max_backoff, sleep=sleep
        )
        self._client = client
        # A client made here is made lazily, so a provider that is never called holds
        # no connection pool and needs no closing.
        self._owns_client = client is None

    def __repr__(self) -> str:
        return f"JsonPoster(provider={self.provider!r}, url={self.url!r})"

    def redacted(self, text: str) -> str:
        """``text`` with any copy of this poster's key replaced by ``[redacted]``."""
        return redact(text, self._secret)

    def _error(
        self,
        text: str,
        *,
        status: int | None,
        retryable: bool,
        rate_limited: bool = False,
        retry_after: float | None = None,
    ) -> ModelProviderError:
        message = f"{self.provider} model call to {self.url} failed: {text}"
        return ModelProviderError(
            redact(message, self._secret),
            provider=self.provider,
            status=status,
            retryable=retryable,
            rate_limited=rate_limited,
            retry_after=retry_after,
        )

    def _http_error(self, response: httpx.Response) -> ModelProviderError:
        return refusal(
            response,
            provider=self.provider,
            url=self.url,
            secrets=(self._secret,),
            on_key=key_hint(self._key_env, self._secret is not None),
        )

    def _client_for_call(self) -> httpx.AsyncClient:
        # Imported here: httpx (and the CLI libraries it pulls in) would add tens of
        # milliseconds to every ``import little_workflow``, most of which never call a model.
        import httpx

        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self._timeout))
        return self._client

    def _refused(self, response: httpx.Response) -> _Refused:
        return _Refused(self._http_error(response))

    async def _with_retries(self, attempt: Callable[[httpx.AsyncClient], Awaitable[_T]]) -> _T:
        """``attempt``'s result, called again after a backoff while its failure is retryable.

        ``attempt`` raises ``_Refused`` for an answer that failed (maybe retryably); a
        transport error is retried as such; any other error ends the call at once.
        """
        client = self._client_for_call()
        return await self._retries.run(lambda: attempt(client), self._failure_of)

    def _failure_of(self, exc: Exception) -> tuple[ModelProviderError, BaseException | None] | None:
        import httpx

        if isinstance(exc, httpx.UnsupportedProtocol | httpx.InvalidURL):
            failure = self._error(f"the URL is not usable: {exc}", status=None, retryable=False)
            return failure, exc
        if isinstance(exc, httpx.TransportError):
            # A timeout or a dropped connection: the server may never have seen the
            # request, or may have answered into the void; either way, asking again
            # is what the caller would do.
            return self._transport_error(exc), exc
        if isinstance(exc, _Refused):
            return exc.failure, None
        return None

    def _transport_error(self, exc: Exception) -> ModelProviderError:
        return self._error(
            f"{type(exc).__name__}: {str(exc) or 'connection failed'}",
            status=None,
            retryable=True,
        )

    def _content(self, body: Mapping[str, object]) -> bytes:
        return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")

    async def post(self, body: Mapping[str, object]) -> dict[str, object]:
        """The JSON object the server answered; ``ModelProviderError`` once retries are spent."""
        content = self._content(body)

        async def attempt(client: httpx.AsyncClient) -> dict[str, object]:
            response = await client.post(self.url, content=content, headers=self._headers)
            if not response.is_success:
                raise self._refused(response)
            return self._parse(response)

        return await self._with_retries(attempt)

    async def stream(
        self, body: Mapping[str, object], *, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    ) -> AsyncGenerator[SseEvent, None]:
        """The server-sent events the server answers ``body`` with, each as it arrives.

        Retried like ``post``, but only until the first event is yielded: after that the
        caller has seen part of the answer, so a failure raises a retryable
        ``ModelProviderError`` saying how many events came before the cut, and asking
        again is the caller's decision. The connection is closed when the stream ends,
        fails, or is closed early: iterate it inside ``contextlib.aclosing`` so that a
        ``break`` closes it at once rather than when the generator is collected.
        """
        import httpx

        content = self._content(body)
        headers = {**self._headers, "accept": "text/event-stream"}

        async def attempt(client: httpx.AsyncClient) -> _Opened:
            request = client.build_request("POST", self.url, content=content, headers=headers)
            response = await client.send(request, stream=True)
            events: AsyncGenerator[SseEvent, None] | None = None
            try:
                if not response.is_success:
                    await response.aread()
                    raise self._refused(response)
                media_type = response.headers.get("content-type", "").partition(";")[0].strip()
                if media_type.lower() != "text/event-stream":
                    raise self._error(
                        f"HTTP {response.status_code} answered a streaming request with "
                        f"content-type {shown(media_type) if media_type else 'none'}, "
                        "not text/event-stream",
                        status=response.status_code,
                        retryable=False,
                    )
                events = iter_sse(
                    response.aiter_bytes(),
                    max_event_bytes=max_event_bytes,
                    provider=self.provider,
                    strict=True,
                )
                try:
                    first = await anext(events, None)
                except ModelProviderError as exc:
                    # Nothing was yielded yet, so even a cut is still safe to retry.
                    raise _Refused(self._stream_error(exc, 0)) from exc
            except BaseException:
                if events is not None:
                    await events.aclose()
                await response.aclose()
                raise
            return _Opened(response, events, first)

        opened = await self._with_retries(attempt)
        count = 0
        try:
            if opened.first is None:
                return
            yield opened.first
            count = 1
            try:
                async for event in opened.events:
                    yield event
                    count += 1
            except httpx.TransportError as exc:
                raise self._error(
                    f"the stream was cut after {count} events: "
                    f"{type(exc).__name__}: {str(exc) or 'connection lost'}",
                    status=opened.response.status_code,
                    retryable=True,
                ) from exc
            except ModelProviderError as exc:
                raise self._stream_error(exc, count) from exc
        finally:
            await opened.events.aclose()
            await opened.response.aclose()

    def _stream_error(self, exc: ModelProviderError, count: int) -> ModelProviderError:
        # The parser's errors are retryable when the stream ended inside an event (a cut)
        # and not when an event outgrew its bound (the same answer would do it again).
        what = "the stream was cut" if exc.retryable else "the stream failed"
        return self._error(
            f"{what} after {count} events: {exc.message}", status=None, retryable=exc.retryable
        )

    def _parse(self, response: httpx.Response) -> dict[str, object]:
        try:
            data = response.json()
        except (ValueError, UnicodeDecodeError):
            data = None
        if not isinstance(data, dict):
            raise self._error(
                f"HTTP {response.status_code} with a body that is not a JSON object: "
                f"{_shorten(response.text, (self._secret,)) or 'empty'}",
                status=response.status_code,
                retryable=False,
            )
        return data

    async def aclose(self) -> None:
        """Close the HTTP client if this poster made it; idempotent."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
