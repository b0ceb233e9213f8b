"""Streaming on both wire formats: the fake servers' event shapes, what the providers send,
and how they take events the fake never sends (malformed ones, unknown ones, cut ones).

The shared behaviour (a streamed answer is the completed one, retries, cuts, error
events) is in the provider conformance suite; this module checks each wire on its own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
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
    StreamingModelProvider,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
    call_model,
)
from little_workflow.runtime._model_limits import LimitedProvider
from little_workflow.storage import Permit
from little_workflow.testing._fake_wire import sign_thinking
from little_workflow.testing.fake_models import FakeModelServer

KEY = "sk-stream-test-0123456789"
USER = Message(role="user", content="Hi")
SEARCH = ToolSpec(name="search", parameters={"type": "object", "properties": {}})


def _ask(**options: Any) -> ModelRequest:
    return ModelRequest.model_validate({"model": "m", "messages": (USER,), **options})


class Deltas:
    def __init__(self) -> None:
        self.got: list[ModelDelta] = []

    async def __call__(self, delta: ModelDelta) -> None:
        self.got.append(delta)

    def text(self, kind: str = "text") -> str:
        return "".join(d.text for d in self.got if d.kind == kind)


def _openai(base_url: str) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(base_url, environ={"OPENAI_API_KEY": KEY}, max_retries=0)


def _anthropic(base_url: str) -> AnthropicProvider:
    return AnthropicProvider(base_url, environ={"ANTHROPIC_API_KEY": KEY}, max_retries=0)


def _events(raw: str) -> list[tuple[str | None, str]]:
    """``(event name or None, data)`` of each event of an SSE body (the fake's framing)."""
    found = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name = data = None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                name = value
            elif field == "data":
                data = value
        assert data is not None, block
        found.append((name, data))
    return found


# -- the fake servers' streams -----------------------------------------------------------


def _stream_openai(server: FakeModelServer, **extra: Any) -> tuple[httpx.Headers, str]:
    body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.stream(
        "POST",
        f"{server.openai_base_url}/chat/completions",
        json={**body, **extra},
        headers={"authorization": f"Bearer {KEY}"},
    ) as response:
        assert response.status_code == 200
        return response.headers, response.read().decode()


def test_fake_openai_stream_has_the_chunk_shapes() -> None:
    call = ToolCall(id="call_1", name="search", arguments={"q": "a long query here"})
    reply = {"content": "Three words here", "tool_calls": [call]}
    answer = ModelResponse(
        id="chatcmpl-1",
        model="m",
        message=Message(role="assistant", content="Three words here", tool_calls=(call,)),
        finish_reason="tool_calls",
        usage=Usage(input_tokens=9, output_tokens=4, cached_input_tokens=2, reasoning_tokens=1),
    )
    with FakeModelServer([reply, answer], api_key=KEY) as server:
        headers, raw = _stream_openai(server)
        assert headers["content-type"].startswith("text/event-stream")
        events = _events(raw)
        assert all(name is None for name, _ in events)
        assert events[-1][1] == "[DONE]"
        chunks = [json.loads(data) for _, data in events[:-1]]
        assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
        assert all("usage" not in chunk for chunk in chunks)  # not asked for
        deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
        assert deltas[0]["role"] == "assistant"
        pieces = [d["content"] for d in deltas[1:] if d.get("content")]
        assert pieces == ["Three ", "words ", "here"]
        calls = [piece for d in deltas for piece in d.get("tool_calls", [])]
        assert calls[0] == {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": "search", "arguments": ""},
        }
        assert len(calls) > 2
        arguments = "".join(piece["function"]["arguments"] for piece in calls)
        assert json.loads(arguments) == call.arguments
        assert [chunk["choices"][0]["finish_reason"] for chunk in chunks][-1] == "tool_calls"
        assert deltas[-1] == {}

        _, raw = _stream_openai(server, stream_options={"include_usage": True})
        chunks = [json.loads(data) for _, data in _events(raw)[:-1]]
        assert all(chunk["usage"] is None for chunk in chunks[:-1])
        assert chunks[-1]["choices"] == []
        assert chunks[-1]["usage"] == {
            "prompt_tokens": 9,
            "completion_tokens": 4,
            "total_tokens": 13,
            "prompt_tokens_details": {"cached_tokens": 2},
            "completion_tokens_details": {"reasoning_tokens": 1},
        }
        assert [r.body["stream"] for r in server.requests] == [True, True]


def test_fake_anthropic_stream_has_the_event_shapes() -> None:
    thought = ReasoningPart(provider="anthropic", text="Think it through")
    reply = {
        "content": [thought.model_dump(), {"type": "text", "text": "Two words"}],
        "tool_calls": [{"id": "toolu_1", "name": "search", "arguments": {"q": "x"}}],
    }
    with FakeModelServer([reply], api_key=KEY) as server:
        body = {
            "model": "m",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "Hi"}],
            "tools": [{"name": "search", "input_schema": {"type": "object"}}],
            "stream": True,
        }
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        with httpx.stream("POST", f"{server.url}/v1/messages", json=body, headers=headers) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            events = _events(r.read().decode())
    names = [name for name, _ in events]
    datas = [json.loads(data) for _, data in events]
    assert [d["type"] for d in datas] == names  # the event name repeats the type
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = datas[0]["message"]
    assert (start["content"], start["stop_reason"]) == ([], None)
    assert "input_tokens" in start["usage"]
    blocks = [d["content_block"] for d in datas if d["type"] == "content_block_start"]
    assert blocks == [
        {"type": "thinking", "thinking": ""},
        {"type": "text", "text": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {}},
    ]
    deltas = [(d["index"], d["delta"]) for d in datas if d["type"] == "content_block_delta"]
    thinking = "".join(x.get("thinking", "") for i, x in deltas if i == 0)
    assert thinking == thought.text
    assert (0, {"type": "signature_delta", "signature": sign_thinking(thought.text)}) in deltas
    assert [x["text"] for i, x in deltas if i == 1] == ["Two ", "words"]
    assert "".join(x["partial_json"] for i, x in deltas if i == 2) == '{"q":"x"}'
    stops = [d["index"] for d in datas if d["type"] == "content_block_stop"]
    assert stops == [0, 1, 2]
    assert datas[-2]["delta"]["stop_reason"] == "tool_use"
    assert "output_tokens" in datas[-2]["usage"]


def test_fake_error_events_have_each_vendors_shape() -> None:
    with FakeModelServer(["a b c d", "a b c d"], api_key=KEY) as server:
        server.error_mid_stream(after=2, status=529, message="Overloaded")
        _, raw = _stream_openai(server)
        events = _events(raw)
        assert len(events) == 3
        assert json.loads(events[-1][1])["error"]["message"] == "Overloaded"
        server.error_mid_stream(after=1, status=529, message="Overloaded")
        body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        with httpx.stream(
            "POST", f"{server.url}/v1/messages", json={**body, "stream": True}, headers=headers
        ) as response:
            events = _events(response.read().decode())
    assert [name for name, _ in events] == ["message_start", "error"]
    assert json.loads(events[-1][1]) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


# -- what the providers send -------------------------------------------------------------


async def test_openai_stream_sends_the_complete_body_plus_stream_fields() -> None:
    request = _ask(tools=(SEARCH,), temperature=0.5, max_tokens=30, extra={"user": "u1"})
    async with FakeModelServer(["one", "two"], api_key=KEY) as server:
        provider = _openai(server.openai_base_url)
        await provider.complete(request)
        await provider.stream(request, Deltas())
        await provider.aclose()
    completed, streamed = (r.body for r in server.requests)
    assert streamed.pop("stream") is True
    assert streamed.pop("stream_options") == {"include_usage": True}
    assert streamed == completed
    assert server.requests[1].headers["accept"] == "text/event-stream"


async def test_anthropic_stream_sends_the_complete_body_plus_stream() -> None:
    request = _ask(tools=(SEARCH,), temperature=0.5, max_tokens=30)
    async with FakeModelServer(["one", "two"], api_key=KEY) as server:
        provider = _anthropic(server.url)
        await provider.complete(request)
        await provider.stream(request, Deltas())
        await provider.aclose()
    completed, streamed = (r.body for r in server.requests)
    assert streamed.pop("stream") is True
    assert streamed == completed


async def test_anthropic_redacted_thinking_streams_as_it_completes() -> None:
    hidden = ReasoningPart(provider="anthropic", data="opaque-bytes", redacted=True)
    reply = {"content": [hidden.model_dump(), {"type": "text", "text": "Done."}]}
    async with FakeModelServer([reply, reply], api_key=KEY) as server:
        provider = _anthropic(server.url)
        completed = await provider.complete(_ask())
        deltas = Deltas()
        streamed = await provider.stream(_ask(), deltas)
        await provider.aclose()
    assert streamed == completed
    assert streamed.message.content == (hidden, TextPart(text="Done."))
    assert deltas.text("reasoning") == ""
    assert deltas.text() == "Done."


# -- events the fake never sends: a server that streams what it is given ----------------


class _Canned(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""
    seen: list[Any]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.seen.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def canned() -> Iterator[tuple[type[_Canned], str]]:
    handler = type("Handler", (_Canned,), {"seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def _sse(*events: tuple[str | None, object]) -> bytes:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(out).encode()


def _chunk(delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-c",
        "model": "served",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **more,
    }


async def test_openai_stream_reads_usage_details_and_ollama_reasoning(
    canned: tuple[type[_Canned], str],
) -> None:
    handler, url = canned
    usage = {
        "prompt_tokens": 20,
        "completion_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 5},
    }
    handler.body = _sse(
        (None, _chunk({"role": "assistant"})),
        (None, _chunk({"reasoning": "Hmm, "})),
        (None, _chunk({"reasoning": "yes."})),
        (None, _chunk({"content": "42"})),
        (None, _chunk({}, "stop")),
        (None, {"id": "chatcmpl-c", "choices": [], "usage": usage}),
        (None, "[DONE]"),
    )
    deltas = Deltas()
    provider = _openai(url)
    response = await provider.stream(_ask(), deltas)
    await provider.aclose()
    assert response == ModelResponse(
        id="chatcmpl-c",
        model="served",
        message=Message(
            role="assistant",
            content=(ReasoningPart(provider="openai", text="Hmm, yes."), TextPart(text="42")),
        ),
        finish_reason="stop",
        usage=Usage(input_tokens=20, output_tokens=8, cached_input_tokens=16, reasoning_tokens=5),
    )
    assert [(d.kind, d.text) for d in deltas.got] == [
        ("reasoning", "Hmm, "),
        ("reasoning", "yes."),
        ("text", "42"),
    ]
    assert handler.seen[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("events", "named"),
    [
        ([(None, "{not json")], "not JSON"),
        ([(None, "[1, 2]")], "not an object"),
        ([(None, {"id": "x", "choices": {"0": {}}})], "choices is a dict"),
        ([(None, _chunk({"content": 7}))], "choices[0].delta.content is a int"),
        ([(None, _chunk({"tool_calls": [{"index": -1}]}))], "index is not a non-negative"),
    ],
)
async def test_openai_malformed_event_is_named(
    canned: tuple[type[_Canned], str], events: list[tuple[str | None, object]], named: str
) -> None:
    handler, url = canned
    handler.body = _sse((None, _chunk({"role": "assistant"})), *events, (None, "[DONE]"))
    provider = _openai(url)
    with pytest.raises(ModelProviderError) as caught:
        await provider.stream(_ask(), Deltas())
    await provider.aclose()
    assert named in caught.value.message
    assert "malformed event (event 2" in caught.value.message
    assert not caught.value.retryable
    assert len(handler.seen) == 1


async def test_openai_stream_ending_without_done_is_a_retryable_cut(
    canned: tuple[type[_Canned], str],
) -> None:
    handler, url = canned
    handler.body = _sse((None, _chunk({"role": "assistant"})), (None, _chunk({"content": "par"})))
    deltas = Deltas()
    provider = _openai(url)
    with pytest.raises(ModelProviderError, match=r"ended after 2 events without data: \[DONE\]"):
        await provider.stream(_ask(), deltas)
    await provider.aclose()
    assert deltas.text() == "par"


def _start(**usage: int) -> tuple[str, dict[str, Any]]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-served",
        "content": [],
        "stop_reason": None,
        "usage": usage,
    }
    return "message_start", {"type": "message_start", "message": message}


def _block(index: int, **block: Any) -> tuple[str, dict[str, Any]]:
    return "content_block_start", {
        "type": "content_block_start",
        "index": index,
        "content_block": block,
    }


def _delta(index: int, **delta: Any) -> tuple[str, dict[str, Any]]:
    return "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}


def _stop(index: int) -> tuple[str, dict[str, Any]]:
    return "content_block_stop", {"type": "content_block_stop", "index": index}


def _end(stop_reason: str, **usage: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]


async def test_anthropic_stream_skips_pings_and_unknown_events_and_sums_usage(
    canned: tuple[type[_Canned], str],
) -> None:
    handler, url = canned
    handler.body = _sse(
        _start(input_tokens=3, cache_read_input_tokens=10, cache_creation_input_tokens=2),
        ("ping", {"type": "ping"}),
        _block(0, type="text", text=""),
        _delta(0, type="text_delta", text="Hel"),
        ("future_event", {"type": "future_event", "whatever": 1}),
        _delta(0, type="citations_delta", citation={}),
        _delta(0, type="text_delta", text="lo"),
        _stop(0),
        _block(1, type="tool_use", id="toolu_9", name="search", input={}),
        _delta(1, type="input_json_delta", partial_json='{"q": '),
        _delta(1, type="input_json_delta", partial_json='"x"}'),
        _stop(1),
        *_end("tool_use", output_tokens=33),
    )
    deltas = Deltas()
    provider = _anthropic(url)
    response = await provider.stream(_ask(tools=(SEARCH,)), deltas)
    await provider.aclose()
    assert response == ModelResponse(
        id="msg_1",
        model="claude-served",
        message=Message(
            role="assistant",
            content="Hello",
            tool_calls=(ToolCall(id="toolu_9", name="search", arguments={"q": "x"}),),
        ),
        finish_reason="tool_calls",
        usage=Usage(
            input_tokens=15, output_tokens=33, cached_input_tokens=10, cache_write_tokens=2
        ),
    )
    assert [(d.kind, d.text, d.index, d.tool_call_id, d.name) for d in deltas.got] == [
        ("text", "Hel", 0, None, None),
        ("text", "lo", 0, None, None),
        ("tool_call", "", 0, "toolu_9", "search"),
        ("tool_call", '{"q": ', 0, None, None),
        ("tool_call", '"x"}', 0, None, None),
    ]
    assert handler.seen[0]["stream"] is True


@pytest.mark.parametrize(
    ("events", "named"),
    [
        ([_block(0, type="text", text="")], "content_block_start before message_start"),
        ([_start(), _delta(0, type="text_delta", text="x")], "which is not open"),
        (
            [
                _start(),
                _block(0, type="text", text=""),
                _delta(0, type="input_json_delta", partial_json="{"),
            ],
            "a input_json_delta for content block 0, a text block",
        ),
        (
            [
                _start(),
                _block(0, type="tool_use", id="t", name="search", input={}),
                _delta(0, type="input_json_delta", partial_json='{"q": '),
                _stop(0),
            ],
            "the tool input's JSON does not parse",
        ),
        ([("message_start", "not json")], "not JSON"),
    ],
)
async def test_anthropic_malformed_event_is_named(
    canned: tuple[type[_Canned], str], events: list[tuple[str | None, object]], named: str
) -> None:
    handler, url = canned
    handler.body = _sse(*events, *_end("end_turn", output_tokens=1))
    provider = _anthropic(url)
    with pytest.raises(ModelProviderError) as caught:
        await provider.stream(_ask(tools=(SEARCH,)), Deltas())
    await provider.aclose()
    assert named in caught.value.message
    assert "malformed event" in caught.value.message
    assert not caught.value.retryable
    assert len(handler.seen) == 1


async def test_anthropic_stream_without_message_stop_is_a_retryable_cut(
    canned: tuple[type[_Canned], str],
) -> None:
    handler, url = canned
    handler.body = _sse(
        _start(), _block(0, type="text", text=""), _delta(0, type="text_delta", text="x")
    )
    provider = _anthropic(url)
    with pytest.raises(ModelProviderError, match="without message_stop") as caught:
        await provider.stream(_ask(), Deltas())
    await provider.aclose()
    assert caught.value.retryable


async def test_an_error_event_quoting_the_key_is_redacted(
    canned: tuple[type[_Canned], str],
) -> None:
    handler, url = canned
    error = {"type": "error", "error": {"type": "api_error", "message": f"bad key {KEY}"}}
    handler.body = _sse(_start(), ("error", error))
    provider = _anthropic(url)
    with pytest.raises(ModelProviderError) as caught:
        await provider.stream(_ask(), Deltas())
    await provider.aclose()
    assert KEY not in str(caught.value)
    assert "[redacted]" in caught.value.message
    assert (caught.value.status, caught.value.retryable) == (500, True)


# -- a limited slot streams ----------------------------------------------------------------


class Permits:
    def __init__(self) -> None:
        self.log: list[str] = []

    async def acquire_permit(self, kind: Any, name: str, *, lease_seconds: float) -> Permit:
        self.log.append("acquire")
        return Permit(permit_id="p1", kind=kind, name=name, expires_at=0.0)

    async def renew_permits(self, permits: list[Permit], *, lease_seconds: float) -> set[str]:
        return {permit.permit_id for permit in permits}

    async def release_permit(self, permit: Permit) -> bool:
        self.log.append("release")
        return True


async def test_call_model_through_a_limited_slot_streams_holding_a_permit() -> None:
    async with FakeModelServer(["streamed while held"], api_key=KEY) as server:
        inner = _openai(server.openai_base_url)
        permits = Permits()
        seen_while: list[list[str]] = []
        deltas = Deltas()

        async def sink(delta: ModelDelta) -> None:
            seen_while.append(list(permits.log))
            await deltas(delta)

        limited = LimitedProvider(inner, "judge", permits)
        assert isinstance(limited, StreamingModelProvider)
        response = await call_model(limited, _ask(), sink)
        await inner.aclose()
    assert response.message.content == "streamed while held"
    assert deltas.text() == "streamed while held"
    assert server.last_request.body["stream"] is True
    assert permits.log == ["acquire", "release"]
    assert seen_while
    assert all(log == ["acquire"] for log in seen_while)


class _CompleteOnly:
    kind = "plain"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return ModelResponse(id="r", model="m", message=Message(role="assistant", content="ok"))

    async def aclose(self) -> None:
        pass


async def test_a_limited_slot_over_a_provider_that_cannot_stream_completes() -> None:
    inner = _CompleteOnly()
    assert isinstance(inner, ModelProvider)
    assert not isinstance(inner, StreamingModelProvider)
    permits = Permits()
    deltas = Deltas()
    response = await call_model(LimitedProvider(inner, "judge", permits), _ask(), deltas)
    assert response.message.content == "ok"
    assert (inner.calls, deltas.got, permits.log) == (1, [], ["acquire", "release"])
