"""Durable IPC: a persisted outbound queue, protocol v1/v2, three transports.

``DurableOutboundQueue`` numbers and persists outbound frames; ``DurableServer``
publishes it over a Unix socket, TCP or a WebSocket (one code path, one ``Connection``
interface); ``DurableClient`` receives the frames in order, acks them, and resumes
after a dropped connection or a restart with no gap and no duplicate. The wire format
and the rules are in ``docs/ipc.md``.

Errors (all under ``little_workflow.errors.LittleWorkflowError``)::

    InvalidInputError                     invalid_input
    ├── FrameError                        ipc_frame_invalid
    │   ├── FrameTooLargeError            ipc_frame_too_large
    │   └── UnknownFrameTypeError         ipc_frame_unknown_type
    ├── IpcProtocolError                  ipc_protocol_error (and the server's bye codes)
    ├── AckBeyondLastSeqError             ipc_ack_beyond_last_seq
    └── InvalidAddressError               ipc_address_invalid
    IpcError                              ipc_error (ipc_listen_failed, ipc_address_in_use)
    ├── IpcConnectionError                ipc_connection_failed, ipc_connection_lost
    ├── IpcAuthError                      ipc_auth_failed
    └── SequenceGapError                  ipc_sequence_gap

``ConfigError`` with code ``ipc_token_required`` refuses a non-loopback listener
without a token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``).
if TYPE_CHECKING:
    from little_workflow.errors import (
        AckBeyondLastSeqError,
        FrameError,
        FrameTooLargeError,
        InvalidAddressError,
        IpcAuthError,
        IpcConnectionError,
        IpcError,
        IpcProtocolError,
        SequenceGapError,
        UnknownFrameTypeError,
    )
    from little_workflow.platform.ipc._address import IpcAddress
    from little_workflow.platform.ipc._client import (
        DurableClient,
        ReceivedFrame,
        ReconnectPolicy,
        ack_key,
    )
    from little_workflow.platform.ipc._framing import (
        MAX_FRAME_BYTES,
        FrameDecoder,
        decode_json,
        encode_frame,
        encode_json,
    )
    from little_workflow.platform.ipc._protocol import PROTOCOL_VERSION
    from little_workflow.platform.ipc._queue import (
        DurableOutboundQueue,
        QueueEntry,
        create_durable_outbound_queue,
    )
    from little_workflow.platform.ipc._server import DurableServer
    from little_workflow.platform.ipc._transport import Connection, Listener, dial, listen

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.errors": (
        "AckBeyondLastSeqError",
        "FrameError",
        "FrameTooLargeError",
        "InvalidAddressError",
        "IpcAuthError",
        "IpcConnectionError",
        "IpcError",
        "IpcProtocolError",
        "SequenceGapError",
        "UnknownFrameTypeError",
    ),
    "little_workflow.platform.ipc._address": ("IpcAddress",),
    "little_workflow.platform.ipc._client": (
        "DurableClient",
        "ReceivedFrame",
        "ReconnectPolicy",
        "ack_key",
    ),
    "little_workflow.platform.ipc._framing": (
        "MAX_FRAME_BYTES",
        "FrameDecoder",
        "decode_json",
        "encode_frame",
        "encode_json",
    ),
    "little_workflow.platform.ipc._protocol": ("PROTOCOL_VERSION",),
    "little_workflow.platform.ipc._queue": (
        "DurableOutboundQueue",
        "QueueEntry",
        "create_durable_outbound_queue",
    ),
    "little_workflow.platform.ipc._server": ("DurableServer",),
    "little_workflow.platform.ipc._transport": (
        "Connection",
        "Listener",
        "dial",
        "listen",
    ),
}

__all__ = [
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
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
