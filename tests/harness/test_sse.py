"""The server-sent events parser, and ``JsonPoster.stream`` against a real local server."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models._http import JsonPoster
from little_workflow.harness.models._sse import (
    DEFAULT_MAX_EVENT_BYTES,
    SseEvent,
    SseParser,
    iter_sse,
)

KEY = "sk-test-sse-0123456789abcdef"


def parse(
    *chunks: bytes, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
) -> tuple[list[SseEvent], str | None]:
    parser = SseParser(max_event_bytes=max_event_bytes)
    events = [event for chunk in chunks for event in parser.feed(chunk)]
    return events, parser.finish()


def datas(events: list[SseEvent]) -> list[str]:
    return [event.data for event in events]


async def drain(events: AsyncGenerator[SseEvent, None], seen: list[SseEvent]) -> None:
    """Every event into ``seen``, closing the stream however it ends."""
    async with contextlib.aclosing(events):
        async for event in events:
            seen.append(event)


# -- the parser's rules ---------------------------------------------------------------


@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"])
def test_every_line_ending_ends_lines(end: str) -> None:
    stream = f"data: a{end}data: b{end}{end}data: c{end}{end}".encode()
    events, left = parse(stream)
    assert datas(events) == ["a\nb", "c"]
    assert left is None


def test_mixed_line_endings_and_cr_lf_split_across_chunks() -> None:
    # The \r and the \n of one line ending arrive in two chunks: one line end, not two
    # (two would be a blank line and dispatch "a" early).
    events, left = parse(b"data: a\r", b"\ndata: b\r\n\n", b"data: c\r\r")
    assert datas(events) == ["a\nb", "c"]
    assert left is None


def test_only_one_leading_space_is_stripped() -> None:
    events, _ = parse(b"data:x\ndata: y\ndata:  z\ndata:\n\n")
    assert events == [SseEvent(data="x\ny\n z\n")]


def test_comments_are_ignored() -> None:
    events, left = parse(b": keep-alive\n\n:another\ndata: a\n: inside\n\n")
    assert datas(events) == ["a"]
    assert left is None


def test_event_id_and_retry_fields() -> None:
    parser = SseParser()
    events = parser.feed(
        b"event: delta\nid: 1\nretry: 2500\ndata: a\n\n"
        b"data: b\n\n"  # no event: the type resets to "message"; the id carries over
        b"id:\ndata: c\n\n"  # an empty id resets it
        b"id: x\x00y\nretry: soon\ndata: d\n\n"  # both invalid: ignored
    )
    assert events == [
        SseEvent(event="delta", data="a", id="1"),
        SseEvent(event="message", data="b", id="1"),
        SseEvent(event="message", data="c", id=""),
        SseEvent(event="message", data="d", id=""),
    ]
    assert parser.retry == 2500
    assert parser.finish() is None


def test_a_field_without_a_colon_has_an_empty_value() -> None:
    events, _ = parse(b"data\ndata\n\nevent\ndata: x\n\n")
    assert events == [SseEvent(data="\n"), SseEvent(data="x", event="message")]


def test_an_event_without_data_is_not_dispatched() -> None:
    events, left = parse(b"event: ping\n\nid: 3\n\ndata: a\n\n")
    assert events == [SseEvent(data="a", id="3")]
    assert left is None


def test_unknown_fields_are_ignored() -> None:
    events, _ = parse(b"foo: bar\ndata: a\nDATA: b\n\n")
    assert datas(events) == ["a"]


def test_a_leading_bom_is_dropped_even_split_but_only_at_the_start() -> None:
    events, _ = parse(b"\xef", b"\xbb", b"\xbfdata: a\n\n\xef\xbb\xbfdata: b\n\n")
    # A BOM later in the stream is part of a field name, which is then unknown.
    assert datas(events) == ["a"]
    events, _ = parse(b"\xef\xbb\xbf\xef\xbb\xbfdata: a\n\n")
    assert events == []


def test_a_multibyte_character_split_across_chunks() -> None:
    whole = "data: héllo ✓ 🌍\n\n".encode()
    for cut in range(1, len(whole)):
        events, _ = parse(whole[:cut], whole[cut:])
        assert datas(events) == ["héllo ✓ 🌍"], cut


def test_invalid_utf8_is_replaced_not_refused() -> None:
    events, _ = parse(b"data: a\xffb\n\n")
    assert datas(events) == ["a\ufffdb"]


def test_a_trailing_unfinished_event_is_dropped_and_reported() -> None:
    events, left = parse(b"data: a\n\ndata: b\n")
    assert datas(events) == ["a"]
    assert left is not None
    assert "event 2" in left
    assert "byte 9" in left
    events, left = parse(b"data: a\n\ndata: b")
    assert datas(events) == ["a"]
    assert left is not None


def test_a_clean_end_reports_nothing_left() -> None:
    assert parse(b"data: a\n\n: trailing comment\n")[1] is None
    assert parse(b"")[1] is None


def test_an_event_over_the_bound_raises_with_where() -> None:
    with pytest.raises(ModelProviderError) as caught:
        parse(b"data: ok\n\n", b"data: " + b"x" * 40 + b"\n", b"data: more\n\n", max_event_bytes=32)
    assert caught.value.retryable is False
    assert "event 2" in caught.value.message
    assert "byte 10" in caught.value.message
    assert "32 bytes" in caught.value.message


def test_a_line_that_never_ends_is_bounded_too() -> None:
    parser = SseParser(max_event_bytes=64)
    for _ in range(4):
        assert parser.feed(b"x" * 16) == []
    with pytest.raises(ModelProviderError, match="larger than 64 bytes"):
        parser.feed(b"x")


def test_many_small_events_each_under_the_bound_pass() -> None:
    events, left = parse(b"data: 0123456789\n\n" * 100, max_event_bytes=32)
    assert len(events) == 100
    assert left is None


_TEXT = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\x00"),
    max_size=12,
)


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[SseEvent]]:
    end = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    lines: list[str] = []
    expected: list[SseEvent] = []
    last_id: str | None = None
    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            lines.append(":" + draw(_TEXT))
        kind = draw(st.one_of(st.none(), _TEXT.filter(bool)))
        if kind is not None:
            lines.append(f"event: {kind}")
        if draw(st.booleans()):
            last_id = draw(_TEXT)
            lines.append(f"id: {last_id}")
        data = draw(st.lists(_TEXT, min_size=1, max_size=3))
        lines.extend(f"data: {value}" for value in data)
        lines.append("")
        expected.append(SseEvent(data="\n".join(data), event=kind or "message", id=last_id))
    bom = "\ufeff" if draw(st.booleans()) else ""
    return (bom + "".join(line + end for line in lines)).encode(), expected


@given(streams(), st.lists(st.integers(0, 10_000), max_size=12))
def test_any_split_gives_the_events_of_the_whole(
    stream: tuple[bytes, list[SseEvent]], cuts: list[int]
) -> None:
    whole, expected = stream
    points = sorted({cut % (len(whole) + 1) for cut in cuts})
    chunks = [whole[a:b] for a, b in zip([0, *points], [*points, len(whole)], strict=True)]
    assert parse(whole) == (expected, None)
    assert parse(*chunks) == (expected, None)


async def test_iter_sse_yields_events_and_is_strict_on_request() -> None:
    async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    got = [event async for event in iter_sse(chunks(b"data: a\n", b"\ndata: b\n\n"))]
    assert datas(got) == ["a", "b"]
    got = [event async for event in iter_sse(chunks(b"data: a\n\ndata: cut"))]
    assert datas(got) == ["a"]
    seen: list[SseEvent] = []
    strict = iter_sse(chunks(b"data: a\n\ndata: cut"), strict=True)
    with pytest.raises(ModelProviderError, match="ended inside event 2") as caught:
        await drain(strict, seen)
    assert datas(seen) == ["a"]
    assert caught.value.retryable is True


# -- JsonPoster.stream against a real server ------------------------------------------

Plan = Callable[["_Handler"], None]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        self.server.requests.append((dict(self.headers.items()), json.loads(body)))
        plan = self.server.plans.pop(0)
        plan(self)

    def start_stream(self, content_type: str = "text/event-stream") -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def cut(self) -> None:
        # The connection closes mid-body: no last chunk, so the client sees a broken body.
        self.close_connection = True
        self.wfile.flush()
        self.connection.shutdown(2)

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.plans: list[Plan] = []
        self.requests: list[tuple[dict[str, str], object]] = []
        self.step = threading.Event()  # the test lets the server go on
        self.closed = threading.Event()  # the server saw the client hang up


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server()
    thread = threading.Thread(target=running.serve_forever, daemon=True)
    thread.start()
    yield running
    running.shutdown()
    running.server_close()
    thread.join(5)


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
async def poster(server: _Server) -> AsyncIterator[JsonPoster]:
    made = JsonPoster(
        provider="openai",
        url=f"http://127.0.0.1:{server.server_address[1]}/v1/chat/completions",
        headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"},
        secret=KEY,
        key_env="OPENAI_API_KEY",
        timeout=10,
        max_retries=2,
        backoff=0.5,
        max_backoff=4,
        sleep=Sleeps(),
        client=None,
    )
    yield made
    await made.aclose()


def events_then_end(*datas: str) -> Plan:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        for data in datas:
            handler.chunk(f"data: {data}\n\n".encode())
        handler.end_stream()

    return plan


async def collect(poster: JsonPoster) -> list[str]:
    async with contextlib.aclosing(poster.stream({"stream": True})) as events:
        return [event.data async for event in events]


def assert_no_key(error: BaseException) -> None:
    assert KEY not in str(error)
    assert KEY not in repr(error)


async def test_events_are_yielded_as_they_arrive(server: _Server, poster: JsonPoster) -> None:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        handler.chunk(b"data: one\n\n")
        # The second event is sent only once the test has seen the first: a client that
        # buffered the whole body would wait here forever (and the wait times out).
        if handler.server.step.wait(10):
            handler.chunk(b'event: delta\ndata: {"text": "tw')
            handler.chunk(b'o"}\n\n')
        handler.end_stream()

    server.plans.append(plan)
    seen: list[SseEvent] = []
    async with contextlib.aclosing(poster.stream({"model": "m", "stream": True})) as events:
        async for event in events:
            seen.append(event)
            server.step.set()
    assert seen == [SseEvent(data="one"), SseEvent(event="delta", data='{"text": "two"}')]
    headers, body = server.requests[0]
    assert headers["authorization"] == f"Bearer {KEY}"
    assert headers["accept"] == "text/event-stream"
    assert body == {"model": "m", "stream": True}


async def test_a_500_then_success_is_retried(
    server: _Server, poster: JsonPoster, caplog: pytest.LogCaptureFixture
) -> None:
    error = json.dumps({"error": {"message": f"boom for key {KEY}"}}).encode()
    server.plans += [
        lambda handler: handler.answer(500, error),
        events_then_end("a", "b"),
    ]
    with caplog.at_level(logging.WARNING, logger="little_workflow.harness.models"):
        assert await collect(poster) == ["a", "b"]
    assert len(server.requests) == 2
    assert poster._sleep.calls == [0.5]  # type: ignore[attr-defined]
    assert "HTTP 500" in caplog.text
    assert "[redacted]" in caplog.text
    assert KEY not in caplog.text


async def test_a_refusal_is_mapped_like_post(server: _Server, poster: JsonPoster) -> None:
    error = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}"}}).encode()
    server.plans.append(lambda handler: handler.answer(401, error))
    with pytest.raises(ModelProviderError) as caught:
        await collect(poster)
    assert caught.value.status == 401
    assert caught.value.retryable is False
    assert "Incorrect API key provided: [redacted]" in caught.value.message
    assert "OPENAI_API_KEY" in caught.value.message
    assert len(server.requests) == 1
    assert_no_key(caught.value)


async def test_retries_spent_say_so(server: _Server, poster: JsonPoster) -> None:
    server.plans += [lambda handler: handler.answer(503, b'{"error": "busy"}')] * 3
    with pytest.raises(ModelProviderError, match="gave up after 3 attempts") as caught:
        await collect(poster)
    assert caught.value.retryable is True
    assert len(server.requests) == 3


async def test_a_cut_after_two_events_is_retryable_and_not_retried(
    server: _Server, poster: JsonPoster
) -> None:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        handler.chunk(b"data: a\n\ndata: b\n\ndata: par")
        handler.cut()

    server.plans += [plan, events_then_end("never asked for")]
    seen: list[SseEvent] = []
    with pytest.raises(ModelProviderError) as caught:
        await drain(poster.stream({}), seen)
    assert [event.data for event in seen] == ["a", "b"]
    assert caught.value.retryable is True
    assert "cut after 2 events" in caught.value.message
    assert len(server.requests) == 1
    assert poster._sleep.calls == []  # type: ignore[attr-defined]
    assert_no_key(caught.value)


async def test_a_clean_end_inside_an_event_is_a_cut(server: _Server, poster: JsonPoster) -> None:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        handler.chunk(b"data: a\n\ndata: b\n\ndata: half")
        handler.end_stream()

    server.plans.append(plan)
    with pytest.raises(ModelProviderError, match="cut after 2 events") as caught:
        await collect(poster)
    assert caught.value.retryable is True
    assert "ended inside event 3" in caught.value.message
    assert len(server.requests) == 1


async def test_a_cut_before_any_event_is_retried(server: _Server, poster: JsonPoster) -> None:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        handler.chunk(b"data: par")
        handler.cut()

    server.plans += [plan, events_then_end("whole")]
    assert await collect(poster) == ["whole"]
    assert len(server.requests) == 2


async def test_an_early_break_closes_the_connection(server: _Server, poster: JsonPoster) -> None:
    def plan(handler: _Handler) -> None:
        handler.start_stream()
        try:
            # Events keep coming until the client hangs up; a write then fails.
            for n in range(2000):
                handler.chunk(f"data: {n}\n\n".encode())
                if n:
                    handler.server.step.wait(0.005)
        except OSError:
            handler.server.closed.set()
            handler.close_connection = True
            return
        handler.end_stream()

    server.plans.append(plan)
    async with contextlib.aclosing(poster.stream({})) as events:
        async for event in events:
            assert event.data == "0"
            break
    # Waited for without giving the loop a turn: a generator dropped unclosed is also
    # closed eventually, by the loop's finalizer, and that must not pass for a close.
    assert server.closed.wait(10), "the server never saw a hang-up"


async def test_a_wrong_content_type_is_a_typed_error(server: _Server, poster: JsonPoster) -> None:
    server.plans.append(lambda handler: handler.answer(200, b'{"id": "x"}'))
    with pytest.raises(ModelProviderError) as caught:
        await collect(poster)
    assert "content-type 'application/json'" in caught.value.message
    assert "text/event-stream" in caught.value.message
    assert caught.value.retryable is False
    assert caught.value.status == 200
    assert len(server.requests) == 1
    assert_no_key(caught.value)


async def test_an_oversized_event_is_not_retried(server: _Server, poster: JsonPoster) -> None:
    server.plans.append(events_then_end("x" * 100))
    with pytest.raises(ModelProviderError, match="larger than 64 bytes") as caught:
        await drain(poster.stream({}, max_event_bytes=64), [])
    assert caught.value.retryable is False
    assert len(server.requests) == 1


async def test_an_empty_stream_yields_nothing(server: _Server, poster: JsonPoster) -> None:
    server.plans.append(events_then_end())
    assert await collect(poster) == []
