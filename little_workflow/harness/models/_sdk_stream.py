"""A streamed answer read through an official SDK, as the events ``_streaming.drive`` reads.

``SdkEvents`` is an ``EventSource``, like ``JsonPoster``: retried with our policy until
the first event, then each event as it arrives; a cut, an error event or an event the
parser refuses after that is raised as the ``ModelProviderError`` the httpx providers
raise, never retried here. Each adapter says how to open its stream (``OpenStream``):
the OpenAI adapter reads the SDK stream's bytes with our own SSE parser (the SDK drops
``[DONE]``, which tells an answer that ended from one that was cut); the Anthropic
adapter reads the SDK's decoded events, since Bedrock's are not SSE on the wire.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NamedTuple

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models._retry import RetryPolicy
from little_workflow.harness.models._sdk_errors import SdkErrors
from little_workflow.harness.models._sse import SseEvent
from little_workflow.harness.models._streaming import error_event

__all__ = ["OpenStream", "SdkEvents"]


class Opened(NamedTuple):
    """An open stream: its events, and how to close it (idempotent)."""

    events: AsyncIterator[SseEvent]
    close: Callable[[], Awaitable[None]]


#: Opens the stream answering a body (the SDK call); raises what the SDK raises.
OpenStream = Callable[[Mapping[str, object]], Awaitable[Opened]]


class _Reported(Exception):
    """The stream's first event was an error event: raised as it is, not retried."""

    def __init__(self, failure: ModelProviderError) -> None:
        super().__init__(failure.message)
        self.failure = failure


class _Started(NamedTuple):
    opened: Opened
    first: SseEvent | None


async def _close(events: AsyncIterator[SseEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()


class SdkEvents:
    """The events of one SDK adapter's streamed calls (see the module docstring)."""

    def __init__(self, errors: SdkErrors, retries: RetryPolicy, open_stream: OpenStream) -> None:
        self._errors = errors
        self._retries = retries
        self._open = open_stream
        self.provider = errors.provider
        self.url = errors.url

    def redacted(self, text: str) -> str:
        """``text`` with the client's keys replaced by ``[redacted]``."""
        return self._errors.redacted(text)

    def _after(self, exc: BaseException, count: int) -> BaseException:
        """What ``exc``, raised reading event ``count + 1``, is raised as."""
        errors = self._errors
        if isinstance(exc, ModelProviderError):  # our SSE parser: a cut or an outsized event
            what = "the stream was cut" if exc.retryable else "the stream failed"
            return errors.error(
                f"{what} after {count} events: {exc.message}", status=None, retryable=exc.retryable
            )
        if errors.is_status(exc):  # an error event, which the SDK raises as a refusal
            body: Any = getattr(exc, "body", None)
            error = body.get("error") if isinstance(body, dict) else body
            return error_event(self.provider, self.url, error, count, self.redacted)
        if errors.is_transport(exc):
            return errors.transport(exc, after=count)
        return exc

    def _failure_of(self, exc: Exception) -> tuple[ModelProviderError, BaseException | None] | None:
        if isinstance(exc, ModelProviderError):
            return exc, None
        return self._errors.failure_of(exc)

    async def _start(self, body: Mapping[str, object]) -> _Started:
        opened = await self._open(body)
        try:
            first = await anext(opened.events, None)
        except BaseException as exc:
            await _close(opened.events)
            await opened.close()
            if not isinstance(exc, Exception):
                raise
            failure = self._after(exc, 0)
            if isinstance(failure, ModelProviderError) and self._errors.is_status(exc):
                raise _Reported(failure) from None
            if failure is exc:
                raise
            # A cut before any event is still safe to ask again (``_failure_of``).
            raise failure from (exc if self._errors.is_transport(exc) else None)
        return _Started(opened, first)

    async def stream(self, body: Mapping[str, object]) -> AsyncGenerator[SseEvent, None]:
        """The events answering ``body``; iterate inside ``contextlib.aclosing``."""
        try:
            started = await self._retries.run(lambda: self._start(body), self._failure_of)
        except _Reported as reported:
            raise reported.failure from None
        events, count = started.opened.events, 0
        try:
            if started.first is None:
                return
            yield started.first
            count = 1
            try:
                async for event in events:
                    yield event
                    count += 1
            except Exception as exc:
                failure = self._after(exc, count)
                if failure is exc:
                    raise
                raise failure from (exc if self._errors.is_transport(exc) else None)
        finally:
            await _close(events)
            await started.opened.close()
