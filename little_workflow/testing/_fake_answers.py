"""What ``FakeModelServer`` answers, in each platform's shape, and how it is written out.

Split from ``fake_models`` so that it holds the server (its lifecycle, faults and
recording) and this module the answers: an error in the platform's shape (OpenAI's,
Anthropic's, Bedrock's), a credential refused as each platform refuses it, and a
streamed answer framed as SSE or as AWS's event stream, faults applied.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from little_workflow.harness.models import ModelRequest
from little_workflow.testing._fake_aws import (
    EVENT_STREAM,
    bedrock_credential,
    bedrock_error,
    chunk_message,
    exception_message,
)
from little_workflow.testing._fake_routes import Route, presented_credential, vertex_credential
from little_workflow.testing._fake_stream import (
    anthropic_error_event,
    anthropic_events,
    anthropic_payloads,
    openai_chunks,
    openai_error_event,
)
from little_workflow.testing._fake_wire import anthropic_error_body, openai_error_body

__all__ = [
    "Answer",
    "Failure",
    "StreamFault",
    "credential_refusal",
    "send_json",
    "send_stream",
    "stream_parts",
    "streams",
]


@dataclass(frozen=True, slots=True)
class Failure:
    """An injected failure of one request."""

    status: int  # 0 drops the connection instead of answering
    message: str | None
    retry_after: float | None


@dataclass(frozen=True, slots=True)
class StreamFault:
    """An injected fault of one streamed answer."""

    after: int  # events sent before the fault
    status: int  # 0 cuts the connection; else an error event in this status's shape
    message: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """One answer to send: its status, JSON body, extra headers, the request it answers."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)
    request: ModelRequest | None = None

    @classmethod
    def error(
        cls,
        route: Route,
        status: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        request: ModelRequest | None = None,
    ) -> Answer:
        """An error answer in the shape of ``route``'s platform."""
        extra = dict(headers or {})
        body: Mapping[str, Any]
        if route.platform == "bedrock":
            body, named = bedrock_error(status, message)
            extra.update(named)
        elif route.wire == "openai":
            body = openai_error_body(status, message)
        else:
            body = anthropic_error_body(status, message)
        return cls(status=status, body=body, headers=extra, request=request)


def _shown(key: str, echo: bool) -> str:
    return key if echo else f"{key[:3]}***{key[-4:]}"


def _cloud_refusal(
    route: Route, headers: Mapping[str, str], api_key: str, *, echo: bool
) -> Answer | None:
    if route.platform == "bedrock":
        refused = bedrock_credential(headers, api_key, echo=echo)
        if refused is None:
            return None
        name, text = refused
        body, named = bedrock_error(403, text, name)
        return Answer(status=403, body=body, headers=named)
    why = vertex_credential(headers, api_key, echo=echo)
    if why is None:
        return None
    # Google's own error shape: Vertex refuses before any model sees the call.
    google = {"error": {"code": 401, "message": why, "status": "UNAUTHENTICATED"}}
    return Answer(status=401, body=google)


def credential_refusal(
    route: Route, headers: Mapping[str, str], api_key: str, *, echo: bool
) -> Answer | None:
    """The platform's refusal of the request's credential; ``None`` when it is ``api_key``.

    ``echo`` quotes a wrong key whole instead of masked (``sk-***1234``).
    """
    if route.platform in ("bedrock", "vertex"):
        return _cloud_refusal(route, headers, api_key, echo=echo)
    presented = presented_credential(route.wire, headers)
    if isinstance(presented, str):
        return Answer.error(route, 401, presented)
    credential, key = presented
    if key == api_key:
        return None
    shown = _shown(key, echo)
    if route.wire == "openai":
        return Answer.error(route, 401, f"Incorrect {credential} provided: {shown}.")
    return Answer.error(route, 401, f"invalid {credential}: {shown}")


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: Mapping[str, Any],
    headers: Mapping[str, str] | None = None,
) -> None:
    """One whole JSON answer."""
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)


def streams(route: Route, body: Any) -> bool:
    """Whether the request asks for a stream: in its path on the clouds, else its body."""
    if route.stream is not None:
        return route.stream
    return isinstance(body, dict) and body.get("stream") is True


def _error_event(route: Route, status: int, message: str) -> str:
    if route.wire == "anthropic":
        return anthropic_error_event(anthropic_error_body(status, message))
    return openai_error_event(openai_error_body(status, message))


def stream_parts(
    route: Route, request_body: Any, answer: Mapping[str, Any], fault: StreamFault | None
) -> tuple[str, list[bytes]]:
    """The content type and the framed events of a streamed ``answer``, ``fault`` applied.

    A fault with a status puts an error event after ``fault.after`` events, in the
    platform's shape, instead of the rest (as the real APIs end a stream that failed);
    one without keeps the first ``fault.after`` (``send_stream`` then cuts).
    """
    message = None
    if fault is not None and fault.status:
        message = fault.message or f"injected stream error: HTTP {fault.status}"
    if route.platform == "bedrock":
        frames = [chunk_message(event) for event in anthropic_payloads(answer)]
        if fault is not None:
            frames = frames[: fault.after]
            if message is not None:
                frames.append(exception_message(fault.status, message))
        return EVENT_STREAM, frames
    if route.wire == "anthropic":
        events = anthropic_events(answer)
    else:
        options = request_body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        events = openai_chunks(answer, include_usage=include_usage)
    if fault is not None:
        events = events[: fault.after]
        if message is not None:
            events.append(_error_event(route, fault.status, message))
    return "text/event-stream; charset=utf-8", [event.encode("utf-8") for event in events]


def send_stream(
    handler: BaseHTTPRequestHandler,
    content_type: str,
    parts: list[bytes],
    *,
    cut: bool,
    pause: float = 0.0,
) -> None:
    """``parts`` as a chunked body, each flushed as it goes, ``pause`` seconds apart.

    ``cut`` ends the connection after them without the closing chunk: the client sees
    the stream cut, not ended.
    """
    handler.send_response(200)
    handler.send_header("content-type", content_type)
    handler.send_header("cache-control", "no-cache")
    handler.send_header("transfer-encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()
    for index, data in enumerate(parts):
        if pause and index:
            time.sleep(pause)
        handler.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
        handler.wfile.flush()
    if cut:
        handler.close_connection = True  # no closing chunk: the body is cut
        return
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()
