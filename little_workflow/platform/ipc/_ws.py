"""The WebSocket transport: a ``Connection`` and a ``Listener`` over ``websockets``.

Kept apart from ``_transport`` so that ``websockets`` (about 15 ms to import) is loaded
only by a process that listens on or dials a ``ws://`` address; the Unix socket and TCP
transports do not need it. ``_transport.listen`` and ``_transport.dial`` import this
module on demand.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.asyncio.server import Server as WsServer
from websockets.asyncio.server import ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake
from websockets.frames import CloseCode

from little_workflow.errors import FrameTooLargeError, IpcConnectionError
from little_workflow.platform.ipc._address import IpcAddress
from little_workflow.platform.ipc._framing import JsonObject, decode_json, encode_json
from little_workflow.platform.ipc._transport import (
    _CLOSE_TIMEOUT,
    Connection,
    Listener,
    _Handlers,
    _listen_failed,
    _lost,
)

__all__ = ["dial_ws", "listen_ws"]


class _WebSocketConnection:
    """A ``Connection`` over a ``websockets`` connection: one JSON frame per message."""

    def __init__(
        self, ws: ServerConnection | ClientConnection, *, peer: str, max_frame_bytes: int
    ) -> None:
        self._ws = ws
        self._peer = peer
        self._max = max_frame_bytes
        self._send_lock = asyncio.Lock()
        self._closed = False

    @property
    def peer(self) -> str:
        return self._peer

    async def send(self, frame: Mapping[str, object]) -> None:
        text = encode_json(frame, max_frame_bytes=self._max).decode("utf-8")
        async with self._send_lock:
            if self._closed:
                raise _lost(self._peer)
            try:
                await self._ws.send(text)
            except ConnectionClosed as exc:
                raise self._too_large(exc) or _lost(self._peer, exc) from exc

    async def receive(self) -> JsonObject | None:
        if self._closed:
            return None
        try:
            message = await self._ws.recv()
        except ConnectionClosedOK:
            return None
        except ConnectionClosed as exc:
            too_large = self._too_large(exc)
            if too_large is not None:
                raise too_large from exc
            return None
        return decode_json(message)

    def _too_large(self, exc: ConnectionClosed) -> FrameTooLargeError | None:
        # websockets refuses an oversize message itself, from its header, and closes with
        # 1009; whichever call notices the closed connection reports the reason.
        if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
            return FrameTooLargeError(
                f"{self._peer} sent a WebSocket message over the limit of {self._max} bytes"
            )
        return None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # No WebSocket closing handshake: it needs each side to read the other's close
        # frame, and with unread messages queued websockets has paused reading, so the
        # handshake would sit out its timeout (a client dropping a connection in the
        # middle of a replay does exactly that). The protocol's ``bye`` is the goodbye;
        # the TCP close below flushes it first. The peer sees code 1006, a dropped
        # connection, which is what a close without ``bye`` means on every transport.
        self._ws.transport.close()
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await self._ws.wait_closed()
        except TimeoutError:
            self._ws.transport.abort()  # the peer stopped reading: cut it off


class _WsListener:
    def __init__(self, server: WsServer, address: IpcAddress, handlers: _Handlers) -> None:
        self._server = server
        self._address = address
        self._handlers = handlers

    @property
    def address(self) -> IpcAddress:
        return self._address

    async def close(self) -> None:
        self._server.close(close_connections=False)
        await self._handlers.close()
        await self._server.wait_closed()


async def listen_ws(address: IpcAddress, handlers: _Handlers, *, max_frame_bytes: int) -> Listener:
    """``listen`` for a ``ws://`` address."""

    async def on_ws(ws: ServerConnection) -> None:
        name = ws.remote_address
        peer = f"ws peer {name[0]}:{name[1]}" if isinstance(name, tuple) else "ws peer"
        await handlers.run(_WebSocketConnection(ws, peer=peer, max_frame_bytes=max_frame_bytes))

    try:
        ws_server = await ws_serve(
            on_ws,
            address.host,
            address.port,
            max_size=max_frame_bytes,
            compression=None,  # loopback IPC: deflate would cost CPU and save nothing
            logger=logging.getLogger("little_workflow.ipc.websockets"),
        )
    except OSError as exc:
        raise _listen_failed(address, exc) from exc
    port = next(iter(ws_server.sockets)).getsockname()[1]
    return _WsListener(ws_server, address.with_port(port), handlers)


async def dial_ws(address: IpcAddress, *, max_frame_bytes: int) -> Connection:
    """``dial`` for a ``ws://`` address, inside the caller's timeout."""
    try:
        ws = await ws_connect(
            f"{address}/",
            max_size=max_frame_bytes,
            compression=None,
            proxy=None,  # never route loopback IPC through an HTTP(S)_PROXY from the env
            open_timeout=None,  # the surrounding timeout covers the whole dial
            logger=logging.getLogger("little_workflow.ipc.websockets"),
        )
        return _WebSocketConnection(ws, peer=str(address), max_frame_bytes=max_frame_bytes)
    except InvalidHandshake as exc:
        raise IpcConnectionError(f"cannot connect to {address}: {exc}") from exc
