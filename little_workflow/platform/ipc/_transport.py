"""Transports: one ``Connection`` interface over Unix sockets, TCP and WebSockets.

A ``Connection`` sends and receives frame dicts; the server and the client never know
which transport carries them. Unix sockets and TCP are byte streams framed by
``FrameDecoder``; a WebSocket message carries one JSON frame without the length prefix
(``websockets`` enforces ``max_frame_bytes`` as ``max_size``, from the frame header,
before reading the body). The WebSocket side lives in ``_ws``, imported only when a
``ws://`` address is listened on or dialled.

Unix sockets are created mode 0600: bound, ``chmod``-ed, and only then put to
``listen``, so no one can connect while the mode is still the umask's (a connect to a
bound socket that is not listening is refused). An existing socket file is replaced
only if nothing answers on it (a stale file from a dead server); a live one is refused
with ``ipc_address_in_use``, and a path that is not a socket is never touched. On
close the file is removed only if it is still the one this listener bound.

TCP and WebSocket listeners bind 127.0.0.1 by default and refuse any non-loopback host
unless ``allow_remote=True`` (``DurableServer`` passes it only when it has a token).
Rejected: a listener per transport with its own connection type (the server would
need a code path per transport), and ``websockets`` over the stream framing (it has
message boundaries already; a second length prefix inside would be dead weight).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import struct
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from little_workflow._extras import require
from little_workflow.errors import (
    ConfigError,
    FrameError,
    IpcConnectionError,
    IpcError,
)
from little_workflow.platform.ipc._address import IpcAddress
from little_workflow.platform.ipc._framing import (
    MAX_FRAME_BYTES,
    FrameDecoder,
    JsonObject,
    encode_frame,
)

__all__ = ["Connection", "ConnectionHandler", "Listener", "dial", "listen"]

logger = logging.getLogger("little_workflow.ipc")

_READ_CHUNK = 64 * 1024
# How long a graceful close may wait for the peer before the socket is cut.
_CLOSE_TIMEOUT = 2.0


@runtime_checkable
class Connection(Protocol):
    """One open IPC connection carrying JSON frames, on any transport."""

    @property
    def peer(self) -> str:
        """Who is at the other end, for log messages (a pid, an address)."""
        ...

    async def send(self, frame: Mapping[str, object]) -> None:
        """Send one frame; ``IpcConnectionError`` (``ipc_connection_lost``) if it is closed.

        ``FrameError`` (nothing sent) if ``frame`` is not JSON or is over the limit.
        """
        ...

    async def receive(self) -> JsonObject | None:
        """The next frame, or ``None`` once the peer is gone (EOF, reset, closed).

        ``FrameError`` if the peer sent bytes that are not a frame; the connection is
        useless afterwards and should be closed.
        """
        ...

    async def close(self) -> None:
        """Close the connection; a pending ``receive`` returns ``None``. Idempotent."""
        ...


@runtime_checkable
class Listener(Protocol):
    """A listening socket handing each new connection to a handler."""

    @property
    def address(self) -> IpcAddress:
        """The bound address (a requested port 0 resolved to the real one)."""
        ...

    async def close(self) -> None:
        """Stop accepting; connections already handed out are the handler's to close."""
        ...


ConnectionHandler = Callable[[Connection], Awaitable[None]]


def _lost(peer: str, exc: BaseException | None = None) -> IpcConnectionError:
    detail = f": {exc}" if exc is not None and str(exc) else ""
    return IpcConnectionError(
        f"the IPC connection to {peer} is closed{detail}", code="ipc_connection_lost"
    )


class _StreamConnection:
    """A ``Connection`` over an asyncio byte stream (Unix socket or TCP)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        peer: str,
        max_frame_bytes: int,
    ) -> None:
        self._reader = reader
        self._writer = writer
        self._peer = peer
        self._max = max_frame_bytes
        self._decoder = FrameDecoder(max_frame_bytes=max_frame_bytes)
        self._ready: deque[JsonObject] = deque()
        self._error: FrameError | None = None
        self._send_lock = asyncio.Lock()
        self._closed = False

    @property
    def peer(self) -> str:
        return self._peer

    async def send(self, frame: Mapping[str, object]) -> None:
        data = encode_frame(frame, max_frame_bytes=self._max)
        async with self._send_lock:
            if self._closed or self._writer.is_closing():
                raise _lost(self._peer)
            try:
                self._writer.write(data)
                await self._writer.drain()
            except (ConnectionError, OSError) as exc:
                raise _lost(self._peer, exc) from exc

    async def receive(self) -> JsonObject | None:
        while not self._ready:
            if self._error is not None:
                raise self._error
            if self._closed:
                return None
            try:
                chunk = await self._reader.read(_READ_CHUNK)
            except (ConnectionError, OSError):
                return None
            if not chunk:
                if self._decoder.mid_frame:
                    logger.debug("%s closed the connection in the middle of a frame", self._peer)
                return None
            try:
                # Keep the good frames that came before a bad one: they are delivered
                # first, and the error is raised when they are used up.
                for frame in self._decoder.feed(chunk):
                    self._ready.append(frame)
            except FrameError as exc:
                self._error = exc
        return self._ready.popleft()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._writer.close()
        try:
            async with asyncio.timeout(_CLOSE_TIMEOUT):
                await self._writer.wait_closed()
        except TimeoutError:
            self._writer.transport.abort()  # the peer stopped reading: cut it off
        except (ConnectionError, OSError):
            pass  # already gone, which is what close wants


def _unix_peer(writer: asyncio.StreamWriter, path: str) -> str:
    sock = writer.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
    except (OSError, AttributeError, struct.error):
        return f"unix:{path}"
    return f"unix:{path} (pid {pid}, uid {uid})"


def _tcp_peer(writer: asyncio.StreamWriter, kind: str) -> str:
    name = writer.get_extra_info("peername")
    if isinstance(name, tuple) and len(name) >= 2:
        host = f"[{name[0]}]" if ":" in str(name[0]) else name[0]
        return f"{kind} peer {host}:{name[1]}"
    return f"{kind} peer"


class _Handlers:
    """The connections a listener handed out and the tasks running their handlers.

    So that closing a listener ends everything it started, the same way on every
    transport: ``asyncio.Server`` (3.11) does not track its handler tasks.
    """

    def __init__(self, handler: ConnectionHandler) -> None:
        self._handler = handler
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[object]] = set()
        self._closing = False

    def start(self, conn: Connection) -> None:
        """Run the handler of ``conn`` in a task tracked from this moment on.

        The stream transports call this from ``connection_made`` (a plain callback, not
        a coroutine function that asyncio would wrap in a task of its own): a task that
        had not started when the listener closed would never run, and nothing would
        close its connection; the socket then leaked, a ``ResourceWarning`` once the
        loop was gone.
        """
        task = asyncio.get_running_loop().create_task(self.run(conn))
        self._tasks.add(task)
        self._connections.add(conn)

    async def run(self, conn: Connection) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._connections.add(conn)
        try:
            if not self._closing:
                await self._handler(conn)
        except Exception:
            logger.exception("the IPC connection handler for %s failed", conn.peer)
        finally:
            self._connections.discard(conn)
            self._tasks.discard(task)
            await conn.close()

    async def close(self) -> None:
        self._closing = True
        await asyncio.gather(*(conn.close() for conn in list(self._connections)))
        if not self._tasks:
            return
        # Closed connections make well-behaved handlers return at once; a handler that
        # does not (blocked elsewhere) is cancelled after a grace period.
        _done, pending = await asyncio.wait(list(self._tasks), timeout=_CLOSE_TIMEOUT)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


#: Passes of the event loop that bring a socket accepted before a listener's close through
#: asyncio's accept task and ``connection_made`` (one each, and one to spare).
_ACCEPT_PASSES = 3


class _StreamListener:
    def __init__(
        self,
        server: asyncio.Server,
        address: IpcAddress,
        handlers: _Handlers,
        socket_id: tuple[int, int] | None,
    ) -> None:
        self._server = server
        self._address = address
        self._handlers = handlers
        self._socket_id = socket_id  # (st_dev, st_ino) of the socket file we bound

    @property
    def address(self) -> IpcAddress:
        return self._address

    async def close(self) -> None:
        # Stop accepting, then let the connections already accepted reach the handler,
        # and only then close the server. asyncio accepts in a callback that hands each
        # socket to a task; in Python 3.11 a task that runs after ``Server.close()``
        # fails an assertion (the server has no sockets any more) and drops the socket
        # it was given without closing it: the client sees its handshake go unanswered
        # and the socket leaks (a ``ResourceWarning``). The passes of the loop below run
        # those tasks and their ``connection_made`` (``handlers.start``, which tracks
        # the connection for ``handlers.close``).
        loop = asyncio.get_running_loop()
        for sock in self._server.sockets:
            loop.remove_reader(sock.fileno())
        for _ in range(_ACCEPT_PASSES):
            await asyncio.sleep(0)
        self._server.close()
        if self._socket_id is not None:
            assert self._address.path is not None
            with contextlib.suppress(OSError):
                info = os.lstat(self._address.path)
                if (info.st_dev, info.st_ino) == self._socket_id:
                    os.unlink(self._address.path)
            self._socket_id = None
        await self._handlers.close()
        await self._server.wait_closed()


async def _probe_unix(path: str) -> bool:
    """Whether a server answers on the socket file at ``path``."""
    try:
        async with asyncio.timeout(2.0):
            _reader, writer = await asyncio.open_unix_connection(path)
    except (ConnectionRefusedError, FileNotFoundError, TimeoutError):
        return False
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _bind_unix(path: str) -> socket.socket:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise IpcError(
            f"cannot inspect {path!r}: {exc.strerror}", code="ipc_listen_failed"
        ) from exc
    if info is not None:
        if not stat.S_ISSOCK(info.st_mode):
            raise IpcError(
                f"{path!r} exists and is not a socket; refusing to replace it",
                code="ipc_address_in_use",
            )
        if await _probe_unix(path):
            raise IpcError(f"another server is listening on {path!r}", code="ipc_address_in_use")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # stale: its server is gone
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        code = "ipc_address_in_use" if isinstance(exc, FileExistsError) else "ipc_listen_failed"
        raise IpcError(
            f"cannot bind the Unix socket {path!r}: {exc.strerror or exc}", code=code
        ) from exc
    return sock


def _check_remote(address: IpcAddress, allow_remote: bool) -> None:
    if not address.is_loopback and not allow_remote:
        raise ConfigError(
            f"refusing to listen on {address}: only loopback hosts (127.0.0.1, ::1, "
            "localhost) are allowed without a token; give the server a token to listen "
            "on another host",
            code="ipc_token_required",
        )


async def listen(
    address: IpcAddress,
    handler: ConnectionHandler,
    *,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    allow_remote: bool = False,
) -> Listener:
    """Listen on ``address``; run ``handler(connection)`` for each connection.

    The connection is closed when the handler returns. An exception escaping the
    handler is logged and closes only that connection. ``Listener.close`` stops
    accepting, closes the connections still open and waits for their handlers.
    """
    _check_remote(address, allow_remote)
    handlers = _Handlers(handler)

    if address.kind == "unix":
        assert address.path is not None
        path = address.path

        def on_unix(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = _unix_peer(writer, path)
            handlers.start(
                _StreamConnection(reader, writer, peer=peer, max_frame_bytes=max_frame_bytes)
            )

        sock = await _bind_unix(path)
        try:
            server = await asyncio.start_unix_server(on_unix, sock=sock, limit=_READ_CHUNK)
        except OSError as exc:
            sock.close()
            raise IpcError(f"cannot listen on {path!r}: {exc}", code="ipc_listen_failed") from exc
        info = os.lstat(path)
        return _StreamListener(server, address, handlers, (info.st_dev, info.st_ino))

    if address.kind == "tcp":

        def on_tcp(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            peer = _tcp_peer(writer, "tcp")
            handlers.start(
                _StreamConnection(reader, writer, peer=peer, max_frame_bytes=max_frame_bytes)
            )

        try:
            server = await asyncio.start_server(
                on_tcp, address.host, address.port, limit=_READ_CHUNK
            )
        except OSError as exc:
            raise _listen_failed(address, exc) from exc
        port = server.sockets[0].getsockname()[1]
        return _StreamListener(server, address.with_port(port), handlers, None)

    # ``websockets`` is imported only here and in ``dial``: the Unix socket and TCP
    # transports (every spawned child, every resume) never pay for it.
    require("ws", "a ws:// IPC address")
    from little_workflow.platform.ipc._ws import listen_ws

    return await listen_ws(address, handlers, max_frame_bytes=max_frame_bytes)


def _listen_failed(address: IpcAddress, exc: OSError) -> IpcError:
    code = "ipc_address_in_use" if exc.errno == errno.EADDRINUSE else "ipc_listen_failed"
    return IpcError(f"cannot listen on {address}: {exc.strerror or exc}", code=code)


async def dial(
    address: IpcAddress, *, max_frame_bytes: int = MAX_FRAME_BYTES, timeout: float = 10.0
) -> Connection:
    """Connect to ``address``; ``IpcConnectionError`` (``ipc_connection_failed``) if not.

    No ``hello`` is sent: the protocol is the caller's (``DurableClient`` does it).
    """
    try:
        async with asyncio.timeout(timeout):
            if address.kind == "unix":
                assert address.path is not None
                reader, writer = await asyncio.open_unix_connection(address.path, limit=_READ_CHUNK)
                return _StreamConnection(
                    reader, writer, peer=f"unix:{address.path}", max_frame_bytes=max_frame_bytes
                )
            if address.kind == "tcp":
                reader, writer = await asyncio.open_connection(
                    address.host, address.port, limit=_READ_CHUNK
                )
                return _StreamConnection(
                    reader, writer, peer=str(address), max_frame_bytes=max_frame_bytes
                )
            require("ws", "a ws:// IPC address")
            from little_workflow.platform.ipc._ws import dial_ws

            return await dial_ws(address, max_frame_bytes=max_frame_bytes)
    except TimeoutError as exc:
        raise IpcConnectionError(f"connecting to {address} timed out after {timeout} s") from exc
    except OSError as exc:
        raise IpcConnectionError(f"cannot connect to {address}: {exc}") from exc
