"""``DurableServer``: publishes a ``DurableOutboundQueue`` to clients over any transport.

Delivery is *pulled*, per connection: each durable (v2) connection has a cursor (the
last seq sent to it) and one sender task that sends ``cursor + 1, cursor + 2, ...``
read from the queue (from its in-memory tail, or storage after a restart), then waits
for ``publish`` to wake it. A replay after ``durableResume`` and live frames are thus
one stream from one place, in order: a publish during a replay cannot be sent twice or
skipped. Rejected: pushing each published frame to every connection and replaying
from storage beside it (needs a per-connection buffer, a dedupe step and care at the
seam between the two), and one shared sender (a slow client would stall the others).

v1 connections get live frames only, as ``message``: publish pushes each frame to
their in-memory backlog (bounded: a v1 client that falls ``max_live_backlog`` frames
behind is disconnected, with a logged reason).

Compaction. A connected durable client's position is the highest of its
``durableResume.ackedThrough`` and its ``durableAck``s. The queue is acked through the
*lowest* position among connected durable clients, so no frame one of them still needs
is deleted. A client that is not connected holds nothing back: if it returns behind
the compaction point, its resume is refused with ``bye {code: "ipc_sequence_gap"}``.
With one consumer per queue (a subprocess and its host) that cannot happen. While a
connection is still in its handshake (its resume point unknown) compaction waits.

Bad input on a connection (malformed JSON, an unknown frame type, an oversize frame, an
ack beyond the last seq, a wrong token, frames out of order) closes that connection
after a ``bye {code, reason}`` and a warning on the ``little_workflow.ipc`` logger; the
others are untouched and the queue keeps every unacked frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
from collections import deque
from types import TracebackType

from little_workflow.errors import (
    AckBeyondLastSeqError,
    ConfigError,
    FrameError,
    FrameTooLargeError,
    IpcAuthError,
    IpcConnectionError,
    IpcError,
    IpcProtocolError,
    LittleWorkflowError,
    SequenceGapError,
)
from little_workflow.platform.ipc._address import IpcAddress
from little_workflow.platform.ipc._framing import MAX_FRAME_BYTES
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
from little_workflow.platform.ipc._queue import DurableOutboundQueue
from little_workflow.platform.ipc._transport import Connection, Listener, listen

__all__ = ["DurableServer"]

logger = logging.getLogger("little_workflow.ipc")

# Frames read from the queue per batch when a client is behind (a replay): bounds the
# memory a long replay takes and lets live frames interleave with storage reads.
_REPLAY_BATCH = 256
# The envelope around a durable frame's JSON string, with the longest possible seq.
_DURABLE_OVERHEAD = len('{"type":"durable","seq":9223372036854775807,"frame":}')
_BYE_TIMEOUT = 1.0
_MAX_REASON = 1000
_STRING = json.JSONEncoder(ensure_ascii=False)

# Closing a connection over these is expected behaviour (bad or hostile input, a gap
# the client must hear about), logged as a warning with no traceback.
_REFUSALS = (FrameError, IpcProtocolError, AckBeyondLastSeqError, IpcAuthError, SequenceGapError)


class _Peer:
    """One connected client past its handshake."""

    def __init__(self, conn: Connection, *, version: int, position: int) -> None:
        self.conn = conn
        self.version = version
        self.durable = version >= 2
        self.cursor = position  # durable: the last seq sent on this connection
        self.acked = position  # durable: the highest seq the client has acked
        self.wake = asyncio.Event()
        self.live: deque[tuple[int, str]] = deque()  # v1: published, not yet sent
        self.overflow = False


class DurableServer:
    """Serves one ``DurableOutboundQueue`` on one address to any number of clients.

    ``publish`` appends a frame and returns its seq once it is persisted; sending is
    asynchronous. v2 clients get ``durable {seq, frame}`` with replay from their resume
    point; v1 clients get ``message {payload: frame}`` live only. The module docstring
    gives the compaction rule and how bad input is handled.
    """

    def __init__(
        self,
        queue: DurableOutboundQueue,
        address: IpcAddress | str,
        *,
        max_frame_bytes: int = MAX_FRAME_BYTES,
        token: str | None = None,
        handshake_timeout: float = 10.0,
        max_live_backlog: int = 10_000,
    ) -> None:
        self._queue = queue
        self._address = address if isinstance(address, IpcAddress) else IpcAddress.parse(address)
        if token is not None and (not isinstance(token, str) or not token):
            raise ConfigError("an IPC token must be a non-empty string", code="ipc_token_invalid")
        if not self._address.is_loopback and token is None:
            raise ConfigError(
                f"refusing to serve on {self._address}: a host other than loopback needs a "
                "token, checked in every client's hello",
                code="ipc_token_required",
            )
        self._max_frame_bytes = max_frame_bytes
        self._token = token
        self._handshake_timeout = handshake_timeout
        self._max_live_backlog = max_live_backlog
        self._listener: Listener | None = None
        self._peers: set[_Peer] = set()
        self._handshaking = 0
        self._positions = asyncio.Lock()  # registration vs compaction
        self._closing = False

    @property
    def address(self) -> IpcAddress:
        """The bound address once started (a requested port 0 resolved), else the requested one."""
        return self._listener.address if self._listener is not None else self._address

    @property
    def queue(self) -> DurableOutboundQueue:
        """The queue this server publishes."""
        return self._queue

    @property
    def connection_count(self) -> int:
        """How many clients are connected and past their handshake."""
        return len(self._peers)

    async def start(self) -> None:
        """Bind the address and start accepting clients."""
        if self._closing:
            raise IpcError("this DurableServer is closed; create a new one", code="ipc_closed")
        if self._listener is not None:
            return
        self._listener = await listen(
            self._address,
            self._handle,
            max_frame_bytes=self._max_frame_bytes,
            allow_remote=self._token is not None,
        )
        logger.debug("IPC server listening on %s", self._listener.address)

    async def __aenter__(self) -> DurableServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def publish(self, frame: str) -> int:
        """Append ``frame`` to the queue, wake every client's sender, return the seq.

        ``FrameTooLargeError`` (nothing appended) if the frame could never be sent
        within ``max_frame_bytes``: it would block every client behind it for good.
        """
        self._check_size(frame)
        seq = await self._queue.append(frame)
        for peer in list(self._peers):
            if not peer.durable:
                peer.live.append((seq, frame))
                if len(peer.live) > self._max_live_backlog:
                    peer.overflow = True
            peer.wake.set()
        return seq

    async def drop_connections(self) -> int:
        """Close every client connection at once; return how many there were.

        Durable clients reconnect and resume. For tests, and to shed clients.
        """
        peers = list(self._peers)
        await asyncio.gather(*(peer.conn.close() for peer in peers))
        return len(peers)

    async def close(self) -> None:
        """Say ``bye`` to every client, close their connections and stop listening.

        The queue is not closed: it and its storage belong to the caller.
        """
        self._closing = True
        await asyncio.gather(*(self._bye(peer.conn) for peer in list(self._peers)))
        listener, self._listener = self._listener, None
        if listener is not None:
            await listener.close()

    def _check_size(self, frame: str) -> None:
        if not isinstance(frame, str):
            raise FrameError(f"a published frame must be a str, not {type(frame).__name__}")
        try:
            size = len(_STRING.encode(frame).encode("utf-8")) + _DURABLE_OVERHEAD
        except UnicodeEncodeError as exc:
            raise FrameError(
                f"a published frame holds a lone surrogate at position {exc.start}, "
                "which is not valid Unicode text"
            ) from exc
        if size > self._max_frame_bytes:
            raise FrameTooLargeError(
                f"the frame would travel as {size} bytes of JSON; the limit is "
                f"{self._max_frame_bytes} (max_frame_bytes)"
            )

    async def _bye(self, conn: Connection, *, code: str | None = None, reason: str = "") -> None:
        frame = Bye(code=code, reason=reason[:_MAX_REASON] if reason else None)
        with contextlib.suppress(IpcConnectionError, FrameError, TimeoutError):
            async with asyncio.timeout(_BYE_TIMEOUT):
                await conn.send(to_wire(frame))
        await conn.close()

    async def _handle(self, conn: Connection) -> None:
        peer: _Peer | None = None
        self._handshaking += 1
        try:
            try:
                peer = await self._handshake(conn)
            finally:
                self._handshaking -= 1
            if peer is None:
                return
            await self._compact()  # a resume counts as an ack; a deferred one may run now
            sender = asyncio.create_task(self._send_loop(peer))
            try:
                await self._read_loop(peer)
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        except _REFUSALS as exc:
            logger.warning(
                "closing the IPC connection from %s: %s [%s]", conn.peer, exc.message, exc.code
            )
            await self._bye(conn, code=exc.code, reason=exc.message)
        except TimeoutError:
            logger.warning(
                "closing the IPC connection from %s: no handshake within %s s "
                "[ipc_handshake_timeout]",
                conn.peer,
                self._handshake_timeout,
            )
            await self._bye(conn, code="ipc_handshake_timeout", reason="no handshake in time")
        except IpcConnectionError:
            pass  # the client went away while we were sending: nothing to report
        finally:
            if peer is not None:
                self._peers.discard(peer)

    async def _handshake(self, conn: Connection) -> _Peer | None:
        async with asyncio.timeout(self._handshake_timeout):
            obj = await conn.receive()
            if obj is None:
                return None
            hello = parse_frame(obj, version=PROTOCOL_VERSION)
            if not isinstance(hello, Hello):
                raise IpcProtocolError(
                    f"the first frame must be hello, not {obj.get('type')!r}",
                    code="ipc_hello_expected",
                )
            if self._token is not None:
                if hello.token is None:
                    raise IpcAuthError("this server requires a token in hello; none was given")
                if not hmac.compare_digest(hello.token.encode(), self._token.encode()):
                    raise IpcAuthError("the token in hello is wrong")
            if self._closing:
                return None
            version = min(hello.version, PROTOCOL_VERSION)
            await conn.send(to_wire(Hello(version=version)))
            if version == 1:
                peer = _Peer(conn, version=1, position=0)
                self._peers.add(peer)  # from here on, publish() hands it new frames
                return peer
            obj = await conn.receive()
            if obj is None:
                return None
            resume = parse_frame(obj, version=version)
            if not isinstance(resume, DurableResume):
                raise IpcProtocolError(
                    f"after hello, a v2 client must send durableResume, not {obj.get('type')!r}",
                    code="ipc_resume_expected",
                )
        async with self._positions:
            if resume.acked_through > self._queue.last_seq:
                raise AckBeyondLastSeqError(
                    f"durableResume from ackedThrough={resume.acked_through}, but the queue's "
                    f"last seq is {self._queue.last_seq}"
                )
            if resume.acked_through < self._queue.acked_through:
                raise SequenceGapError(
                    f"cannot resume after seq {resume.acked_through}: frames "
                    f"{resume.acked_through + 1} to {self._queue.acked_through} were acked by "
                    "another client and are gone"
                )
            peer = _Peer(conn, version=version, position=resume.acked_through)
            self._peers.add(peer)
        return peer

    async def _read_loop(self, peer: _Peer) -> None:
        while True:
            obj = await peer.conn.receive()
            if obj is None:
                return
            frame = parse_frame(obj, version=peer.version)
            if isinstance(frame, DurableAck):
                await self._on_ack(peer, frame.through_seq)
            elif isinstance(frame, Bye):
                return
            elif isinstance(frame, Message):
                # The durable server only sends; what a client says back is not ours.
                logger.debug("ignoring a message frame from %s", peer.conn.peer)
            else:
                raise IpcProtocolError(
                    f"a client may not send {obj['type']!r} after the handshake",
                    code="ipc_unexpected_frame",
                )

    async def _on_ack(self, peer: _Peer, through: int) -> None:
        if through > self._queue.last_seq:
            raise AckBeyondLastSeqError(
                f"durableAck through seq {through}, but the queue's last seq is "
                f"{self._queue.last_seq}"
            )
        if through > peer.acked:
            peer.acked = through
            peer.wake.set()  # it need not be sent what it has acked
            await self._compact()

    async def _compact(self) -> None:
        async with self._positions:
            if self._handshaking:
                return  # a client's resume point is not known yet; the next ack compacts
            positions = [peer.acked for peer in self._peers if peer.durable]
            if positions and min(positions) > self._queue.acked_through:
                await self._queue.ack_up_to(min(positions))

    async def _send_loop(self, peer: _Peer) -> None:
        try:
            while True:
                if peer.overflow:
                    logger.warning(
                        "closing the IPC connection from %s: a v1 client more than %d frames "
                        "behind",
                        peer.conn.peer,
                        self._max_live_backlog,
                    )
                    await self._bye(peer.conn, code="ipc_client_too_slow", reason="too far behind")
                    return
                sent = await (self._send_durable(peer) if peer.durable else self._send_live(peer))
                if sent:
                    continue
                peer.wake.clear()
                if not self._has_work(peer):
                    await peer.wake.wait()
        except IpcConnectionError:
            pass  # the reader sees the closed connection and ends the handler
        except SequenceGapError as exc:
            logger.warning(
                "closing the IPC connection from %s: %s [%s]", peer.conn.peer, exc.message, exc.code
            )
            await self._bye(peer.conn, code=exc.code, reason=exc.message)
        except LittleWorkflowError:
            # A storage failure reading the queue: this client cannot be served now; it
            # reconnects and resumes, and the error is in the log with its traceback.
            logger.exception("cannot send queued frames to %s; closing", peer.conn.peer)
            await peer.conn.close()

    def _has_work(self, peer: _Peer) -> bool:
        if peer.durable:
            return max(peer.cursor, peer.acked) < self._queue.last_seq
        return bool(peer.live) or peer.overflow

    async def _send_live(self, peer: _Peer) -> bool:
        sent = False
        while peer.live and not peer.overflow:
            _seq, frame = peer.live.popleft()
            await peer.conn.send(to_wire(Message(payload=frame)))
            sent = True
        return sent

    async def _send_durable(self, peer: _Peer) -> bool:
        # Frames at or below the client's own ack are not sent again: it has them.
        base = max(peer.cursor, peer.acked)
        if base >= self._queue.last_seq:
            return False
        entries = await self._queue.frame_range(base + 1, limit=_REPLAY_BATCH)
        if not entries or entries[0].seq != base + 1:
            first = entries[0].seq if entries else self._queue.last_seq + 1
            raise SequenceGapError(
                f"frames {base + 1} to {first - 1} are no longer in the queue "
                f"(acked through {self._queue.acked_through})",
                expected=base + 1,
                received=first,
            )
        for entry in entries:
            if entry.seq <= peer.acked:
                continue  # acked meanwhile, by this client
            await peer.conn.send(to_wire(Durable(seq=entry.seq, frame=entry.frame)))
            peer.cursor = entry.seq
        peer.cursor = max(peer.cursor, entries[-1].seq)
        return True
