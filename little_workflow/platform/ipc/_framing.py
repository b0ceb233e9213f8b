"""Framing: one JSON object per frame, length-prefixed on byte streams.

On a stream (Unix socket, TCP) a frame is a 4-byte big-endian unsigned length followed
by that many bytes of UTF-8 JSON whose top level is an object. A WebSocket message
already has boundaries, so it carries the JSON text alone (``encode_json`` /
``decode_json``).

The length is checked against ``max_frame_bytes`` as soon as the four header bytes are
in, before any of the body is buffered: a peer announcing a 4 GiB frame costs four
bytes. ``FrameDecoder`` therefore never holds more than one partial frame (at most
``max_frame_bytes`` of body) beyond the chunk it was just fed.

JSON is parsed strictly: ``NaN`` and the infinities are refused (they are not JSON, and
the codec would refuse to store them), as are deeply nested documents (the stdlib
parser would recurse until ``RecursionError``) and invalid UTF-8. Every failure is a
``FrameError`` saying what was wrong; nothing else escapes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import NoReturn

from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import FrameError, FrameTooLargeError, InvalidValueError

__all__ = [
    "HEADER_BYTES",
    "MAX_FRAME_BYTES",
    "FrameDecoder",
    "JsonObject",
    "decode_json",
    "encode_frame",
    "encode_json",
]

#: The default limit on one frame's JSON body, in bytes (1 MiB).
MAX_FRAME_BYTES = 1024 * 1024

#: The length prefix: 4 bytes, big-endian, unsigned.
HEADER_BYTES = 4

JsonObject = dict[str, JsonValue]

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _check_limit(max_frame_bytes: int) -> int:
    if isinstance(max_frame_bytes, bool) or not isinstance(max_frame_bytes, int):
        raise TypeError("max_frame_bytes must be an int")
    if not 1 <= max_frame_bytes < 2**32:
        raise ValueError(f"max_frame_bytes must be between 1 and 2**32 - 1, not {max_frame_bytes}")
    return max_frame_bytes


def encode_json(obj: Mapping[str, object], *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """The UTF-8 JSON body of a frame, without the length prefix (a WebSocket message).

    ``FrameError`` if ``obj`` is not JSON (a NaN, bytes, a lone surrogate, ...) and
    ``FrameTooLargeError`` if the body is over ``max_frame_bytes``: a sender refuses
    what its peer would refuse, before anything is written.
    """
    if not isinstance(obj, Mapping):
        raise FrameError(f"a frame must be a JSON object, not a {type(obj).__name__}")
    try:
        # The stdlib encoder would turn a key 1 into "1" and back into a different
        # frame; the codec's check refuses it (and NaN, bytes, ...) by name.
        check_json_value(dict(obj), where="frame")
        body = _ENCODER.encode(obj).encode("utf-8")
    except InvalidValueError as exc:
        raise FrameError(f"the frame is not JSON: {exc.message}") from exc
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise FrameError(f"the frame is not JSON: {exc}") from exc
    if len(body) > max_frame_bytes:
        raise FrameTooLargeError(
            f"the frame is {len(body)} bytes of JSON; the limit is {max_frame_bytes}"
        )
    return body


def encode_frame(obj: Mapping[str, object], *, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """One stream frame: the 4-byte big-endian length of the JSON body, then the body."""
    body = encode_json(obj, max_frame_bytes=max_frame_bytes)
    return len(body).to_bytes(HEADER_BYTES, "big") + body


def decode_json(data: bytes | str) -> JsonObject:
    """Parse one frame body (a stream frame's body or a WebSocket message).

    ``FrameError`` unless it is UTF-8 JSON whose top level is an object.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        value = _DECODER.decode(text)
    except UnicodeDecodeError as exc:
        raise FrameError(f"the frame is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except RecursionError as exc:
        raise FrameError("the frame's JSON is nested too deeply") from exc
    except ValueError as exc:  # json.JSONDecodeError, the int-digits limit, NaN
        raise FrameError(f"the frame is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise FrameError(f"a frame must be a JSON object, not {_json_kind(value)}")
    if _SURROGATE_ESCAPE.search(text) is not None and _has_lone_surrogate(value):
        # "\ud800" is valid JSON syntax but not text: it could not be stored, encoded
        # or compared, so it is refused here rather than deep inside whoever reads it.
        raise FrameError("the frame holds a lone surrogate escape, which is not valid text")
    return value


# Only an escape can put a surrogate into a decoded string (UTF-8 cannot carry one), so the
# walk below runs only for frames that hold one: a pair for an emoji, usually.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")


def _has_lone_surrogate(value: object) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


class FrameDecoder:
    """Turns a byte stream into frames: feed it whatever the socket returned.

    ``feed`` buffers the bytes at once and returns an iterator over the frames now
    complete, in order. A bad frame raises ``FrameError`` from that iterator after the
    good frames before it; the decoder is then *poisoned* (the stream has lost its frame
    boundaries) and raises the same error on every later ``feed``.
    """

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = _check_limit(max_frame_bytes)
        self._buffer = bytearray()
        self._need: int | None = None  # body length once the header is read
        self._error: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet make a whole frame (plus any not yet iterated)."""
        return len(self._buffer)

    @property
    def mid_frame(self) -> bool:
        """Whether the bytes fed so far end inside a frame (EOF now would truncate one)."""
        return bool(self._buffer) or self._need is not None

    def feed(self, data: bytes) -> Iterator[JsonObject]:
        """Buffer ``data`` and return an iterator over the frames it completes."""
        if self._error is not None:
            raise self._error
        self._buffer += data
        return self._drain()

    def _drain(self) -> Iterator[JsonObject]:
        while True:
            if self._error is not None:
                raise self._error
            if self._need is None:
                if len(self._buffer) < HEADER_BYTES:
                    return
                length = int.from_bytes(self._buffer[:HEADER_BYTES], "big")
                if length > self.max_frame_bytes:
                    self._fail(
                        FrameTooLargeError(
                            f"the peer announced a frame of {length} bytes; "
                            f"the limit is {self.max_frame_bytes}"
                        )
                    )
                del self._buffer[:HEADER_BYTES]
                self._need = length
            if len(self._buffer) < self._need:
                return
            body = bytes(self._buffer[: self._need])
            del self._buffer[: self._need]
            self._need = None
            try:
                frame = decode_json(body)
            except FrameError as exc:
                self._fail(exc)
            yield frame

    def _fail(self, error: FrameError) -> NoReturn:
        self._error = error
        self._buffer.clear()  # a poisoned stream's bytes are worthless; free them
        raise error
