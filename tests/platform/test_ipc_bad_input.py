"""Bad input on the wire closes only that connection; the server and the queue carry on."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import stat
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from little_workflow.errors import ConfigError
from little_workflow.platform.ipc import (
    Connection,
    DurableOutboundQueue,
    DurableServer,
    IpcAddress,
    IpcAuthError,
    IpcError,
    create_durable_outbound_queue,
    listen,
)
from little_workflow.storage import create_in_memory_storage
from tests.platform.ipc_support import (
    TRANSPORTS,
    Consumer,
    RawPeer,
    address_for,
    client_for,
    short_dir,
    wait_until,
)

LIMIT = 4096


@pytest.fixture
def directory() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture(params=TRANSPORTS)
def address(request: pytest.FixtureRequest, directory: Path) -> IpcAddress:
    return address_for(request.param, directory)


@pytest.fixture
async def queue() -> DurableOutboundQueue:
    return await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="bad-input"
    )


@pytest.fixture
async def server(queue: DurableOutboundQueue, address: IpcAddress) -> AsyncIterator[DurableServer]:
    async with DurableServer(
        queue, address, max_frame_bytes=LIMIT, token="right-token", handshake_timeout=0.5
    ) as started:
        yield started


async def _hello(peer: RawPeer, version: int = 2) -> None:
    await peer.send({"type": "hello", "version": version, "token": "right-token"})


async def _send_malformed_json(peer: RawPeer) -> None:
    await _hello(peer)
    await peer.send_body(b'{"type": "durableAck", "throughSeq": ')


async def _send_unknown_type(peer: RawPeer) -> None:
    await _hello(peer)
    await peer.send({"type": "durableResume", "ackedThrough": 0})
    await peer.send({"type": "launchMissiles"})


async def _send_oversize(peer: RawPeer) -> None:
    await _hello(peer)
    if peer.kind == "ws":
        await peer.send_body(b'{"type":"message","payload":"' + b"x" * LIMIT + b'"}')
    else:
        await peer.send_bytes((LIMIT + 1).to_bytes(4, "big"))  # the header alone


async def _send_ack_beyond(peer: RawPeer) -> None:
    await _hello(peer)
    await peer.send({"type": "durableResume", "ackedThrough": 0})
    await peer.send({"type": "durableAck", "throughSeq": 999})


async def _send_resume_beyond(peer: RawPeer) -> None:
    await _hello(peer)
    await peer.send({"type": "durableResume", "ackedThrough": 999})


async def _send_wrong_token(peer: RawPeer) -> None:
    await peer.send({"type": "hello", "version": 2, "token": "wrong-token"})


async def _send_no_token(peer: RawPeer) -> None:
    await peer.send({"type": "hello", "version": 2})


async def _send_durable_first(peer: RawPeer) -> None:
    await peer.send({"type": "durable", "seq": 1, "frame": "x"})


async def _send_v2_frame_on_v1(peer: RawPeer) -> None:
    await _hello(peer, version=1)
    await peer.send({"type": "durableAck", "throughSeq": 1})


async def _send_no_resume(peer: RawPeer) -> None:
    await _hello(peer)
    await peer.send({"type": "message", "payload": "hi"})


async def _send_nothing(peer: RawPeer) -> None:
    pass  # the handshake timeout (0.5 s here) closes it


CASES: dict[str, tuple[Callable[[RawPeer], Awaitable[None]], str]] = {
    "malformed-json": (_send_malformed_json, "ipc_frame_invalid"),
    "unknown-type": (_send_unknown_type, "ipc_frame_unknown_type"),
    "oversize": (_send_oversize, "ipc_frame_too_large"),
    "ack-beyond-last-seq": (_send_ack_beyond, "ipc_ack_beyond_last_seq"),
    "resume-beyond-last-seq": (_send_resume_beyond, "ipc_ack_beyond_last_seq"),
    "wrong-token": (_send_wrong_token, "ipc_auth_failed"),
    "no-token": (_send_no_token, "ipc_auth_failed"),
    "durable-before-hello": (_send_durable_first, "ipc_hello_expected"),
    "v2-frame-on-v1": (_send_v2_frame_on_v1, "ipc_frame_unknown_type"),
    "no-resume": (_send_no_resume, "ipc_resume_expected"),
    "silence": (_send_nothing, "ipc_handshake_timeout"),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_bad_input_closes_only_that_connection(
    server: DurableServer, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="little_workflow.ipc")
    send, code = CASES[case]
    witness = Consumer(
        client_for(server.address, create_in_memory_storage(), "witness", token="right-token"),
        ack=False,
    )
    for index in range(3):
        await server.publish(f"before {index}")
    await witness.wait_for_count(3)

    peer = await RawPeer.open(server.address)
    await send(peer)
    answer = await asyncio.wait_for(peer.receive_until_closed(), 10)
    await peer.close()

    # The bad peer was told why and cut off (an oversize WebSocket message is refused by
    # websockets itself, with close code 1009, before a bye could follow) ...
    if case == "oversize" and peer.kind == "ws":
        assert peer.close_code == 1009
        assert "bye" not in [frame["type"] for frame in answer]
    else:
        assert answer[-1:] == [{"type": "bye", "code": code, "reason": answer[-1]["reason"]}]
    await wait_until(  # the server may log just after the socket closed
        lambda: any(code in record.getMessage() for record in caplog.records), "the log"
    )
    # ... while the other client keeps receiving, and nothing was lost or acked.
    await server.publish("after")
    await witness.wait_for_count(4)
    assert witness.seqs == [1, 2, 3, 4]
    assert server.queue.acked_through == 0
    assert [entry.seq for entry in await server.queue.frame_range(1)] == [1, 2, 3, 4]
    await witness.stop()


async def test_a_client_with_the_wrong_token_gets_a_typed_error(server: DurableServer) -> None:
    good = Consumer(client_for(server.address, None, "good", token="right-token"), ack=False)
    bad = client_for(server.address, None, "bad", token="guess")
    with pytest.raises(IpcAuthError) as caught:
        await bad.connect()  # not retried: the same token would be refused again
    assert caught.value.code == "ipc_auth_failed"
    assert "wrong" in caught.value.message
    assert bad.connect_count == 0
    await server.publish("still served")
    await good.wait_for_count(1)
    await good.stop()
    await bad.close()


async def test_a_peer_that_leaves_mid_frame_is_just_gone(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    queue = await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="mid-frame"
    )
    async with DurableServer(queue, IpcAddress.unix(directory / "s")) as server:
        peer = await RawPeer.open(server.address)
        await peer.send_bytes((100).to_bytes(4, "big") + b'{"type":')
        await peer.close()
        client = Consumer(client_for(server.address, None, "after"), ack=False)
        await server.publish("x")
        await client.wait_for_count(1)
        await client.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# Listening rules -------------------------------------------------------------------


async def test_a_non_loopback_host_needs_a_token(queue: DurableOutboundQueue) -> None:
    for address in (IpcAddress.tcp("0.0.0.0", 0), IpcAddress.ws("10.0.0.1", 0)):
        with pytest.raises(ConfigError) as caught:
            DurableServer(queue, address)
        assert caught.value.code == "ipc_token_required"
        DurableServer(queue, address, token="t")  # accepted (not started here)

    async def handler(conn: Connection) -> None:
        pass

    with pytest.raises(ConfigError):
        await listen(IpcAddress.tcp("0.0.0.0", 0), handler)


async def test_the_unix_socket_is_0600_and_removed_on_close(
    queue: DurableOutboundQueue, directory: Path
) -> None:
    path = directory / "mode.sock"
    old_umask = os.umask(0)  # the most permissive umask: the mode must not come from it
    try:
        server = DurableServer(queue, IpcAddress.unix(path))
        await server.start()
    finally:
        os.umask(old_umask)
    info = os.stat(path)
    assert stat.S_ISSOCK(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600
    await server.close()
    assert not path.exists()


async def test_a_stale_socket_file_is_replaced(
    queue: DurableOutboundQueue, directory: Path
) -> None:
    path = directory / "stale.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays behind, with no one listening: a crashed server's
    assert path.exists()
    async with DurableServer(queue, IpcAddress.unix(path)) as server:
        client = Consumer(client_for(server.address, None), ack=False)
        await server.publish("fresh")
        await client.wait_for_count(1)
        await client.stop()


async def test_a_live_socket_is_not_taken_over(
    queue: DurableOutboundQueue, directory: Path
) -> None:
    address = IpcAddress.unix(directory / "live.sock")
    async with DurableServer(queue, address) as first:
        with pytest.raises(IpcError) as caught:
            await DurableServer(queue, address).start()
        assert caught.value.code == "ipc_address_in_use"
        client = Consumer(client_for(first.address, None), ack=False)
        await first.publish("first still serves")
        await client.wait_for_count(1)
        await client.stop()


async def test_a_path_that_is_not_a_socket_is_never_touched(
    queue: DurableOutboundQueue, directory: Path
) -> None:
    path = directory / "precious.txt"
    path.write_text("keep me")
    with pytest.raises(IpcError) as caught:
        await DurableServer(queue, IpcAddress.unix(path)).start()
    assert caught.value.code == "ipc_address_in_use"
    assert path.read_text() == "keep me"


async def test_a_closed_server_removes_only_its_own_socket_file(
    queue: DurableOutboundQueue, directory: Path
) -> None:
    path = directory / "mine.sock"
    server = DurableServer(queue, IpcAddress.unix(path))
    await server.start()
    path.unlink()  # someone else took the path over ...
    path.write_text("theirs")
    await server.close()
    assert path.read_text() == "theirs"  # ... and keeps it
