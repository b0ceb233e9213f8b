"""Helpers shared by the IPC tests: addresses on every transport, raw peers, waiting."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from little_workflow.platform.ipc import (
    DurableClient,
    IpcAddress,
    ReceivedFrame,
    ReconnectPolicy,
    decode_json,
    encode_frame,
)
from little_workflow.platform.ipc._framing import JsonObject
from little_workflow.storage import StorageAdapter

TRANSPORTS = ["unix", "tcp", "ws"]

# Reconnect at once and keep trying: tests force many disconnects and must not wait.
FAST = ReconnectPolicy(initial_delay=0.001, max_delay=0.01, attempts=500, connect_timeout=5.0)


@contextmanager
def short_dir() -> Iterator[Path]:
    """A fresh directory with a short path: a Unix socket path is limited to 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="lwipc", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def address_for(kind: str, directory: Path, name: str = "ipc.sock") -> IpcAddress:
    """An address on transport ``kind``: a socket in ``directory``, or loopback port 0."""
    if kind == "unix":
        return IpcAddress.unix(directory / name)
    if kind == "tcp":
        return IpcAddress.tcp("127.0.0.1", 0)
    return IpcAddress.ws("127.0.0.1", 0)


async def wait_until(predicate: Callable[[], bool], what: str, limit: float = 20.0) -> None:
    """Yield to the loop until ``predicate()`` holds; fail (a hang, not a timing check)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.001)


def client_for(
    address: IpcAddress,
    ack_store: StorageAdapter | None,
    client_id: str = "consumer",
    **options: object,
) -> DurableClient:
    """A client that reconnects at once (``FAST``) unless told otherwise."""
    options.setdefault("reconnect", FAST)
    return DurableClient(address, ack_store=ack_store, client_id=client_id, **options)  # type: ignore[arg-type]


class Consumer:
    """Runs ``client.frames()`` in a task, recording seqs and acking each frame."""

    def __init__(self, client: DurableClient, *, ack: bool = True) -> None:
        self.client = client
        self.ack = ack
        self.received: list[ReceivedFrame] = []
        self.error: BaseException | None = None
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for frame in self.client.frames():
                self.received.append(frame)
                if self.ack and frame.seq is not None:
                    await self.client.ack(frame.seq)
        except Exception as exc:
            self.error = exc

    @property
    def seqs(self) -> list[int | None]:
        return [frame.seq for frame in self.received]

    async def wait_for_count(self, count: int) -> None:
        await wait_until(
            lambda: len(self.received) >= count or self.error is not None,
            f"{count} frames (have {len(self.received)})",
        )
        if self.error is not None:
            raise self.error

    async def stop(self) -> None:
        await self.client.close()
        await asyncio.wait_for(self.task, 10)


class RawPeer:
    """A client that speaks bytes, not the protocol: to send what a real client would not."""

    def __init__(
        self,
        kind: str,
        *,
        reader: asyncio.StreamReader | None = None,
        writer: asyncio.StreamWriter | None = None,
        ws: ClientConnection | None = None,
    ) -> None:
        self.kind = kind
        self._reader = reader
        self._writer = writer
        self._ws = ws
        #: The WebSocket close code the server sent, if any.
        self.close_code: int | None = None

    @classmethod
    async def open(cls, address: IpcAddress) -> RawPeer:
        if address.kind == "unix":
            assert address.path is not None
            reader, writer = await asyncio.open_unix_connection(address.path)
            return cls("unix", reader=reader, writer=writer)
        if address.kind == "tcp":
            reader, writer = await asyncio.open_connection(address.host, address.port)
            return cls("tcp", reader=reader, writer=writer)
        ws = await ws_connect(f"{address}/", max_size=None, proxy=None, compression=None)
        return cls("ws", ws=ws)

    async def send(self, frame: JsonObject) -> None:
        """One well-formed frame."""
        await self.send_body(encode_frame(frame)[4:])

    async def send_body(self, body: bytes) -> None:
        """One frame whose body is ``body``, whatever it holds."""
        if self._ws is not None:
            await self._ws.send(body.decode("utf-8", "replace"))
            return
        assert self._writer is not None
        self._writer.write(len(body).to_bytes(4, "big") + body)
        await self._writer.drain()

    async def send_bytes(self, data: bytes) -> None:
        """Raw bytes on a stream transport (a header alone, half a frame, ...)."""
        assert self._writer is not None
        self._writer.write(data)
        await self._writer.drain()

    async def receive_until_closed(self) -> list[JsonObject]:
        """Every frame the server sends until it closes the connection."""
        frames: list[JsonObject] = []
        if self._ws is not None:
            try:
                while True:
                    frames.append(decode_json(await self._ws.recv()))
            except ConnectionClosed as exc:
                self.close_code = exc.rcvd.code if exc.rcvd is not None else None
                return frames
        assert self._reader is not None
        while True:
            try:
                header = await self._reader.readexactly(4)
                body = await self._reader.readexactly(int.from_bytes(header, "big"))
            except (asyncio.IncompleteReadError, ConnectionError):
                return frames
            frames.append(decode_json(body))

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
            return
        assert self._writer is not None
        self._writer.close()
        with suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
