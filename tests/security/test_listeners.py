"""Who can reach the IPC transports and the web UI: loopback by default, a token elsewhere.

Real sockets throughout. The machine's own non-loopback address (the one a packet to
another host would leave from) stands for "the network": a listener on loopback must
not be reachable there, and one on ``0.0.0.0`` is only usable with the right token.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from little_workflow.errors import ConfigError, IpcAuthError, IpcConnectionError
from little_workflow.platform.ipc import (
    Connection,
    DurableOutboundQueue,
    DurableServer,
    IpcAddress,
    create_durable_outbound_queue,
    listen,
)
from little_workflow.storage import create_in_memory_storage
from tests.platform.ipc_support import client_for
from tests.ui.support import ui_server

TOKEN = "a-token-for-the-listener-test"
NETWORKED = ["tcp", "ws"]


def _outward_address() -> str | None:
    """This machine's non-loopback IPv4 address, if it has one (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))  # TEST-NET-2: only a route lookup
        except OSError:
            return None
        host = str(probe.getsockname()[0])
    return None if host.startswith("127.") or host == "0.0.0.0" else host


def _connects(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _address(kind: str, host: str | None = None) -> IpcAddress:
    make = IpcAddress.tcp if kind == "tcp" else IpcAddress.ws
    return make() if host is None else make(host, 0)


@pytest.fixture
async def queue() -> DurableOutboundQueue:
    return await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="listeners"
    )


@pytest.mark.parametrize("kind", NETWORKED)
async def test_ipc_listens_on_loopback_by_default(kind: str, queue: DurableOutboundQueue) -> None:
    address = _address(kind)
    assert address.host == "127.0.0.1"
    async with DurableServer(queue, address) as server:
        port = server.address.port
        assert port
        assert server.address.host == "127.0.0.1"
        near = client_for(server.address, None, "near")
        await near.connect()
        await near.close()
        outward = _outward_address()
        if outward is not None:  # not bound to the network interface
            assert not await asyncio.to_thread(_connects, outward, port)


@pytest.mark.parametrize("kind", NETWORKED)
@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.7", "example.com"])
async def test_ipc_on_another_host_without_a_token_is_refused(
    kind: str, host: str, queue: DurableOutboundQueue
) -> None:
    address = _address(kind, host)
    with pytest.raises(ConfigError) as caught:
        DurableServer(queue, address)
    assert caught.value.code == "ipc_token_required"

    async def handler(conn: Connection) -> None:
        raise AssertionError("nothing may connect")

    with pytest.raises(ConfigError) as direct:  # the transport itself refuses too
        await listen(address, handler)
    assert direct.value.code == "ipc_token_required"


@pytest.mark.parametrize("kind", NETWORKED)
async def test_ipc_on_all_interfaces_needs_the_right_token(
    kind: str, queue: DurableOutboundQueue
) -> None:
    async with DurableServer(queue, _address(kind, "0.0.0.0"), token=TOKEN) as server:
        await server.publish("for token holders only")
        port = server.address.port
        assert port is not None
        outward = _outward_address() or "127.0.0.1"
        reach = _address(kind, outward).with_port(port)
        for token in (None, "wrong-token", TOKEN[:-1]):
            refused = client_for(reach, None, "intruder", token=token)
            with pytest.raises(IpcAuthError) as caught:
                await refused.connect()
            assert caught.value.code == "ipc_auth_failed"
            assert TOKEN not in caught.value.message
            await refused.close()
        assert server.connection_count == 0
        allowed = client_for(reach, None, "holder", token=TOKEN)
        await allowed.connect()
        frames = allowed.frames()
        received = await anext(frames)
        assert received.frame == "for token holders only"
        await allowed.close()


def test_ui_listens_on_loopback_by_default(tmp_path: Path) -> None:
    with ui_server(tmp_path / "data") as (_process, line):
        url = line.split()[-1]
        assert url.startswith("http://127.0.0.1:")
        assert "token" not in url
        port = int(url.rsplit(":", 1)[1].strip("/"))
        outward = _outward_address()
        if outward is not None:
            assert not _connects(outward, port)


def test_ui_on_all_interfaces_requires_a_token(tmp_path: Path) -> None:
    with ui_server(tmp_path / "data", "--host", "0.0.0.0") as (_process, line):
        url = line.split()[-1]
        assert "?token=" in url  # none given: one was generated, and only the URL has it
        port = int(url.split(":")[2].split("/")[0])
        token = url.split("?token=")[1]
        host = _outward_address() or "127.0.0.1"
        base = f"http://{host}:{port}"
        with httpx.Client(base_url=base, trust_env=False) as http:
            assert http.get("/api/runs").status_code == 401
            wrong = {"authorization": "Bearer " + token[:-1] + ("x" if token[-1] != "x" else "y")}
            assert http.get("/api/runs", headers=wrong).status_code == 401
            right = http.get("/api/runs", headers={"authorization": f"Bearer {token}"})
            assert right.status_code == 200
            assert right.json()["runs"] == []


async def test_a_client_cannot_reach_a_loopback_server_from_outside(
    queue: DurableOutboundQueue,
) -> None:
    outward = _outward_address()
    if outward is None:
        pytest.skip("this machine has no non-loopback address")
    async with DurableServer(queue, IpcAddress.tcp()) as server:
        port = server.address.port
        assert port is not None
        client = client_for(IpcAddress.tcp(outward, port), None, "outsider", reconnect=None)
        with pytest.raises(IpcConnectionError):
            await client.connect()
        await client.close()
