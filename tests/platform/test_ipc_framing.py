"""Framing, protocol frames and addresses: the I/O-free core of the IPC layer."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from little_workflow.platform.ipc import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    FrameError,
    FrameTooLargeError,
    InvalidAddressError,
    IpcAddress,
    UnknownFrameTypeError,
    decode_json,
    encode_frame,
    encode_json,
)
from little_workflow.platform.ipc._framing import JsonObject
from little_workflow.platform.ipc._protocol import (
    Bye,
    Durable,
    DurableAck,
    DurableResume,
    Hello,
    Message,
    parse_frame,
    to_wire,
)

FRAMES: list[JsonObject] = [
    {"type": "hello", "version": 2},
    {"type": "message", "payload": {"nested": [1, 2.5, None, True, "ü"]}},
    {"type": "durable", "seq": 7, "frame": '{"a":1}'},
    {"type": "bye"},
    {},
]


def _decode_all(decoder: FrameDecoder, data: bytes) -> list[JsonObject]:
    return list(decoder.feed(data))


def test_encode_frame_is_a_big_endian_length_then_json() -> None:
    data = encode_frame({"type": "bye"})
    assert data[:4] == (14).to_bytes(4, "big")
    assert data[4:] == b'{"type":"bye"}'
    assert encode_json({"type": "bye"}) == data[4:]


@pytest.mark.parametrize("frame", FRAMES)
def test_round_trip(frame: JsonObject) -> None:
    assert _decode_all(FrameDecoder(), encode_frame(frame)) == [frame]
    assert decode_json(encode_json(frame)) == frame


def test_an_escaped_surrogate_pair_is_text() -> None:
    assert decode_json(b'{"e": "\\ud83d\\ude00"}') == {"e": "\U0001f600"}


def test_frames_fed_byte_by_byte() -> None:
    data = b"".join(encode_frame(frame) for frame in FRAMES)
    decoder = FrameDecoder()
    out: list[JsonObject] = []
    for index in range(len(data)):
        out.extend(decoder.feed(data[index : index + 1]))
    assert out == FRAMES
    assert decoder.buffered == 0
    assert not decoder.mid_frame


def test_many_frames_in_one_read_and_a_split_tail() -> None:
    data = b"".join(encode_frame(frame) for frame in FRAMES * 3)
    decoder = FrameDecoder()
    first = _decode_all(decoder, data[:-5])
    assert first == (FRAMES * 3)[:-1]
    assert decoder.mid_frame
    assert _decode_all(decoder, data[-5:]) == [FRAMES[-1]]


def test_an_oversize_frame_is_refused_from_its_header_alone() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameTooLargeError) as caught:
        _decode_all(decoder, (101).to_bytes(4, "big"))
    assert caught.value.code == "ipc_frame_too_large"
    assert "101 bytes" in caught.value.message
    assert "limit is 100" in caught.value.message
    assert decoder.buffered == 0
    # Poisoned: the stream has no frame boundaries any more.
    with pytest.raises(FrameTooLargeError):
        decoder.feed(encode_frame({"type": "bye"}))


def test_a_4_gib_announcement_costs_four_bytes() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError):
        _decode_all(decoder, b"\xff\xff\xff\xff")


def test_a_frame_of_exactly_the_limit_passes() -> None:
    frame = {"p": "x" * 50}
    size = len(encode_json(frame))
    assert _decode_all(FrameDecoder(max_frame_bytes=size), encode_frame(frame)) == [frame]
    with pytest.raises(FrameTooLargeError):
        encode_frame(frame, max_frame_bytes=size - 1)


def test_the_default_limit_is_one_mib() -> None:
    assert MAX_FRAME_BYTES == 1024 * 1024
    assert FrameDecoder().max_frame_bytes == MAX_FRAME_BYTES


def test_good_frames_before_a_bad_one_come_out_first() -> None:
    data = encode_frame({"n": 1}) + (3).to_bytes(4, "big") + b"{x}" + encode_frame({"n": 2})
    decoder = FrameDecoder()
    frames = decoder.feed(data)
    assert next(frames) == {"n": 1}
    with pytest.raises(FrameError, match="not valid JSON"):
        next(frames)
    with pytest.raises(FrameError):
        decoder.feed(b"")


def _body(raw: bytes) -> bytes:
    return len(raw).to_bytes(4, "big") + raw


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json}", "not valid JSON"),
        (b"", "not valid JSON"),
        (b"[1, 2]", "not an array"),
        (b'"text"', "not a string"),
        (b"42", "not a number"),
        (b"null", "not null"),
        (b"true", "not a boolean"),
        (b'{"a": NaN}', "not valid JSON"),
        (b'{"a": -Infinity}', "not valid JSON"),
        (b'{"a": "\xff\xfe"}', "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"n": ' + b"9" * 10_000 + b"}", "not valid JSON"),
        (b'{"a": 1} trailing', "not valid JSON"),
        (b'{"a": "\\ud800"}', "lone surrogate"),
        (b'{"\\udfff": ["x"]}', "lone surrogate"),
    ],
)
def test_malformed_bodies_are_frame_errors(raw: bytes, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        _decode_all(FrameDecoder(max_frame_bytes=10**6), _body(raw))
    assert caught.value.code == "ipc_frame_invalid"
    assert reason.replace("not ", "") in caught.value.message or reason in caught.value.message


@pytest.mark.parametrize(
    "obj",
    [{"a": float("nan")}, {"a": b"bytes"}, {"a": "\udc80"}, {1: "int key"}, ["not", "a", "dict"]],
)
def test_encoding_what_is_not_json_is_a_frame_error(obj: object) -> None:
    with pytest.raises(FrameError):
        encode_frame(obj)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    chunks=st.lists(st.binary(max_size=64), max_size=30),
    limit=st.integers(min_value=1, max_value=256),
)
def test_fuzzed_bytes_give_frames_or_frame_errors_and_bounded_memory(
    chunks: list[bytes], limit: int
) -> None:
    decoder = FrameDecoder(max_frame_bytes=limit)
    for chunk in chunks:
        try:
            for frame in decoder.feed(chunk):
                assert isinstance(frame, dict)
        except FrameError:
            return
        # Never more than one partial frame: its body (<= limit) or an incomplete header.
        assert decoder.buffered <= max(limit, 3)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.dictionaries(st.text(), json_values, max_size=5), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=10),
)
def test_fuzzed_frames_survive_any_split(frames: list[JsonObject], cuts: list[int]) -> None:
    data = b"".join(encode_frame(frame) for frame in frames)
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    decoder = FrameDecoder()
    out: list[JsonObject] = []
    for start, end in itertools.pairwise(points):
        out.extend(decoder.feed(data[start:end]))
    assert out == json.loads(json.dumps(frames))  # tuples and -0.0 aside, the same values


# Protocol frames ------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Hello(version=1),
        Hello(version=2, token="s3cret"),
        Message(payload={"any": ["json", 1]}),
        Message(payload=None),
        Bye(),
        Bye(code="ipc_frame_invalid", reason="bad"),
        Durable(seq=1, frame="opaque"),
        DurableResume(acked_through=0),
        DurableAck(through_seq=12),
    ],
)
def test_protocol_frames_round_trip(frame: object) -> None:
    wire = to_wire(frame)  # type: ignore[arg-type]
    assert parse_frame(decode_json(encode_json(wire)), version=2) == frame


def test_the_wire_names_are_the_seeds() -> None:
    assert to_wire(DurableResume(acked_through=3)) == {"type": "durableResume", "ackedThrough": 3}
    assert to_wire(DurableAck(through_seq=4)) == {"type": "durableAck", "throughSeq": 4}
    assert to_wire(Durable(seq=5, frame="f")) == {"type": "durable", "seq": 5, "frame": "f"}


@pytest.mark.parametrize("kind", ["durable", "durableResume", "durableAck"])
def test_v2_frames_are_unknown_to_a_v1_connection(kind: str) -> None:
    obj: JsonObject = {"type": kind, "seq": 1, "frame": "", "ackedThrough": 0, "throughSeq": 0}
    with pytest.raises(UnknownFrameTypeError, match="protocol v2 frame"):
        parse_frame(obj, version=1)
    assert parse_frame(obj, version=2) is not None


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        ({"type": "nope"}, "unknown frame type 'nope'"),
        ({"version": 1}, "type must be a string, but it is missing"),
        ({"type": 3}, "type must be a string, but it is a int"),
        ({"type": "hello"}, "version must be an integer, but it is missing"),
        ({"type": "hello", "version": True}, "version must be an integer"),
        ({"type": "hello", "version": 0}, "version must be between 1"),
        ({"type": "hello", "version": 2, "token": 5}, "token must be a string"),
        ({"type": "message"}, "payload is missing"),
        ({"type": "durable", "seq": 0, "frame": "x"}, "seq must be between 1"),
        ({"type": "durable", "seq": 1, "frame": {"a": 1}}, "frame must be a string"),
        ({"type": "durable", "seq": 2**63, "frame": "x"}, "seq must be between"),
        ({"type": "durableResume", "ackedThrough": -1}, "ackedThrough must be between 0"),
        ({"type": "durableAck", "throughSeq": "3"}, "throughSeq must be an integer"),
        ({"type": "bye", "reason": "r" * 5000}, "reason is 5000 characters"),
    ],
)
def test_bad_protocol_frames_name_what_is_wrong(obj: JsonObject, fragment: str) -> None:
    with pytest.raises(FrameError) as caught:
        parse_frame(obj, version=2)
    assert fragment in caught.value.message


def test_unknown_fields_are_ignored() -> None:
    assert parse_frame({"type": "bye", "later": [1]}, version=2) == Bye()


# Addresses ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("unix:/tmp/lw/child.sock", IpcAddress.unix("/tmp/lw/child.sock")),
        ("tcp://127.0.0.1:7000", IpcAddress.tcp("127.0.0.1", 7000)),
        ("ws://127.0.0.1:7000", IpcAddress.ws("127.0.0.1", 7000)),
        ("tcp://[::1]:0", IpcAddress.tcp("::1", 0)),
        ("tcp://localhost:65535", IpcAddress.tcp("localhost", 65535)),
    ],
)
def test_addresses_parse_and_print(text: str, address: IpcAddress) -> None:
    assert IpcAddress.parse(text) == address
    assert str(address) == text
    assert IpcAddress.parse(str(address)) == address


def test_a_trailing_slash_on_a_ws_address_is_accepted() -> None:
    assert IpcAddress.parse("ws://127.0.0.1:80/") == IpcAddress.ws("127.0.0.1", 80)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "http://127.0.0.1:80",
        "tcp://127.0.0.1",
        "tcp://127.0.0.1:port",
        "tcp://127.0.0.1:70000",
        "tcp://:80",
        "ws://[::1]",
        "unix:",
        "unix:/tmp/\x00x",
        "unix:/" + "d" * 200,
    ],
)
def test_bad_addresses_are_refused(text: str) -> None:
    with pytest.raises(InvalidAddressError) as caught:
        IpcAddress.parse(text)
    assert caught.value.code == "ipc_address_invalid"


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        (IpcAddress.unix("/tmp/s"), True),
        (IpcAddress.tcp("127.0.0.1", 1), True),
        (IpcAddress.tcp("127.8.9.1", 1), True),
        (IpcAddress.ws("::1", 1), True),
        (IpcAddress.tcp("localhost", 1), True),
        (IpcAddress.tcp("0.0.0.0", 1), False),
        (IpcAddress.ws("10.1.2.3", 1), False),
        (IpcAddress.tcp("example.com", 1), False),
    ],
)
def test_loopback(address: IpcAddress, loopback: bool) -> None:
    assert address.is_loopback is loopback
