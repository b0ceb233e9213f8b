"""The conformance suite every ``ModelProvider`` must pass, unchanged.

Subclass ``ModelProviderConformance`` in a test module and provide one fixture,
``open_provider``: an async callable ``(script, *, max_retries=2, client_key=None) ->
ProviderUnderTest`` that builds the provider answering from ``script`` (a ``Script``'s
replies or function), behind a ``FakeModelServer`` when it has a transport, and closes
everything at teardown. ``client_key`` makes the provider use a key other than the one
the server requires. ``BuiltinProviders`` does this for the three built-in providers::

    class TestProviders(ModelProviderConformance):
        @pytest.fixture(params=BuiltinProviders.KINDS)
        async def open_provider(self, request):
            providers = BuiltinProviders(request.param)
            yield providers
            await providers.aclose()

Tests of transport behaviour (retries, backoff, keys) skip for a provider with no server;
tests of streaming skip for a provider that is not a ``StreamingModelProvider``.
What the model saw is checked on the provider-neutral request the script received,
which for an HTTP provider the fake server rebuilt from the wire: the suite checks the
round trip, not one wire format (test those apart, on the recorded bodies).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pytest

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import (
    AnthropicProvider,
    Message,
    ModelDelta,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleProvider,
    ReasoningPart,
    ResponseFormat,
    Script,
    ScriptedProvider,
    ScriptFunction,
    ScriptReply,
    StreamingModelProvider,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
    call_model,
)
from little_workflow.testing.fake_models import FakeModelServer

__all__ = [
    "CONFORMANCE_KEY",
    "BuiltinProviders",
    "ModelProviderConformance",
    "OpenProvider",
    "ProviderUnderTest",
]

#: The key the fake servers of ``BuiltinProviders`` require.
CONFORMANCE_KEY = "sk-lw-conformance-9f8e7d6c5b4a3210"

_KEY_ENV = "LW_CONFORMANCE_API_KEY"

ScriptSource = Script | Sequence[ScriptReply] | ScriptFunction


@dataclass(kw_only=True)
class ProviderUnderTest:
    """A provider opened for one test, and what the test may look at around it."""

    provider: ModelProvider
    #: Every backoff the provider slept, in seconds, in order (its sleep is injected).
    sleeps: list[float] = field(default_factory=list)
    #: The fake server behind the provider; ``None`` when it has no transport.
    server: FakeModelServer | None = None
    #: The key the provider was given (``None`` if none).
    api_key: str | None = None
    #: The status the server refuses a wrong key with: 401, or Bedrock's 403.
    refused_key_status: int = 401


class OpenProvider(Protocol):
    """The ``open_provider`` fixture's type."""

    async def __call__(
        self, script: ScriptSource, *, max_retries: int = 2, client_key: str | None = None
    ) -> ProviderUnderTest:
        """A provider answering from ``script``."""
        ...


class BuiltinProviders:
    """Opens ``scripted``, ``openai`` or ``anthropic`` providers; ``aclose`` closes them all."""

    KINDS = ("scripted", "openai", "anthropic")

    def __init__(self, kind: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown provider kind {kind!r}; known: {', '.join(self.KINDS)}")
        self.kind = kind
        self._opened: list[ProviderUnderTest] = []

    async def __call__(
        self, script: ScriptSource, *, max_retries: int = 2, client_key: str | None = None
    ) -> ProviderUnderTest:
        """A provider of this kind answering from ``script``."""
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        if self.kind == "scripted":
            opened = ProviderUnderTest(provider=ScriptedProvider(script, sleep=sleep))
        else:
            server = FakeModelServer(script, api_key=CONFORMANCE_KEY, echo_credentials=True)
            server.start()
            key = client_key or CONFORMANCE_KEY
            provider: ModelProvider
            if self.kind == "openai":
                provider = OpenAICompatibleProvider(
                    server.openai_base_url,
                    api_key_env=_KEY_ENV,
                    environ={_KEY_ENV: key},
                    max_retries=max_retries,
                    sleep=sleep,
                )
            else:
                provider = AnthropicProvider(
                    server.url,
                    api_key_env=_KEY_ENV,
                    environ={_KEY_ENV: key},
                    max_retries=max_retries,
                    sleep=sleep,
                )
            opened = ProviderUnderTest(provider=provider, server=server, api_key=key)
        opened.sleeps = sleeps
        self._opened.append(opened)
        return opened

    async def aclose(self) -> None:
        """Close every provider and stop every server opened."""
        for opened in self._opened:
            await opened.provider.aclose()
            if opened.server is not None:
                await asyncio.to_thread(opened.server.stop)
        self._opened.clear()


def _server(opened: ProviderUnderTest) -> FakeModelServer:
    if opened.server is None:
        pytest.skip("this provider has no transport: nothing to retry, no key to send")
    return opened.server


def _streaming(opened: ProviderUnderTest) -> StreamingModelProvider:
    if not isinstance(opened.provider, StreamingModelProvider):
        pytest.skip("this provider does not stream")
    return opened.provider


class _Deltas:
    """A delta sink that keeps what it was handed."""

    def __init__(self) -> None:
        self.got: list[ModelDelta] = []

    async def __call__(self, delta: ModelDelta) -> None:
        self.got.append(delta)

    def text(self, kind: str = "text") -> str:
        return "".join(delta.text for delta in self.got if delta.kind == kind)

    def calls(self) -> dict[int, list[ModelDelta]]:
        found: dict[int, list[ModelDelta]] = {}
        for delta in self.got:
            if delta.kind == "tool_call":
                found.setdefault(delta.index, []).append(delta)
        return found


def _recorder() -> tuple[list[ModelRequest], list[ScriptReply], ScriptFunction]:
    """A script function answering ``replies`` in order and keeping what it was asked."""
    seen: list[ModelRequest] = []
    replies: list[ScriptReply] = []

    def answer(request: ModelRequest) -> ScriptReply:
        seen.append(request)
        return replies[len(seen) - 1]

    return seen, replies, answer


USER = Message(role="user", content="What is the weather in Paris?")
WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
)


ANSWER = ResponseFormat(
    name="city_answer",
    schema_={
        "type": "object",
        "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
        "required": ["city", "population"],
    },
)


def _request(*messages: Message, **options: object) -> ModelRequest:
    return ModelRequest.model_validate(
        {"model": "conformance-model", "messages": messages or (USER,), **options}
    )


class ModelProviderConformance:
    """Every behaviour a ``ModelProvider`` promises (see the module docstring)."""

    async def test_is_a_model_provider(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["hi"])
        assert isinstance(opened.provider, ModelProvider)
        assert isinstance(opened.provider.kind, str)
        assert opened.provider.kind

    async def test_text_answer(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["Hello there, ünïcødé 🚀"])
        response = await opened.provider.complete(_request())
        assert response.message == Message(role="assistant", content="Hello there, ünïcødé 🚀")
        assert response.finish_reason == "stop"
        assert response.model == "conformance-model"
        assert isinstance(response.id, str)
        assert response.id

    async def test_tool_call_round_trip(self, open_provider: OpenProvider) -> None:
        seen, replies, answer = _recorder()
        call = ToolCall(
            id="call_w1",
            name="get_weather",
            arguments={"city": "Paris", "days": 2, "options": {"metric": True, "tags": ["a"]}},
        )
        replies += [{"content": "Let me look.", "tool_calls": [call]}, "Sunny in Paris."]
        opened = await open_provider(answer)
        first = await opened.provider.complete(_request(tools=(WEATHER,)))
        assert first.message.tool_calls == (call,)
        assert first.message.content == "Let me look."
        assert first.finish_reason == "tool_calls"
        result = Message(role="tool", tool_call_id="call_w1", name="get_weather", content="21°C")
        second = await opened.provider.complete(
            _request(USER, first.message, result, tools=(WEATHER,))
        )
        assert second.message == Message(role="assistant", content="Sunny in Paris.")
        assert second.finish_reason == "stop"
        assert seen[0].tools == (WEATHER,)
        assert seen[1].messages[-2].tool_calls == (call,)
        assert seen[1].messages[-1] == result

    async def test_two_tool_calls_in_one_turn(self, open_provider: OpenProvider) -> None:
        seen, replies, answer = _recorder()
        calls = [
            ToolCall(id="call_a", name="get_weather", arguments={"city": "Paris"}),
            ToolCall(id="call_b", name="get_weather", arguments={"city": "Oslo"}),
        ]
        replies += [{"tool_calls": calls}, "Paris is warmer."]
        opened = await open_provider(answer)
        first = await opened.provider.complete(_request(tools=(WEATHER,)))
        assert first.message.tool_calls == tuple(calls)
        assert first.message.content is None
        results = (
            Message(role="tool", tool_call_id="call_a", name="get_weather", content="21"),
            Message(role="tool", tool_call_id="call_b", name="get_weather", content="9"),
        )
        second = await opened.provider.complete(
            _request(USER, first.message, *results, tools=(WEATHER,))
        )
        assert second.message.content == "Paris is warmer."
        assert seen[1].messages[-2:] == results

    async def test_system_prompt_reaches_the_model_first(self, open_provider: OpenProvider) -> None:
        seen, replies, answer = _recorder()
        replies.append("Terse.")
        opened = await open_provider(answer)
        system = Message(role="system", content="You are terse.")
        await opened.provider.complete(_request(system, USER))
        assert seen[0].messages[:2] == (system, USER)

    async def test_sampling_settings_reach_the_model(self, open_provider: OpenProvider) -> None:
        seen, replies, answer = _recorder()
        replies.append("ok")
        opened = await open_provider(answer)
        await opened.provider.complete(_request(temperature=0.25, max_tokens=77))
        assert (seen[0].temperature, seen[0].max_tokens) == (0.25, 77)

    async def test_usage_finish_reason_and_id_are_carried(
        self, open_provider: OpenProvider
    ) -> None:
        scripted = ModelResponse(
            id="resp-fixed-1",
            model="served-model",
            message=Message(role="assistant", content="cut sh"),
            finish_reason="length",
            usage=Usage(input_tokens=12, output_tokens=5),
        )
        opened = await open_provider([scripted])
        assert await opened.provider.complete(_request()) == scripted

    async def test_response_ids_are_deterministic(self, open_provider: OpenProvider) -> None:
        one = await open_provider(["same", "other"])
        two = await open_provider(["same"])
        first = await one.provider.complete(_request())
        again = await two.provider.complete(_request())
        other = await one.provider.complete(_request())
        assert first.id == again.id
        assert other.id != first.id

    async def test_scripted_error_is_not_retried(self, open_provider: OpenProvider) -> None:
        opened = await open_provider([{"error": {"status": 400, "message": "context too long"}}])
        with pytest.raises(ModelProviderError) as caught:
            await opened.provider.complete(_request())
        assert (caught.value.status, caught.value.retryable) == (400, False)
        assert "context too long" in caught.value.message
        assert opened.sleeps == []

    async def test_running_out_of_script_is_a_clear_error(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["only one"])
        await opened.provider.complete(_request())
        with pytest.raises(ModelProviderError, match="no reply") as caught:
            await opened.provider.complete(_request())
        assert not caught.value.retryable

    async def test_bad_request_is_not_retried(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["never"])
        server = _server(opened)
        server.fail_next(1, status=400, message="messages.0: bad thing")
        with pytest.raises(ModelProviderError) as caught:
            await opened.provider.complete(_request())
        assert (caught.value.status, caught.value.retryable) == (400, False)
        assert "bad thing" in caught.value.message
        assert (len(server.requests), opened.sleeps) == (1, [])

    async def test_rate_limit_then_success_is_retried(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["after the wait"])
        server = _server(opened)
        server.fail_next(1, status=429)
        response = await opened.provider.complete(_request())
        assert response.message.content == "after the wait"
        assert [r.status for r in server.requests] == [429, 200]
        assert len(opened.sleeps) == 1
        assert opened.sleeps[0] > 0

    async def test_retry_after_is_honoured(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["ok"])
        server = _server(opened)
        server.fail_next(1, status=429, retry_after=7)
        await opened.provider.complete(_request())
        assert opened.sleeps == [7.0]

    async def test_a_rate_limit_is_told_apart_with_the_wait_asked(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["never"], max_retries=0)
        server = _server(opened)
        server.fail_next(1, status=429, retry_after=120)
        with pytest.raises(ModelProviderError) as caught:
            await opened.provider.complete(_request())
        failure = caught.value
        assert (failure.status, failure.retryable, failure.rate_limited) == (429, True, True)
        # As the server asked, though a retry would sleep no longer than max_backoff.
        assert failure.retry_after == 120.0

    async def test_giving_up_on_rate_limits_keeps_what_they_said(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["never"], max_retries=1)
        server = _server(opened)
        server.fail_next(2, status=429, retry_after=3)
        with pytest.raises(ModelProviderError, match="gave up after 2 attempts") as caught:
            await opened.provider.complete(_request())
        assert (caught.value.rate_limited, caught.value.retry_after) == (True, 3.0)
        assert opened.sleeps == [3.0]

    async def test_server_errors_exhaust_retries(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["never"], max_retries=2)
        server = _server(opened)
        server.fail_next(5, status=503, message="upstream unavailable")
        with pytest.raises(ModelProviderError) as caught:
            await opened.provider.complete(_request())
        assert (caught.value.status, caught.value.retryable) == (503, True)
        assert (caught.value.rate_limited, caught.value.retry_after) == (False, None)
        assert "upstream unavailable" in caught.value.message
        assert len(server.requests) == 3
        assert len(opened.sleeps) == 2
        assert 0 < opened.sleeps[0] < opened.sleeps[1]

    async def test_dropped_connection_is_retried(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["made it"])
        server = _server(opened)
        server.disconnect_next(1)
        response = await opened.provider.complete(_request())
        assert response.message.content == "made it"
        assert [r.status for r in server.requests] == [0, 200]
        assert len(opened.sleeps) == 1

    async def test_api_key_is_sent(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["authorized"])
        server = _server(opened)
        assert server.api_key is not None
        await opened.provider.complete(_request())
        assert server.last_request.status == 200
        assert any(server.api_key in value for value in server.last_request.headers.values())

    async def test_api_key_never_leaks(
        self, open_provider: OpenProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        wrong = "sk-lw-wrong-key-0123456789abcdef"
        opened = await open_provider(["never"], client_key=wrong)
        server = _server(opened)
        # The server quotes the key it refuses, and a rate-limit message quotes it too.
        server.fail_next(1, status=429, message=f"slow down, {wrong}")
        caplog.set_level(logging.DEBUG)
        with pytest.raises(ModelProviderError) as caught:
            await opened.provider.complete(_request())
        assert (caught.value.status, caught.value.retryable) == (opened.refused_key_status, False)
        assert wrong in str(server.last_request.response)
        for text in (str(caught.value), repr(caught.value), repr(opened.provider), caplog.text):
            assert wrong not in text
        assert "[redacted]" in caught.value.message

    async def test_aclose_is_idempotent(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["hi"])
        await opened.provider.complete(_request())
        await opened.provider.aclose()
        await opened.provider.aclose()

    # -- streaming (a StreamingModelProvider) --------------------------------------------

    async def _both(
        self, open_provider: OpenProvider, replies: Sequence[ScriptReply], request: ModelRequest
    ) -> tuple[ModelResponse, ModelResponse, _Deltas, ProviderUnderTest]:
        """``complete``'s and ``stream``'s answers to ``request``, each from a fresh script."""
        completing = await open_provider(list(replies))
        streaming = await open_provider(list(replies))
        provider = _streaming(streaming)
        completed = await completing.provider.complete(request)
        deltas = _Deltas()
        streamed = await provider.stream(request, deltas)
        return completed, streamed, deltas, streaming

    async def test_streamed_text_is_the_completed_answer(self, open_provider: OpenProvider) -> None:
        text = "Hello there, ünïcødé 🚀 and a few more words"
        completed, streamed, deltas, _ = await self._both(open_provider, [text], _request())
        assert streamed == completed
        assert streamed.message == Message(role="assistant", content=text)
        assert deltas.got
        assert all(delta.kind == "text" for delta in deltas.got)
        assert deltas.text() == text

    async def test_streamed_usage_finish_reason_and_id(self, open_provider: OpenProvider) -> None:
        scripted = ModelResponse(
            id="resp-streamed-1",
            model="served-model",
            message=Message(role="assistant", content="cut sh"),
            finish_reason="length",
            usage=Usage(input_tokens=12, output_tokens=5, cached_input_tokens=4),
        )
        opened = await open_provider([scripted])
        assert await _streaming(opened).stream(_request(), _Deltas()) == scripted

    async def test_streamed_tool_calls_are_the_completed_ones(
        self, open_provider: OpenProvider
    ) -> None:
        calls = [
            ToolCall(
                id="call_s1",
                name="get_weather",
                arguments={"city": "Paris", "days": 2, "options": {"tags": ["a", "ü"]}},
            ),
            ToolCall(id="call_s2", name="get_weather", arguments={"city": "Oslo"}),
        ]
        replies: list[ScriptReply] = [{"content": "Let me look.", "tool_calls": calls}]
        request = _request(tools=(WEATHER,))
        completed, streamed, deltas, _ = await self._both(open_provider, replies, request)
        assert streamed == completed
        assert streamed.message.tool_calls == tuple(calls)
        assert streamed.finish_reason == "tool_calls"
        assert deltas.text() == "Let me look."
        by_index = deltas.calls()
        assert sorted(by_index) == [0, 1]
        for index, call in enumerate(calls):
            pieces = by_index[index]
            assert (pieces[0].tool_call_id, pieces[0].name) == (call.id, call.name)
            assert all(p.tool_call_id is None and p.name is None for p in pieces[1:])
            assert json.loads("".join(p.text for p in pieces)) == call.arguments

    async def test_streamed_structured_output_is_the_completed_one(
        self, open_provider: OpenProvider
    ) -> None:
        replies: list[ScriptReply] = ['{"city":"Oslo","population":709000}']
        request = _request(response_format=ANSWER)
        completed, streamed, deltas, _ = await self._both(open_provider, replies, request)
        assert streamed == completed
        assert json.loads(streamed.message.text or "") == {"city": "Oslo", "population": 709000}
        assert streamed.finish_reason == "stop"
        assert json.loads(deltas.text()) == {"city": "Oslo", "population": 709000}
        assert deltas.calls() == {}

    async def test_streamed_reasoning_is_the_completed_one(
        self, open_provider: OpenProvider
    ) -> None:
        probe = await open_provider([])
        thought = ReasoningPart(provider=probe.provider.kind, text="The user wants a city.")
        reply: ScriptReply = {"content": [thought.model_dump(), {"type": "text", "text": "Oslo."}]}
        completed, streamed, deltas, _ = await self._both(open_provider, [reply], _request())
        assert streamed == completed
        parts = streamed.message.parts
        assert [type(part) for part in parts] == [ReasoningPart, TextPart]
        assert isinstance(parts[0], ReasoningPart)
        assert parts[0].text == thought.text
        assert deltas.text("reasoning") == thought.text
        assert deltas.text() == "Oslo."

    async def test_call_model_streams_when_given_a_sink(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["streamed through call_model"])
        _streaming(opened)
        deltas = _Deltas()
        response = await call_model(opened.provider, _request(), deltas)
        assert response.message.content == "streamed through call_model"
        assert deltas.text() == "streamed through call_model"
        if opened.server is not None:
            # Asked for in the body, or (Bedrock, Vertex) in the path.
            assert opened.server.last_request.streamed

    async def test_a_failing_sink_does_not_fail_the_call(
        self, open_provider: OpenProvider, caplog: pytest.LogCaptureFixture
    ) -> None:
        opened = await open_provider(["still answered in full"])
        handed: list[ModelDelta] = []

        async def broken(delta: ModelDelta) -> None:
            handed.append(delta)
            raise RuntimeError("the watcher broke")

        caplog.set_level(logging.WARNING)
        response = await _streaming(opened).stream(_request(), broken)
        assert response.message.content == "still answered in full"
        assert "".join(delta.text for delta in handed) == "still answered in full"
        assert "the watcher broke" in caplog.text

    async def test_a_cancelling_sink_cancels_the_call(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["never finished"])

        async def cancelling(delta: ModelDelta) -> None:
            raise asyncio.CancelledError

        with pytest.raises(asyncio.CancelledError):
            await _streaming(opened).stream(_request(), cancelling)

    async def test_stream_rate_limited_before_it_starts_is_retried(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["after the wait"])
        server = _server(opened)
        server.fail_next(1, status=429)
        deltas = _Deltas()
        response = await _streaming(opened).stream(_request(), deltas)
        assert response.message.content == "after the wait"
        assert deltas.text() == "after the wait"
        assert [r.status for r in server.requests] == [429, 200]
        assert len(opened.sleeps) == 1

    async def test_stream_cut_before_its_first_event_is_retried(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["second time lucky", "second time lucky"])
        server = _server(opened)
        server.cut_stream_after(0)
        deltas = _Deltas()
        response = await _streaming(opened).stream(_request(), deltas)
        assert response.message.content == "second time lucky"
        assert deltas.text() == "second time lucky"
        assert len(server.requests) == 2
        assert len(opened.sleeps) == 1

    async def test_stream_cut_after_its_first_event_is_raised_not_retried(
        self, open_provider: OpenProvider
    ) -> None:
        opened = await open_provider(["this answer will be cut", "never asked for"])
        server = _server(opened)
        server.cut_stream_after(1)
        with pytest.raises(ModelProviderError) as caught:
            await _streaming(opened).stream(_request(), _Deltas())
        assert caught.value.retryable
        assert "cut" in caught.value.message
        assert len(server.requests) == 1
        assert opened.sleeps == []

    async def test_stream_cut_midway_keeps_the_deltas_handed_out(
        self, open_provider: OpenProvider
    ) -> None:
        text = "one two three four five six seven eight"
        opened = await open_provider([text])
        server = _server(opened)
        server.cut_stream_after(5)
        deltas = _Deltas()
        with pytest.raises(ModelProviderError) as caught:
            await _streaming(opened).stream(_request(), deltas)
        assert caught.value.retryable
        assert deltas.got
        assert text.startswith(deltas.text())
        assert deltas.text() != text
        assert len(server.requests) == 1

    async def test_error_event_mid_stream_is_raised(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["overloaded halfway through", "never asked for"])
        server = _server(opened)
        server.error_mid_stream(after=2, status=529, message="Overloaded right now")
        with pytest.raises(ModelProviderError) as caught:
            await _streaming(opened).stream(_request(), _Deltas())
        assert "Overloaded right now" in caught.value.message
        assert caught.value.retryable
        assert len(server.requests) == 1
        assert opened.sleeps == []

    async def test_refusing_error_event_is_not_retryable(self, open_provider: OpenProvider) -> None:
        opened = await open_provider(["refused halfway through"])
        server = _server(opened)
        server.error_mid_stream(after=2, status=400, message="output blocked by policy")
        with pytest.raises(ModelProviderError) as caught:
            await _streaming(opened).stream(_request(), _Deltas())
        assert "output blocked by policy" in caught.value.message
        assert not caught.value.retryable
        assert len(server.requests) == 1
