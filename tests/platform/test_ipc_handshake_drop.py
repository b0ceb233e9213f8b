"""A client that goes away in the middle of its handshake leaves nothing open.

With real sockets, over TCP and a Unix socket. Warnings are errors in this suite, and the
collections below make an unclosed socket or transport of any of these connections one
(``ResourceWarning`` from its ``__del__``) within the test, not in a later one.

Why no test met the leak before: every test waited for its clients' handshakes to end
before closing the server, and a socket dropped this way is only collected later, after
the test, where pytest no longer sees it. It takes a client that connects while the
server is closing: asyncio (3.11) accepts it in one callback, hands it to a task, and a
task that runs after ``Server.close()`` fails an assertion and drops the socket unclosed
(``_transport._StreamListener.close`` now stops accepting first).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import struct
from pathlib import Path

import pytest

from little_workflow.platform.ipc import DurableServer, IpcAddress, create_durable_outbound_queue
from little_workflow.platform.ipc._framing import encode_frame
from little_workflow.storage import create_in_memory_storage
from tests.platform.ipc_support import Consumer, client_for, short_dir

HELLO = encode_frame({"type": "hello", "version": 2})
CUTS = ["before-hello", "mid-hello", "after-hello", "mid-hello-reset", "after-hello-reset"]


async def _leave(address: IpcAddress, cut: str) -> None:
    loop = asyncio.get_running_loop()
    if address.kind == "tcp":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        target: object = (address.host, address.port)
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        target = address.path
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, target)  # type: ignore[arg-type]
        if cut.startswith("mid-hello"):
            await loop.sock_sendall(sock, HELLO[:7])
        elif cut.startswith("after-hello"):
            await loop.sock_sendall(sock, HELLO)
            await loop.sock_recv(sock, 4096)  # the server's hello: it waits for the resume
        if cut.endswith("reset") and address.kind == "tcp":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        sock.close()


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("cut", CUTS)
async def test_a_client_gone_mid_handshake_leaves_nothing_open(
    kind: str, cut: str, caplog: pytest.LogCaptureFixture
) -> None:
    with short_dir() as directory:
        address = (
            IpcAddress.tcp("127.0.0.1", 0)
            if kind == "tcp"
            else IpcAddress.unix(Path(directory) / "s")
        )
        queue = await create_durable_outbound_queue(
            storage=create_in_memory_storage(), socket_path="drop"
        )
        async with DurableServer(queue, address) as server:
            for _ in range(5):
                await _leave(server.address, cut)
            # The server goes on serving.
            client = Consumer(client_for(server.address, None, "after"), ack=False)
            await server.publish("x")
            await client.wait_for_count(1)
            await client.stop()
            assert server.connection_count <= 1
        for _ in range(3):
            await asyncio.sleep(0.02)
            gc.collect()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("kind", ["tcp", "unix"])
@pytest.mark.parametrize("passes", range(6))
async def test_clients_connecting_as_the_server_closes_leave_nothing_open(
    kind: str, passes: int
) -> None:
    """Ten clients connect, the loop runs ``passes`` times (so the server is at some
    point of accepting them: not yet, accepted, handed to a task, handshaking), they
    disconnect and the server closes."""
    with short_dir() as directory:
        address = (
            IpcAddress.tcp("127.0.0.1", 0)
            if kind == "tcp"
            else IpcAddress.unix(Path(directory) / "s")
        )
        queue = await create_durable_outbound_queue(
            storage=create_in_memory_storage(), socket_path="closing"
        )
        server = DurableServer(queue, address)
        await server.start()
        clients = []
        for _ in range(10):
            if kind == "tcp":
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                target: object = (server.address.host, server.address.port)
            else:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                target = server.address.path
            sock.setblocking(False)
            # Completes in the kernel; the server accepts it when its loop gets to it.
            with contextlib.suppress(BlockingIOError):
                sock.connect(target)  # type: ignore[arg-type]
            clients.append(sock)
        for _ in range(passes):
            await asyncio.sleep(0)
        for sock in clients:
            sock.close()
        await server.close()
        del clients, sock
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0)
