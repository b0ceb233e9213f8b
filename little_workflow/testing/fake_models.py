"""``FakeModelServer``: a local HTTP server that speaks the OpenAI and Anthropic wire formats.

It answers ``POST /v1/chat/completions`` and ``POST /chat/completions`` (OpenAI-style;
also Azure OpenAI's ``/openai/deployments/<name>/chat/completions``, with its ``api-key``
header) and ``POST /v1/messages`` (Anthropic-style), and Claude's routes on the two
clouds (``_fake_routes``): Vertex AI's ``.../publishers/anthropic/models/<model>:rawPredict``
and ``:streamRawPredict``, Amazon Bedrock's ``/model/<id>/invoke`` and
``/invoke-with-response-stream``. It answers from a ``Script``, the one the ``scripted``
provider uses, so one script drives any of the providers. It checks each request
as the real API would (required fields, roles, tool calls answered, the API key when
one is configured) and refuses a bad one with that API's error shape and status. It can
fail on purpose (``fail_next``, ``disconnect_next``), records every request, and can
append one line per request to a count file, which outlives a client that is killed.

A request with ``"stream": true`` is answered with server-sent events in the API's
shapes (``_fake_stream``); ``cut_stream_after`` and ``error_mid_stream`` break a stream
on purpose.

Credentials, when ``api_key`` is set: OpenAI routes take ``Authorization: Bearer KEY``;
Anthropic routes take ``x-api-key: KEY`` or ``Authorization: Bearer KEY`` (what the
official SDK sends for ``api_key=`` and ``auth_token=``), with an ``anthropic-version``
that is a date, 2023-06-01 or later (a missing or malformed one is the API's 400). A
wrong credential is a 401 naming which credential was wrong (``invalid bearer token``,
``invalid x-api-key``), the key masked. Vertex takes the key as its OAuth bearer token
(a 401 in Google's error shape); Bedrock as the access key id of an AWS Signature V4
(a 403, as Bedrock's; the signature is not checked: ``_fake_aws``) or as a Bedrock API
key. Both clouds take the model from the path and need ``anthropic_version`` in the
body; a Bedrock stream is AWS's binary event stream, not SSE.

Usage: a reply can say the ``Usage`` its answer reports (``{"content": "hi", "usage":
{"input_tokens": 1200, "output_tokens": 90, "cached_input_tokens": 1000,
"cache_write_tokens": 150, "reasoning_tokens": 40}}``, see ``ScriptReply``). OpenAI
answers carry it as ``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
``prompt_tokens_details.cached_tokens`` (and ``cache_write_tokens`` when there is a
write), ``completion_tokens_details.reasoning_tokens``; Anthropic answers as
``input_tokens`` (the uncached rest), ``output_tokens``, ``cache_read_input_tokens``,
``cache_creation_input_tokens`` and ``output_tokens_details.thinking_tokens`` (when
there was thinking). Without one, the answer reports ``estimated_usage``: about four
characters a token of the request and of the answer, never zero. The scripted provider
and both httpx providers return the same ``Usage`` for one script.

The official ``openai`` and ``anthropic`` SDKs work against the fakes, streaming
included: give the client ``base_url=server.openai_base_url`` (OpenAI),
``base_url=server.url`` (Anthropic, ``AnthropicBedrock``, ``AzureOpenAI``'s
``azure_endpoint``) or ``base_url=server.vertex_base_url`` (``AnthropicVertex``), and
``max_retries=0`` to see an injected error as the SDK's exception (``RateLimitError``
for a 429); tests/harness/test_fake_models_sdk.py and test_sdk_clouds.py do.

In a test::

    with FakeModelServer(["hello"], api_key="sk-test") as server:   # or ``async with``
        provider = OpenAICompatibleProvider(server.openai_base_url, ...)
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test")

As a separate process (for tests that kill the client)::

    python -m little_workflow.testing.fake_models --port 0 --script replies.json \\
        --count-file calls.txt [--api-key-env NAME] [--delay SECONDS] [--event-delay S]

prints its URL on the first line of stdout and serves until terminated. The script file
holds a JSON list of replies (see ``ScriptReply``), or ``{"replies": [...], "index_by":
"turn"}``. The key is taken from an environment variable, never from the command line,
where any user of the machine could read it.

A stdlib ``ThreadingHTTPServer`` in a background thread was chosen over an asyncio
server: it serves sync and async tests alike, with no event loop to share, and parses
HTTP without help. An ``async`` script function runs in the handling thread's own loop.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import ModelRequest, Script, ScriptFunction, ScriptReply
from little_workflow.references import import_reference
from little_workflow.testing._fake_answers import (
    Answer,
    Failure,
    StreamFault,
    credential_refusal,
    send_json,
    send_stream,
    stream_parts,
    streams,
)
from little_workflow.testing._fake_routes import (
    Platform,
    Route,
    Wire,
    anthropic_version_error,
    messages_body,
    route,
)
from little_workflow.testing._fake_wire import (
    WireError,
    anthropic_request,
    anthropic_response,
    forced_answer,
    openai_error_body,
    openai_request,
    openai_response,
)

__all__ = ["FakeModelServer", "RecordedRequest", "main"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedRequest:
    """One request the server received, and the status it answered (0: no answer)."""

    #: 1 for the first request the server received.
    seq: int
    #: The wire format of the route, ``None`` for an unknown route.
    wire: Wire | None
    method: str
    path: str
    #: Header names in lower case.
    headers: Mapping[str, str]
    #: The parsed JSON body, ``None`` when it was not JSON.
    body: Any
    status: int
    #: The provider-neutral request the script saw, when the request was valid.
    request: ModelRequest | None
    #: The JSON body of the answer, ``None`` when the connection was dropped.
    response: Any
    #: The platform of the route (``azure``, ``vertex``, ...), ``None`` for an unknown one.
    platform: Platform | None = None
    #: Whether the request asked for a stream, in its body or (on the clouds) its path.
    streamed: bool = False


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: FakeModelServer

    def __init__(self, address: tuple[str, int], owner: FakeModelServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hung up, or a connection cut by ``stop``, is not worth a traceback
        # on stderr; anything else is.
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, a kept-alive connection
    # waits for the client's delayed ACK between them, some 40 ms per request.
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the server records requests instead of logging them."""


class FakeModelServer:
    """A real HTTP server on 127.0.0.1 answering both wire formats from a ``Script``.

    ``api_key``, when set, must arrive as ``Authorization: Bearer`` (OpenAI routes) or as
    ``x-api-key`` or ``Authorization: Bearer`` (Anthropic routes, as the real API takes
    both; ``x-api-key`` is checked when both come). Anthropic routes also need an
    ``anthropic-version`` that is a date, 2023-06-01 or later. A refusal names the
    credential that was wrong and shows it masked (``sk-***1234``);
    ``echo_credentials`` makes it quote the credential whole, as some careless servers
    do, to test that clients redact it. On Vertex's routes the key is the bearer token;
    on Bedrock's, the access key id the request is signed with (see the module's
    docstring).
    ``delay`` seconds pass (really) before each answer, and ``event_delay`` between two
    events of a streamed one: for tests that kill a client while a call is in flight, or
    in the middle of its stream. ``count_file`` gets one JSON line per request, written
    when the request arrives, before any answer.
    """

    def __init__(
        self,
        script: Script | Sequence[ScriptReply] | ScriptFunction = (),
        *,
        api_key: str | None = None,
        echo_credentials: bool = False,
        count_file: str | os.PathLike[str] | None = None,
        delay: float = 0.0,
        event_delay: float = 0.0,
        host: str = "127.0.0.1",
        port: int = 0,
        index_by: Literal["call", "turn"] = "call",
    ) -> None:
        self.script = script if isinstance(script, Script) else Script(script, index_by=index_by)
        self.api_key = api_key
        self.echo_credentials = echo_credentials
        self.count_file = Path(count_file) if count_file is not None else None
        self.delay = delay
        self.event_delay = event_delay
        self._address = (host, port)
        self._lock = threading.Lock()
        self._seq = 0
        self._failures: list[Failure] = []
        self._stream_faults: list[StreamFault] = []
        self._requests: list[RecordedRequest] = []
        self._in_flight = 0
        #: The most requests this server was handling at once (arrived, not answered).
        self.peak_in_flight = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        where = self.url if self._server is not None else "stopped"
        return f"FakeModelServer({where}, requests={len(self._requests)})"

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a background thread; returns the server, for chaining."""
        if self._server is None:
            self._server = _Server(self._address, self)
            self._thread = threading.Thread(
                target=self._server.serve_forever,
                kwargs={"poll_interval": 0.05},  # how long ``stop`` may wait for the loop
                name=f"fake-model-server-{self.port}",
                daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open connections, release the port; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        with server.connections_lock:
            connections = list(server.connections)
        for connection in connections:
            # Wakes handler threads blocked reading a kept-alive connection.
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self.start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def port(self) -> int:
        """The bound port (the server must be started)."""
        if self._server is None:
            raise RuntimeError("the fake model server is not started")
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the Anthropic provider's ``base_url``."""
        return f"http://{self._address[0]}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``<url>/v1``: the OpenAI-compatible provider's ``base_url``."""
        return f"{self.url}/v1"

    @property
    def vertex_base_url(self) -> str:
        """``<url>/v1``: an ``AnthropicVertex`` client's ``base_url`` (its API's root)."""
        return f"{self.url}/v1"

    # -- fault injection and inspection ----------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 429,
        message: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        """Answer the next ``count`` requests with ``status`` in the route's error shape."""
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status, not {status!r}")
        with self._lock:
            self._failures.extend(Failure(status, message, retry_after) for _ in range(count))

    def disconnect_next(self, count: int = 1) -> None:
        """Close the connection without answering the next ``count`` requests."""
        with self._lock:
            self._failures.extend(Failure(0, None, None) for _ in range(count))

    def cut_stream_after(self, events: int, count: int = 1) -> None:
        """Cut the next ``count`` streamed answers after ``events`` events (0: before any).

        Only requests with ``"stream": true`` take these; the connection ends without the
        chunked body's end, so the client sees the stream cut, not ended.
        """
        if events < 0:
            raise ValueError(f"events must be zero or more, not {events!r}")
        with self._lock:
            self._stream_faults.extend(StreamFault(events, 0, None) for _ in range(count))

    def error_mid_stream(
        self, after: int = 1, *, status: int = 529, message: str | None = None, count: int = 1
    ) -> None:
        """Send an error event after ``after`` events of the next ``count`` streamed answers.

        In the route's shape: Anthropic's ``event: error`` with ``{"type": "error",
        "error": {...}}``, OpenAI's ``data: {"error": {...}}``, Bedrock's ``exception``
        message (``throttlingException`` for a 429); ``status`` picks the error's type
        as ``fail_next`` does (529: ``overloaded_error``).
        """
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status, not {status!r}")
        with self._lock:
            self._stream_faults.extend(StreamFault(after, status, message) for _ in range(count))

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every answered request so far, in arrival order (a copy)."""
        with self._lock:
            return sorted(self._requests, key=lambda recorded: recorded.seq)

    @property
    def last_request(self) -> RecordedRequest:
        """The latest answered request; ``IndexError`` if there was none."""
        return self.requests[-1]

    # -- handling ----------------------------------------------------------------------

    def _arrive(self, path: str) -> int:
        with self._lock:
            self._seq += 1
            seq = self._seq
            if self.count_file is not None:
                with self.count_file.open("a", encoding="utf-8") as out:
                    out.write(json.dumps({"seq": seq, "path": path, "pid": os.getpid()}) + "\n")
            return seq

    def _refusal(
        self, route: Route, headers: Mapping[str, str], failure: Failure | None
    ) -> Answer | None:
        # An injected failure comes first, whatever the request: "the next request gets
        # a 429" is what a test that injects one means.
        if failure is not None:
            extra = {"retry-after": f"{failure.retry_after:g}"} if failure.retry_after else {}
            message = failure.message or f"injected failure: HTTP {failure.status}"
            return Answer.error(route, failure.status, message, headers=extra)
        refused = (
            None
            if self.api_key is None
            else credential_refusal(route, headers, self.api_key, echo=self.echo_credentials)
        )
        if refused is not None:
            return refused
        if route.platform == "anthropic":
            version = anthropic_version_error(headers.get("anthropic-version"))
            if version is not None:
                return Answer.error(route, 400, version)
        return None

    def _answer(
        self, route: Route, headers: Mapping[str, str], body: Any, failure: Failure | None
    ) -> Answer:
        refusal = self._refusal(route, headers, failure)
        if refusal is not None:
            return refusal
        try:
            body = messages_body(route, body)
            request = openai_request(body) if route.wire == "openai" else anthropic_request(body)
        except WireError as exc:
            return Answer.error(route, exc.status, exc.message)
        if self.delay:
            time.sleep(self.delay)
        try:
            response = asyncio.run(self.script.respond(request))
        except ModelProviderError as exc:
            # The script's own errors (an error item, no reply left) keep their status;
            # without one they are the caller's problem, not worth retrying: 400.
            return Answer.error(route, exc.status or 400, exc.message, request=request)
        except Exception as exc:  # a script function that raised: a server bug, 500
            message = f"the script raised {type(exc).__name__}: {exc}"
            return Answer.error(route, 500, message, request=request)
        if route.wire == "anthropic":
            response = forced_answer(request, response)
        try:
            rendered = (
                openai_response(response)
                if route.wire == "openai"
                else anthropic_response(response)
            )
        except WireError as exc:  # a script answer no model could give
            return Answer.error(route, exc.status, exc.message, request=request)
        return Answer(status=200, body=rendered, request=request)

    def _handle(self, handler: _Handler) -> None:
        with self._lock:
            self._in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        try:
            self._handle_one(handler)
        finally:
            with self._lock:
                self._in_flight -= 1

    def _handle_one(self, handler: _Handler) -> None:
        path = handler.path.split("?", 1)[0]
        seq = self._arrive(path)
        length = int(handler.headers.get("content-length") or 0)
        raw = handler.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in handler.headers.items()}
        try:
            body: Any = json.loads(raw) if raw else None
        except (ValueError, UnicodeDecodeError):
            body = None
        found = route(handler.command, path)
        answer: Answer | None
        if found is None:
            message = f"Unknown request URL: {handler.command} {path}."
            answer = Answer(status=404, body=openai_error_body(404, message))
        else:
            with self._lock:
                failure = self._failures.pop(0) if self._failures else None
            dropped = failure is not None and failure.status == 0
            answer = None if dropped else self._answer(found, headers, body, failure)
        streamed = found is not None and streams(found, body)
        # Recorded before answering: a client that got its answer finds its request here.
        recorded = RecordedRequest(
            seq=seq,
            wire=found.wire if found else None,
            method=handler.command,
            path=path,
            headers=headers,
            body=body,
            status=answer.status if answer else 0,
            request=answer.request if answer else None,
            response=answer.body if answer else None,
            platform=found.platform if found else None,
            streamed=streamed,
        )
        with self._lock:
            self._requests.append(recorded)
        if answer is None:
            handler.close_connection = True  # and say nothing: the client sees EOF
        elif answer.status == 200 and found is not None and streamed:
            with self._lock:
                fault = self._stream_faults.pop(0) if self._stream_faults else None
            content_type, parts = stream_parts(found, body, answer.body, fault)
            cut = fault is not None and not fault.status
            send_stream(handler, content_type, parts, cut=cut, pause=self.event_delay)
        else:
            send_json(handler, answer.status, answer.body, answer.headers)


def _load_script(path: str, index_by: Literal["call", "turn"]) -> Script:
    if ":" in path and not Path(path).exists():
        # ``package.module:attr``: a script function (or a list of replies) in Python,
        # for scripts that answer by what the request says (which session, which turn).
        target: Any = import_reference(path, what="--script")
        return target if isinstance(target, Script) else Script(target, index_by=index_by)
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        index_by = data.get("index_by", index_by)
        data = data.get("replies")
    if not isinstance(data, list):
        raise SystemExit(f"{path}: a script is a JSON list of replies or {{'replies': [...]}}")
    return Script(data, index_by=index_by)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a ``FakeModelServer`` until terminated; print its URL first."""
    parser = argparse.ArgumentParser(
        prog="python -m little_workflow.testing.fake_models",
        description="A local server speaking the OpenAI and Anthropic wire formats.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument(
        "--script", required=True, help="a JSON file of replies, or package.module:attr"
    )
    parser.add_argument("--count-file", help="append one line per request here")
    parser.add_argument("--api-key-env", help="require the key held by this variable")
    parser.add_argument("--echo-credentials", action="store_true")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument(
        "--event-delay", type=float, default=0.0, help="seconds between two streamed events"
    )
    parser.add_argument("--index-by", choices=("call", "turn"), default="call")
    args = parser.parse_args(argv)
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        parser.error(f"the environment variable {args.api_key_env} is not set")
    server = FakeModelServer(
        _load_script(args.script, args.index_by),
        api_key=api_key,
        echo_credentials=args.echo_credentials,
        count_file=args.count_file,
        delay=args.delay,
        event_delay=args.event_delay,
        host=args.host,
        port=args.port,
    )

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    server.start()
    try:
        sys.stdout.write(server.url + "\n")
        sys.stdout.flush()
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
