"""``DurableClient``: receives a durable server's frames in order, acks, resumes.

Two positions. ``acked_through`` is the highest seq the application acked; it is
persisted in ``ack_store`` (under ``ipc-client:<client_id>:ack``) *before* the
``durableAck`` is sent, so a restarted process resumes from it and never receives
again a frame it acked. ``delivered_through`` is the highest seq ``frames()`` yielded
in this object's life; a frame at or below it is a duplicate (a replay of something
delivered but not yet acked when the connection dropped) and is dropped. A frame past
``delivered_through + 1`` is a gap: ``SequenceGapError``, never a silent skip.

Reconnecting. When the connection drops (EOF, reset, the server's ``bye`` without an
error code), ``frames()`` reconnects by itself: it dials again after a delay that
starts at ``ReconnectPolicy.initial_delay`` and doubles up to ``max_delay``, for at
most ``attempts`` tries per outage, then raises ``IpcConnectionError``. Each new
connection sends ``hello`` and ``durableResume {ackedThrough}``. ``reconnect()`` drops
the connection on purpose and dials again (a ``frames()`` iterating in another task
carries on over the new one). With ``reconnect=None`` a dropped connection ends
``frames()`` with ``IpcConnectionError`` and the caller decides. Errors that a retry
cannot fix are raised at once: a wrong token (``IpcAuthError``), a frame that is not
valid, a gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from little_workflow.errors import (
    AckBeyondLastSeqError,
    ConfigError,
    CorruptDataError,
    IpcAuthError,
    IpcConnectionError,
    IpcProtocolError,
    LittleWorkflowError,
    SchemaVersionError,
    SequenceGapError,
)
from little_workflow.ids import validate_id
from little_workflow.platform.ipc._address import IpcAddress
from little_workflow.platform.ipc._framing import MAX_FRAME_BYTES, JsonObject
from little_workflow.platform.ipc._protocol import (
    PROTOCOL_VERSION,
    Bye,
    Durable,
    DurableAck,
    DurableResume,
    Hello,
    Message,
    parse_frame,
    to_wire,
)
from little_workflow.platform.ipc._transport import Connection, dial
from little_workflow.storage import StorageAdapter

__all__ = ["DurableClient", "ReceivedFrame", "ReconnectPolicy", "ack_key"]

logger = logging.getLogger("little_workflow.ipc")

_ACK_VERSION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconnectPolicy:
    """How a ``DurableClient`` retries a lost or refused connection."""

    #: Seconds before the second attempt; the first is immediate.
    initial_delay: float = 0.05
    #: The delay doubles (``multiplier``) up to this many seconds.
    max_delay: float = 2.0
    multiplier: float = 2.0
    #: Attempts per outage before ``IpcConnectionError``; ``None`` retries for ever.
    attempts: int | None = 20
    #: Seconds allowed for one dial plus its handshake.
    connect_timeout: float = 10.0

    def delay(self, attempt: int) -> float:
        """The delay before attempt ``attempt + 1`` (``attempt`` >= 1)."""
        return float(min(self.initial_delay * self.multiplier ** (attempt - 1), self.max_delay))


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedFrame:
    """An application frame as ``DurableClient.frames()`` yields it.

    ``seq`` is ``None`` for a non-durable ``message`` (from a v1 server, or a v1
    connection); such a frame cannot be acked. A ``message`` whose payload is not a
    string arrives as its compact JSON text.
    """

    seq: int | None
    frame: str


def ack_key(client_id: str) -> str:
    """The ``ack_store`` key where ``client_id``'s acked seq is persisted."""
    return f"ipc-client:{validate_id(client_id, what='IPC client id')}:ack"


def _parse_ack(value: object, key: str) -> int:
    if not isinstance(value, dict):
        raise CorruptDataError(f"IPC client ack {key!r} is not a JSON object")
    if type(value.get("v")) is not int:
        # No version at all is damage, not a format from another release.
        raise CorruptDataError(
            f"IPC client ack {key!r} has no format version (v={value.get('v')!r}); it is "
            "not a record this program writes"
        )
    if value.get("v") != _ACK_VERSION:
        raise SchemaVersionError(
            f"IPC client ack {key!r} has format version {value.get('v')!r}; this program "
            f"reads version {_ACK_VERSION}"
        )
    acked = value.get("ackedThrough")
    if isinstance(acked, bool) or not isinstance(acked, int) or acked < 0:
        raise CorruptDataError(f"IPC client ack {key!r} holds ackedThrough={acked!r}")
    return acked


class DurableClient:
    """A client of a ``DurableServer`` (or of any protocol v1 server).

    ``ack_store`` persists the acked seq under ``client_id`` (one ``client_id`` per
    consumer of one queue); with ``None`` it lives in memory only and a new process
    starts from 0. ``version=1`` makes a plain v1 client (live ``message`` frames,
    no acks). The module docstring gives the reconnect policy.
    """

    def __init__(
        self,
        address: IpcAddress | str,
        *,
        ack_store: StorageAdapter | None,
        client_id: str,
        version: int = PROTOCOL_VERSION,
        token: str | None = None,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        reconnect: ReconnectPolicy | None = ReconnectPolicy(),
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        if version not in (1, PROTOCOL_VERSION):
            raise ConfigError(
                f"an IPC client speaks protocol 1 or {PROTOCOL_VERSION}, not {version!r}",
                code="ipc_version_invalid",
            )
        self._address = address if isinstance(address, IpcAddress) else IpcAddress.parse(address)
        self._ack_store = ack_store
        self._ack_key = ack_key(client_id)
        self._client_id = client_id
        self._version = version
        self._token = token
        self._max_frame_bytes = max_frame_bytes
        self._policy = reconnect
        self._sleep = sleep
        self._conn: Connection | None = None
        self._negotiated: int | None = None
        self._acked = 0
        self._delivered = 0
        self._loaded = False
        self._closing = False
        self._connect_lock = asyncio.Lock()
        self._ack_lock = asyncio.Lock()
        self._connects = 0
        self._duplicates = 0

    @property
    def address(self) -> IpcAddress:
        """The server's address."""
        return self._address

    @property
    def client_id(self) -> str:
        """The id the acked seq is persisted under."""
        return self._client_id

    @property
    def acked_through(self) -> int:
        """The highest seq acked (and persisted, with an ``ack_store``)."""
        return self._acked

    @property
    def delivered_through(self) -> int:
        """The highest durable seq ``frames()`` has yielded (or the acked one, if higher)."""
        return self._delivered

    @property
    def negotiated_version(self) -> int | None:
        """The protocol version of the current connection; ``None`` when not connected."""
        return self._negotiated if self._conn is not None else None

    @property
    def connected(self) -> bool:
        """Whether a connection is open and past its handshake."""
        return self._conn is not None

    @property
    def connect_count(self) -> int:
        """How many connections this client has completed (1 + the reconnects)."""
        return self._connects

    @property
    def duplicates_dropped(self) -> int:
        """How many durable frames arrived again after delivery and were dropped."""
        return self._duplicates

    async def __aenter__(self) -> DurableClient:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def connect(self) -> None:
        """Load the persisted ack, dial, and do the handshake (retrying per the policy).

        Does nothing if already connected.
        """
        if self._closing:
            raise IpcConnectionError("this DurableClient is closed", code="ipc_connection_lost")
        await self._load_ack()
        async with self._connect_lock:
            if self._conn is None:
                self._conn = await self._dial_with_backoff()

    async def reconnect(self) -> None:
        """Drop the current connection, if any, and connect again (with resume)."""
        await self._load_ack()
        async with self._connect_lock:
            old, self._conn = self._conn, None
            if old is not None:
                await old.close()
            self._conn = await self._dial_with_backoff()

    async def close(self) -> None:
        """Say ``bye`` and close; a ``frames()`` in progress ends. The client is done."""
        self._closing = True
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                async with asyncio.timeout(1.0):
                    await conn.send(to_wire(Bye()))
            except (IpcConnectionError, TimeoutError):
                pass  # it is going away either way
            await conn.close()

    async def ack(self, seq: int) -> None:
        """Persist that every frame up to ``seq`` is consumed, then tell the server.

        Acking backwards does nothing; acking past ``delivered_through`` raises
        ``AckBeyondLastSeqError``. If the connection is down, the ack is still
        persisted and reaches the server in the next ``durableResume``.
        """
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise TypeError(f"seq must be an int, not {type(seq).__name__}")
        if seq > self._delivered:
            raise AckBeyondLastSeqError(
                f"cannot ack through seq {seq}: client {self._client_id!r} has received "
                f"frames up to seq {self._delivered} only"
            )
        async with self._ack_lock:
            if seq <= self._acked:
                return
            if self._ack_store is not None:
                await self._ack_store.set(self._ack_key, {"v": _ACK_VERSION, "ackedThrough": seq})
            self._acked = seq
        conn = self._conn
        if conn is not None and self._negotiated is not None and self._negotiated >= 2:
            # If the connection is down the ack is persisted: the next durableResume
            # carries it.
            with contextlib.suppress(IpcConnectionError):
                await conn.send(to_wire(DurableAck(through_seq=seq)))

    async def frames(self) -> AsyncIterator[ReceivedFrame]:
        """Yield application frames in seq order, reconnecting and resuming as needed.

        Ends when the client is closed. Raises ``SequenceGapError`` on a gap,
        ``IpcConnectionError`` when reconnecting fails, ``IpcAuthError``,
        ``FrameError`` or ``IpcProtocolError`` when the server refuses us or sends
        something that is not a frame.
        """
        if self._conn is None and not self._closing:
            await self.connect()
        while True:
            conn = self._conn
            if conn is None:
                if self._closing:
                    return
                await self._recover(None)
                continue
            try:
                obj = await conn.receive()
                received = "lost" if obj is None else self._accept(obj)
            except LittleWorkflowError:
                # Not a dropped connection but a refusal or a broken server: a retry
                # would meet the same thing. The caller decides.
                await self._discard(conn)
                raise
            if received == "lost":
                if self._closing:
                    return
                await self._recover(conn)
            elif received != "duplicate":
                yield received

    def _accept(self, obj: JsonObject) -> ReceivedFrame | Literal["duplicate", "lost"]:
        """What one frame from the server means for ``frames()``."""
        assert self._negotiated is not None
        frame = parse_frame(obj, version=self._negotiated)
        if isinstance(frame, Durable):
            if frame.seq <= self._delivered:
                self._duplicates += 1
                return "duplicate"  # delivered before the connection dropped
            if frame.seq != self._delivered + 1:
                raise SequenceGapError(
                    f"client {self._client_id!r} expected seq {self._delivered + 1} "
                    f"from {self._address} and received {frame.seq}: frames "
                    f"{self._delivered + 1} to {frame.seq - 1} are missing",
                    expected=self._delivered + 1,
                    received=frame.seq,
                )
            self._delivered = frame.seq
            return ReceivedFrame(seq=frame.seq, frame=frame.frame)
        if isinstance(frame, Message):
            payload = frame.payload
            text = payload if isinstance(payload, str) else json.dumps(payload)
            return ReceivedFrame(seq=None, frame=text)
        if isinstance(frame, Bye):
            if frame.code is None:
                return "lost"  # the server is going away: reconnect
            raise _refusal(frame)
        raise IpcProtocolError(
            f"the server sent {obj['type']!r} after the handshake", code="ipc_unexpected_frame"
        )

    async def _discard(self, conn: Connection) -> None:
        if self._conn is conn:
            self._conn = None
        await conn.close()

    async def _load_ack(self) -> None:
        if self._loaded:
            return
        if self._ack_store is not None:
            value = await self._ack_store.get(self._ack_key)
            if value is not None:
                self._acked = max(self._acked, _parse_ack(value, self._ack_key))
        self._delivered = max(self._delivered, self._acked)
        self._loaded = True

    async def _recover(self, dead: Connection | None) -> None:
        async with self._connect_lock:
            if self._closing or self._conn is not dead:
                return  # closed, or reconnect() has replaced the connection already
            self._conn = None
            if dead is not None:
                await dead.close()
            if self._policy is None:
                raise IpcConnectionError(
                    f"the connection to {self._address} was lost (no reconnect policy)",
                    code="ipc_connection_lost",
                )
            self._conn = await self._dial_with_backoff()

    async def _dial_with_backoff(self) -> Connection | None:
        attempt = 0
        while True:
            if self._closing:
                return None
            attempt += 1
            try:
                conn = await self._dial_once()
            except IpcConnectionError as exc:
                policy = self._policy
                if policy is None or (policy.attempts is not None and attempt >= policy.attempts):
                    raise
                logger.debug("IPC connect attempt %d to %s failed: %s", attempt, self._address, exc)
                await self._sleep(policy.delay(attempt))
                continue
            if self._closed_meanwhile():  # close() could not see this connection
                await conn.close()
                return None
            return conn

    def _closed_meanwhile(self) -> bool:
        # A method, not the attribute: a type checker would take ``_closing`` for still
        # False after the check at the top of the loop, across the awaits since.
        return self._closing

    async def _dial_once(self) -> Connection:
        timeout = self._policy.connect_timeout if self._policy is not None else 10.0
        conn = await dial(self._address, max_frame_bytes=self._max_frame_bytes, timeout=timeout)
        try:
            async with asyncio.timeout(timeout):
                await conn.send(to_wire(Hello(version=self._version, token=self._token)))
                obj = await conn.receive()
            if obj is None:
                raise IpcConnectionError(
                    f"{self._address} closed the connection during the handshake",
                    code="ipc_connection_lost",
                )
            reply = parse_frame(obj, version=PROTOCOL_VERSION)
            if isinstance(reply, Bye):
                if reply.code is None:
                    raise IpcConnectionError(
                        f"{self._address} is shutting down", code="ipc_connection_lost"
                    )
                raise _refusal(reply)
            if not isinstance(reply, Hello):
                raise IpcProtocolError(
                    f"{self._address} answered hello with {obj.get('type')!r}",
                    code="ipc_hello_expected",
                )
            version = min(reply.version, self._version)
            if version >= 2:
                await conn.send(to_wire(DurableResume(acked_through=self._acked)))
        except TimeoutError as exc:
            await conn.close()
            raise IpcConnectionError(
                f"{self._address} did not complete the handshake within {timeout} s"
            ) from exc
        except BaseException:
            await conn.close()
            raise
        self._negotiated = version
        self._connects += 1
        return conn


def _refusal(bye: Bye) -> Exception:
    reason = bye.reason or "no reason given"
    message = f"the IPC server closed the connection: {reason}"
    if bye.code == IpcAuthError.code:
        return IpcAuthError(message)
    if bye.code == SequenceGapError.code:
        return SequenceGapError(message)
    return IpcProtocolError(message, code=bye.code)
