"""The IPC package's public surface is deliberate: this test pins it."""

from __future__ import annotations

import inspect

from little_workflow.errors import InvalidInputError, LittleWorkflowError
from little_workflow.platform import ipc


def _isort_style(name: str) -> tuple[int, str]:
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted_and_complete() -> None:
    assert ipc.__all__ == sorted(ipc.__all__, key=_isort_style)
    assert len(set(ipc.__all__)) == len(ipc.__all__)
    for name in ipc.__all__:
        assert hasattr(ipc, name), name


def test_public_names_are_pinned() -> None:
    assert set(ipc.__all__) == {
        "MAX_FRAME_BYTES",
        "PROTOCOL_VERSION",
        "AckBeyondLastSeqError",
        "Connection",
        "DurableClient",
        "DurableOutboundQueue",
        "DurableServer",
        "FrameDecoder",
        "FrameError",
        "FrameTooLargeError",
        "InvalidAddressError",
        "IpcAddress",
        "IpcAuthError",
        "IpcConnectionError",
        "IpcError",
        "IpcProtocolError",
        "Listener",
        "QueueEntry",
        "ReceivedFrame",
        "ReconnectPolicy",
        "SequenceGapError",
        "UnknownFrameTypeError",
        "ack_key",
        "create_durable_outbound_queue",
        "decode_json",
        "dial",
        "encode_frame",
        "encode_json",
        "listen",
    }


def test_every_public_name_has_a_docstring() -> None:
    for name in ipc.__all__:
        value = getattr(ipc, name)
        if isinstance(value, int):
            continue
        assert inspect.getdoc(value), name
        if inspect.isclass(value):
            for attr, member in vars(value).items():
                public = not attr.startswith("_")
                if public and (callable(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attr}"


def test_errors_have_stable_codes_under_the_one_root() -> None:
    codes: dict[type[LittleWorkflowError], str] = {
        ipc.FrameError: "ipc_frame_invalid",
        ipc.FrameTooLargeError: "ipc_frame_too_large",
        ipc.UnknownFrameTypeError: "ipc_frame_unknown_type",
        ipc.IpcProtocolError: "ipc_protocol_error",
        ipc.AckBeyondLastSeqError: "ipc_ack_beyond_last_seq",
        ipc.InvalidAddressError: "ipc_address_invalid",
        ipc.IpcError: "ipc_error",
        ipc.IpcConnectionError: "ipc_connection_failed",
        ipc.IpcAuthError: "ipc_auth_failed",
        ipc.SequenceGapError: "ipc_sequence_gap",
    }
    for error, code in codes.items():
        assert error.code == code
        assert issubclass(error, LittleWorkflowError)
    for error in (ipc.FrameError, ipc.IpcProtocolError, ipc.AckBeyondLastSeqError):
        assert issubclass(error, InvalidInputError)
