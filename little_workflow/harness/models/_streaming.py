"""What the two streaming providers share: a guarded delta sink and stream errors.

Each wire format has its accumulator (``_openai_stream``, ``_anthropic_stream``) that
rebuilds, from the events, the answer body the API would have sent without streaming;
the provider reads that body with the very code ``complete`` uses, so a streamed answer
is the ``ModelResponse`` a completed call would have given.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Literal, Protocol

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models._messages import (
    ModelDelta,
    ModelResponse,
    ReasoningPart,
    TextPart,
)
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._sse import SseEvent

__all__ = [
    "Accumulator",
    "EventSource",
    "GuardedSink",
    "MalformedStream",
    "ReportedError",
    "deltas_of",
    "drive",
    "error_event",
    "parse_data",
    "unfinished",
]

logger = logging.getLogger("little_workflow.harness.models")

_RETRYABLE = frozenset({408, 409, 429})

#: The status an error event's ``type`` stands for (both vendors' names).
_ERROR_STATUSES = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "rate_limit_exceeded": 429,
    "requests": 429,
    "tokens": 429,
    "api_error": 500,
    "server_error": 500,
    "overloaded_error": 529,
    # Bedrock's exceptions inside a stream (the anthropic SDK passes on their names).
    "validationException": 400,
    "modelTimeoutException": 408,
    "throttlingException": 429,
    "internalServerException": 500,
    "modelStreamErrorException": 500,
    "serviceUnavailableException": 503,
}


class MalformedStream(ValueError):
    """An event that is not what the wire format says; the provider names the call."""


class GuardedSink:
    """``on_delta``, which cannot fail the call: an ``Exception`` it raises is logged.

    Only the first failure is logged with its traceback, the later ones are counted:
    a broken watcher of a long answer would otherwise log once per token.
    ``BaseException`` (a cancellation, an interrupt) passes through.
    """

    def __init__(self, on_delta: DeltaSink, provider: str) -> None:
        self._on_delta = on_delta
        self._provider = provider
        self.failures = 0

    async def __call__(self, delta: ModelDelta) -> None:
        try:
            await self._on_delta(delta)
        except Exception:
            self.failures += 1
            if self.failures == 1:
                logger.exception(
                    "the delta sink of a streamed %s model call raised; the call goes on "
                    "without it seeing this delta",
                    self._provider,
                )

    def close(self) -> None:
        """Log how many deltas the sink failed on, past the first."""
        if self.failures > 1:
            logger.warning(
                "the delta sink of a streamed %s model call raised %d times in all",
                self._provider,
                self.failures,
            )


def error_event(
    provider: str, url: str, error: object, count: int, redacted: Callable[[str], str]
) -> ModelProviderError:
    """The error a stream reported in an event (``{"type": ..., "message": ...}``).

    Its ``type`` gives the status, and so whether asking again may help: an overloaded
    or failing server, yes; a refused request, no. ``redacted`` takes the key out.
    """
    kind = message = None
    if isinstance(error, dict):
        kind, message = error.get("type"), error.get("message")
        if not isinstance(kind, str) or kind not in _ERROR_STATUSES:
            kind = error.get("code") if isinstance(error.get("code"), str) else kind
    status = _ERROR_STATUSES.get(kind) if isinstance(kind, str) else None
    reason = message if isinstance(message, str) and message else "no reason given"
    named = f"{kind}: " if isinstance(kind, str) else ""
    return ModelProviderError(
        redacted(
            f"{provider} model call to {url} failed: the stream reported an error after "
            f"{count} events: {named}{' '.join(reason.split())[:300]}"
        ),
        provider=provider,
        status=status,
        retryable=status is not None and (status in _RETRYABLE or status >= 500),
    )


def unfinished(provider: str, url: str, count: int, missing: str) -> ModelProviderError:
    """A stream that ended, cleanly, before its last event: a cut, worth another call."""
    return ModelProviderError(
        f"{provider} model call to {url} failed: the stream ended after {count} events "
        f"without {missing}",
        provider=provider,
        status=None,
        retryable=True,
    )


class ReportedError(Exception):
    """The stream sent an error event; ``error`` is its ``error`` object."""

    def __init__(self, error: object) -> None:
        super().__init__("the stream reported an error")
        self.error = error


class Accumulator(Protocol):
    """Rebuilds one answer from its events: one per call, fed every event in order."""

    #: True once the stream's last event came (``[DONE]``, ``message_stop``).
    done: bool
    #: What a stream that ends unfinished lacks, for the error saying so.
    missing: str

    def feed(self, event: SseEvent) -> list[ModelDelta]:
        """The deltas of ``event``; ``MalformedStream`` or ``ReportedError``."""
        ...

    def body(self) -> dict[str, object]:
        """The answer as the API would have sent it whole, without streaming."""
        ...


class EventSource(Protocol):
    """Where a streamed answer's events come from: ``JsonPoster``, or an SDK adapter's.

    ``stream`` retries until its first event and raises ``ModelProviderError`` after
    (a cut, retryable); ``redacted`` takes the keys out of a message.
    """

    provider: str
    url: str

    def stream(self, body: Mapping[str, object]) -> AsyncGenerator[SseEvent, None]:
        """The events answering ``body``, each as it arrives."""
        ...

    def redacted(self, text: str) -> str:
        """``text`` with the keys replaced by ``[redacted]``."""
        ...


def parse_data(event: SseEvent) -> dict[str, object]:
    """``event``'s data as a JSON object; ``MalformedStream`` when it is not one."""
    try:
        data = json.loads(event.data)
    except ValueError:
        shown = event.data if len(event.data) <= 80 else event.data[:77] + "..."
        raise MalformedStream(f"its data is not JSON: {shown!r}") from None
    if not isinstance(data, dict):
        raise MalformedStream(f"its data is a JSON {type(data).__name__}, not an object")
    return data


async def drive(
    poster: EventSource,
    body: Mapping[str, object],
    accumulator: Accumulator,
    on_delta: DeltaSink,
) -> dict[str, object]:
    """Stream ``body``'s answer through ``accumulator``, handing deltas to ``on_delta``.

    The answer's whole body once the stream's last event came; a ``ModelProviderError``
    for a malformed event (not retryable: the server broke the format), an error event
    (retryable as its type says) or a stream that ended early (retryable). Retries
    before the first event are the poster's; none after it.
    """
    sink = GuardedSink(on_delta, poster.provider)
    count = 0
    try:
        async with contextlib.aclosing(poster.stream(body)) as events:
            async for event in events:
                count += 1
                try:
                    deltas = accumulator.feed(event)
                except ReportedError as exc:
                    raise error_event(
                        poster.provider, poster.url, exc.error, count - 1, poster.redacted
                    ) from None
                except MalformedStream as exc:
                    raise ModelProviderError(
                        poster.redacted(
                            f"{poster.provider} model call to {poster.url} streamed a malformed "
                            f"event (event {count}, {event.event!r}): {exc}"
                        ),
                        provider=poster.provider,
                        status=200,
                        retryable=False,
                    ) from None
                for delta in deltas:
                    await sink(delta)
                if accumulator.done:
                    break
    finally:
        sink.close()
    if not accumulator.done:
        raise unfinished(poster.provider, poster.url, count, accumulator.missing)
    return accumulator.body()


_WORD_START = re.compile(r"(?<=\s)(?=\S)")


def deltas_of(response: ModelResponse) -> list[ModelDelta]:
    """The deltas a stream of ``response`` would hand out: for a provider with no stream.

    Reasoning and text a word at a time, in the order of the parts; then each tool call,
    its id and name first, its arguments' JSON text after.
    """
    deltas: list[ModelDelta] = []
    for part in response.message.parts:
        if isinstance(part, ReasoningPart | TextPart):
            kind: Literal["text", "reasoning"] = (
                "reasoning" if isinstance(part, ReasoningPart) else "text"
            )
            deltas.extend(
                ModelDelta(kind=kind, text=word) for word in _WORD_START.split(part.text) if word
            )
    for index, call in enumerate(response.message.tool_calls):
        deltas.append(
            ModelDelta(kind="tool_call", index=index, tool_call_id=call.id, name=call.name)
        )
        if call.arguments:
            arguments = json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":"))
            deltas.append(ModelDelta(kind="tool_call", index=index, text=arguments))
    return deltas
