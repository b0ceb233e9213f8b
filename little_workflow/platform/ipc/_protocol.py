"""The IPC protocol's frames, v1 and v2, as typed values: parsing and the wire form.

I/O-free: the server and the client read a frame dict from a ``Connection``, call
``parse_frame`` with the version their connection negotiated, and act on the typed
value. Fields other than the ones named here are ignored, so a later minor addition
does not break an older peer; a missing or mistyped field is a ``FrameError`` naming
it, and a type the negotiated version does not have is an ``UnknownFrameTypeError``.

v1: ``hello {version, token?}``, ``message {payload}``, ``bye {code?, reason?}``.
v2 adds ``durable {seq, frame}`` (server to client), ``durableResume {ackedThrough}``
and ``durableAck {throughSeq}`` (client to server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from little_workflow.codec import JsonValue
from little_workflow.errors import FrameError, UnknownFrameTypeError
from little_workflow.platform.ipc._framing import JsonObject

__all__ = [
    "PROTOCOL_VERSION",
    "Bye",
    "Durable",
    "DurableAck",
    "DurableResume",
    "Frame",
    "Hello",
    "Message",
    "parse_frame",
    "to_wire",
]

#: The highest protocol version this implementation speaks.
PROTOCOL_VERSION = 2

_V1_TYPES = frozenset({"hello", "message", "bye"})
_V2_TYPES = frozenset({"durable", "durableResume", "durableAck"})

# Sequence numbers stay inside a signed 64-bit integer: what every peer language and
# database can hold. A larger one on the wire is hostile or broken.
_MAX_SEQ = 2**63 - 1
# A token or a reason longer than this is not a token or a reason.
_MAX_TEXT = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class Hello:
    """``hello``: the first frame each side sends; the connection speaks ``min`` of the two."""

    version: int
    token: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """``message``: an application frame, opaque to the protocol (non-durable)."""

    payload: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class Bye:
    """``bye``: the sender is closing. A ``code`` says it closed over an error."""

    code: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Durable:
    """``durable`` (v2, server to client): the application frame numbered ``seq``."""

    seq: int
    frame: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableResume:
    """``durableResume`` (v2, client to server, on every connect): replay what follows."""

    acked_through: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableAck:
    """``durableAck`` (v2, client to server): every frame up to ``through_seq`` is consumed."""

    through_seq: int


Frame: TypeAlias = Hello | Message | Bye | Durable | DurableResume | DurableAck


def _int_field(obj: JsonObject, name: str, kind: str, *, minimum: int) -> int:
    value = obj.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        shown = "missing" if name not in obj else f"a {type(value).__name__}"
        raise FrameError(f"{kind} frame: {name} must be an integer, but it is {shown}")
    if not minimum <= value <= _MAX_SEQ:
        raise FrameError(f"{kind} frame: {name} must be between {minimum} and 2**63-1, not {value}")
    return value


def _text_field(obj: JsonObject, name: str, kind: str) -> str | None:
    value = obj.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FrameError(f"{kind} frame: {name} must be a string, not a {type(value).__name__}")
    if len(value) > _MAX_TEXT:
        raise FrameError(
            f"{kind} frame: {name} is {len(value)} characters; the limit is {_MAX_TEXT}"
        )
    return value


def parse_frame(obj: JsonObject, *, version: int) -> Frame:
    """The typed frame ``obj`` holds, on a connection speaking protocol ``version``.

    Before the handshake is done, pass ``PROTOCOL_VERSION``.
    """
    kind = obj.get("type")
    if not isinstance(kind, str):
        shown = "missing" if "type" not in obj else f"a {type(kind).__name__}"
        raise FrameError(f"a frame's type must be a string, but it is {shown}")
    if kind not in _V1_TYPES and not (version >= 2 and kind in _V2_TYPES):
        shown = kind if len(kind) <= 64 else kind[:61] + "..."
        if kind in _V2_TYPES:
            raise UnknownFrameTypeError(
                f"{shown!r} is a protocol v2 frame; this connection speaks v{version}"
            )
        raise UnknownFrameTypeError(f"unknown frame type {shown!r}")
    if kind == "hello":
        return Hello(
            version=_int_field(obj, "version", kind, minimum=1),
            token=_text_field(obj, "token", kind),
        )
    if kind == "message":
        if "payload" not in obj:
            raise FrameError("message frame: payload is missing")
        return Message(payload=obj["payload"])
    if kind == "bye":
        return Bye(code=_text_field(obj, "code", kind), reason=_text_field(obj, "reason", kind))
    if kind == "durable":
        frame = obj.get("frame")
        if not isinstance(frame, str):
            shown = "missing" if "frame" not in obj else f"a {type(frame).__name__}"
            raise FrameError(f"durable frame: frame must be a string, but it is {shown}")
        return Durable(seq=_int_field(obj, "seq", kind, minimum=1), frame=frame)
    if kind == "durableResume":
        return DurableResume(acked_through=_int_field(obj, "ackedThrough", kind, minimum=0))
    return DurableAck(through_seq=_int_field(obj, "throughSeq", kind, minimum=0))


def to_wire(frame: Frame) -> JsonObject:
    """The JSON object that carries ``frame`` (optional fields left out when unset)."""
    if isinstance(frame, Hello):
        hello: JsonObject = {"type": "hello", "version": frame.version}
        if frame.token is not None:
            hello["token"] = frame.token
        return hello
    if isinstance(frame, Message):
        return {"type": "message", "payload": frame.payload}
    if isinstance(frame, Bye):
        bye: JsonObject = {"type": "bye"}
        if frame.code is not None:
            bye["code"] = frame.code
        if frame.reason is not None:
            bye["reason"] = frame.reason
        return bye
    if isinstance(frame, Durable):
        return {"type": "durable", "seq": frame.seq, "frame": frame.frame}
    if isinstance(frame, DurableResume):
        return {"type": "durableResume", "ackedThrough": frame.acked_through}
    return {"type": "durableAck", "throughSeq": frame.through_seq}
