"""DurableServer and DurableClient over each transport: delivery, resume, restarts, v1/v2."""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from little_workflow.platform.ipc import (
    Connection,
    DurableOutboundQueue,
    DurableServer,
    FrameTooLargeError,
    IpcAddress,
    IpcConnectionError,
    ReconnectPolicy,
    SequenceGapError,
    create_durable_outbound_queue,
    listen,
)
from little_workflow.storage import create_in_memory_storage, open_storage
from tests.platform.ipc_support import (
    FAST,
    TRANSPORTS,
    Consumer,
    address_for,
    client_for,
    short_dir,
    wait_until,
)


@pytest.fixture
def directory() -> Iterator[Path]:
    with short_dir() as path:
        yield path


@pytest.fixture(params=TRANSPORTS)
def address(request: pytest.FixtureRequest, directory: Path) -> IpcAddress:
    """The one fixture every server test runs through: Unix socket, TCP, WebSocket."""
    return address_for(request.param, directory)


@pytest.fixture
async def queue() -> DurableOutboundQueue:
    return await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="test-channel"
    )


@pytest.fixture
async def server(queue: DurableOutboundQueue, address: IpcAddress) -> AsyncIterator[DurableServer]:
    async with DurableServer(queue, address) as started:
        yield started


async def _publish(server: DurableServer, count: int, tag: str = "f") -> list[int]:
    return [await server.publish(f"{tag}{i}") for i in range(count)]


async def test_live_frames_arrive_in_order_and_are_acked(server: DurableServer) -> None:
    consumer = Consumer(client_for(server.address, create_in_memory_storage()))
    await wait_until(lambda: server.connection_count == 1, "the client")
    seqs = await _publish(server, 20)
    await consumer.wait_for_count(20)
    assert consumer.seqs == seqs == list(range(1, 21))
    assert [frame.frame for frame in consumer.received] == [f"f{i}" for i in range(20)]
    await wait_until(lambda: server.queue.acked_through == 20, "compaction")
    assert server.queue.pending == 0
    await consumer.stop()


async def test_frames_published_before_the_client_connects_are_replayed(
    server: DurableServer,
) -> None:
    await _publish(server, 5, "early")
    consumer = Consumer(client_for(server.address, create_in_memory_storage()))
    await consumer.wait_for_count(5)
    await _publish(server, 5, "late")
    await consumer.wait_for_count(10)
    assert consumer.seqs == list(range(1, 11))
    assert consumer.received[4].frame == "early4"
    assert consumer.received[5].frame == "late0"
    await consumer.stop()


@pytest.mark.parametrize("side", ["client", "server"])
async def test_resume_after_a_disconnect_has_no_gap_and_no_duplicate(
    server: DurableServer, side: str
) -> None:
    client = client_for(server.address, create_in_memory_storage())
    consumer = Consumer(client, ack=False)
    await _publish(server, 10)
    await consumer.wait_for_count(10)
    await client.ack(6)  # 7..10 were delivered but not acked: the server sends them again
    if side == "client":
        await client.reconnect()
    else:
        assert await server.drop_connections() == 1
    await wait_until(lambda: client.connect_count == 2 and client.connected, "the reconnect")
    await _publish(server, 5)
    await consumer.wait_for_count(15)
    assert consumer.seqs == list(range(1, 16))
    await consumer.stop()


async def test_a_hundred_random_disconnects_lose_and_repeat_nothing(
    server: DurableServer,
) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    total = 800
    client = client_for(server.address, create_in_memory_storage())
    received: list[int] = []

    async def consume() -> None:
        async for frame in client.frames():
            assert frame.seq is not None
            received.append(frame.seq)
            if rng.random() < 0.6:  # leave some unacked: they must come back, once
                await client.ack(frame.seq)
            for _ in range(rng.randrange(3)):
                await asyncio.sleep(0)

    async def publish() -> None:
        for index in range(total):
            await server.publish(f"frame {index + 1}")
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)

    disconnects = {"client": 0, "server": 0}

    async def disrupt() -> None:
        while sum(disconnects.values()) < 100:
            for _ in range(rng.randrange(1, 60)):
                await asyncio.sleep(0)  # a random moment: mid-replay, mid-publish, idle
            if rng.random() < 0.5:
                if client.connected:
                    disconnects["client"] += 1
                    await client.reconnect()
            elif await server.drop_connections():
                disconnects["server"] += 1

    consumer = asyncio.create_task(consume())
    await asyncio.gather(publish(), disrupt())
    await wait_until(lambda: len(received) >= total or consumer.done(), f"all frames, seed {seed}")
    await client.close()
    await asyncio.wait_for(consumer, 10)
    assert received == list(range(1, total + 1)), f"seed {seed}"
    assert disconnects["client"] > 0, disconnects
    assert disconnects["server"] > 0, disconnects
    assert client.connect_count > 100 - disconnects["server"], f"seed {seed}"


async def test_a_new_client_object_resumes_from_the_persisted_ack(
    server: DurableServer, tmp_path: Path
) -> None:
    ack_store = await open_storage(f"sqlite:///{tmp_path}/acks.db")
    try:
        await _publish(server, 8)
        first = client_for(server.address, ack_store, "worker-1")
        taken: list[int] = []
        async for frame in first.frames():
            assert frame.seq is not None
            taken.append(frame.seq)
            if frame.seq <= 5:
                await first.ack(frame.seq)
            if frame.seq == 7:
                break  # 6 and 7 received, not acked: a crash here
        await first.close()
        assert taken == [1, 2, 3, 4, 5, 6, 7]

        again = client_for(server.address, ack_store, "worker-1")
        consumer = Consumer(again)
        await consumer.wait_for_count(3)
        assert consumer.seqs == [6, 7, 8]
        assert again.acked_through >= 5
        await consumer.stop()
    finally:
        await ack_store.close()


_CHILD = """
import asyncio, sys
from little_workflow.platform.ipc import DurableClient, ReconnectPolicy
from little_workflow.storage import open_storage

async def main(address, url, last):
    store = await open_storage(url)
    client = DurableClient(address, ack_store=store, client_id="proc",
                           reconnect=ReconnectPolicy(initial_delay=0.01, attempts=100))
    async for frame in client.frames():
        print(frame.seq, frame.frame, flush=True)
        await client.ack(frame.seq)
        if frame.seq >= last:
            break
    await client.close()
    await store.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


async def test_a_restarted_client_process_resumes_from_its_ack(
    server: DurableServer, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/acks.db"
    await _publish(server, 6)

    async def run_child(last: int) -> list[str]:
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CHILD,
            str(server.address),
            url,
            str(last),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        out, err = await asyncio.wait_for(child.communicate(), 60)
        assert child.returncode == 0, err.decode()
        return out.decode().splitlines()

    assert await run_child(4) == ["1 f0", "2 f1", "3 f2", "4 f3"]
    assert await run_child(6) == ["5 f4", "6 f5"]


async def test_a_restarted_server_replays_from_storage(address: IpcAddress, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/queue.db"
    store = await open_storage(url)
    queue = await create_durable_outbound_queue(storage=store, socket_path="restart")
    first = DurableServer(queue, address)
    await first.start()
    bound = first.address
    client = client_for(bound, create_in_memory_storage())
    consumer = Consumer(client, ack=False)
    await _publish(first, 5)
    await consumer.wait_for_count(5)
    await client.ack(3)
    await wait_until(lambda: queue.acked_through == 3, "the ack")
    await first.close()
    await store.close()

    store = await open_storage(url)
    queue = await create_durable_outbound_queue(storage=store, socket_path="restart")
    assert (queue.last_seq, queue.acked_through) == (5, 3)
    second = DurableServer(queue, bound)  # the same path or port: the client reconnects
    await second.start()
    await _publish(second, 2, "after")
    await consumer.wait_for_count(7)
    assert consumer.seqs == list(range(1, 8))
    assert consumer.received[-1].frame == "after1"
    await consumer.stop()
    await second.close()
    await store.close()


async def test_compaction_waits_for_every_connected_durable_client(
    server: DurableServer,
) -> None:
    fast = Consumer(client_for(server.address, create_in_memory_storage(), "fast"))
    slow_client = client_for(server.address, create_in_memory_storage(), "slow")
    slow = Consumer(slow_client, ack=False)
    await _publish(server, 10)
    await fast.wait_for_count(10)
    await slow.wait_for_count(10)
    await wait_until(lambda: fast.client.acked_through == 10, "fast acks")
    await slow_client.ack(4)
    await wait_until(lambda: server.queue.acked_through == 4, "compaction to the slowest")
    assert [entry.seq for entry in await server.queue.frame_range(1)] == [5, 6, 7, 8, 9, 10]
    await slow_client.ack(10)
    await wait_until(lambda: server.queue.acked_through == 10, "compaction to both")
    await fast.stop()
    await slow.stop()


async def test_a_client_back_behind_the_compaction_point_gets_a_gap_error(
    server: DurableServer,
) -> None:
    stay = Consumer(client_for(server.address, create_in_memory_storage(), "stay"))
    leave_store = create_in_memory_storage()
    leave = Consumer(client_for(server.address, leave_store, "leave"))
    await _publish(server, 3)
    await stay.wait_for_count(3)
    await leave.wait_for_count(3)
    await wait_until(lambda: server.queue.acked_through == 3, "both acked")
    await leave.stop()
    await _publish(server, 3)  # acked by "stay" alone, so compacted
    await stay.wait_for_count(6)
    await wait_until(lambda: server.queue.acked_through == 6, "compaction")

    back = client_for(server.address, leave_store, "leave")
    with pytest.raises(SequenceGapError) as caught:
        async for _frame in back.frames():
            pass
    assert caught.value.code == "ipc_sequence_gap"
    assert "frames 4 to 6" in caught.value.message
    await back.close()
    await stay.stop()


async def test_a_v1_client_gets_live_messages_and_no_v2_frames(server: DurableServer) -> None:
    await _publish(server, 3, "before")
    durable = Consumer(client_for(server.address, create_in_memory_storage(), "v2"))
    v1 = Consumer(client_for(server.address, None, "v1", version=1), ack=False)
    await wait_until(lambda: server.connection_count == 2, "both clients")
    await _publish(server, 4, "live")
    await v1.wait_for_count(4)
    await durable.wait_for_count(7)
    assert v1.client.negotiated_version == 1
    assert [(f.seq, f.frame) for f in v1.received] == [(None, f"live{i}") for i in range(4)]
    assert durable.seqs == list(range(1, 8))
    await v1.stop()
    await durable.stop()


async def test_a_raw_v1_peer_sees_only_v1_frames(server: DurableServer) -> None:
    from little_workflow.platform.ipc import dial

    await _publish(server, 2)
    conn = await dial(server.address)
    await conn.send({"type": "hello", "version": 1})
    assert await conn.receive() == {"type": "hello", "version": 1}
    await wait_until(lambda: server.connection_count == 1, "the v1 peer")
    await _publish(server, 2, "live")
    assert await conn.receive() == {"type": "message", "payload": "live0"}
    assert await conn.receive() == {"type": "message", "payload": "live1"}
    await conn.close()
    assert server.queue.pending == 4  # a v1 peer acks nothing; nothing was dropped


async def test_a_v2_client_works_with_a_v1_server(address: IpcAddress) -> None:
    heard: list[object] = []

    async def v1_server(conn: Connection) -> None:
        hello = await conn.receive()
        heard.append(hello)
        await conn.send({"type": "hello", "version": 1})
        await conn.send({"type": "message", "payload": "plain"})
        await conn.send({"type": "message", "payload": {"structured": [1, 2]}})
        while (obj := await conn.receive()) is not None:
            heard.append(obj)

    listener = await listen(address, v1_server)
    client = client_for(listener.address, create_in_memory_storage())
    consumer = Consumer(client, ack=False)
    await consumer.wait_for_count(2)
    assert client.negotiated_version == 1
    assert [(f.seq, f.frame) for f in consumer.received] == [
        (None, "plain"),
        (None, '{"structured": [1, 2]}'),
    ]
    await consumer.stop()
    await listener.close()
    assert heard[0] == {"type": "hello", "version": 2}
    assert all(obj["type"] in ("hello", "bye") for obj in heard)  # type: ignore[index]


async def test_publishing_a_frame_too_large_to_send_is_refused(address: IpcAddress) -> None:
    queue = await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="small"
    )
    async with DurableServer(queue, address, max_frame_bytes=1024) as server:
        await server.publish("x" * 900)
        with pytest.raises(FrameTooLargeError):
            await server.publish("x" * 1000)
        with pytest.raises(FrameTooLargeError):
            await server.publish('"' * 600)  # JSON escaping doubles it
        assert queue.last_seq == 1


async def test_closing_the_client_ends_frames(server: DurableServer) -> None:
    consumer = Consumer(client_for(server.address, create_in_memory_storage()))
    await _publish(server, 1)
    await consumer.wait_for_count(1)
    await consumer.stop()
    assert consumer.error is None
    assert consumer.task.done()


async def test_the_client_gives_up_after_its_attempts(directory: Path) -> None:
    delays: list[float] = []

    async def no_sleep(delay: float) -> None:
        delays.append(delay)

    client = client_for(
        IpcAddress.unix(directory / "nobody.sock"),
        None,
        reconnect=ReconnectPolicy(initial_delay=0.5, max_delay=1.5, attempts=4),
        sleep=no_sleep,
    )
    with pytest.raises(IpcConnectionError) as caught:
        await client.connect()
    assert caught.value.code == "ipc_connection_failed"
    assert delays == [0.5, 1.0, 1.5]


async def test_without_a_policy_a_lost_connection_is_raised(server: DurableServer) -> None:
    client = client_for(server.address, create_in_memory_storage(), reconnect=None)
    consumer = Consumer(client)
    await _publish(server, 1)
    await consumer.wait_for_count(1)
    await server.drop_connections()
    await wait_until(consumer.task.done, "frames() to end")
    assert isinstance(consumer.error, IpcConnectionError)
    assert consumer.error.code == "ipc_connection_lost"
    await client.reconnect()  # the caller decides: here, to carry on
    await _publish(server, 1)
    again = Consumer(client)
    await again.wait_for_count(1)
    assert again.seqs == [2]
    await again.stop()


def test_fast_policy_is_what_the_tests_think() -> None:
    assert FAST.delay(1) == 0.001
    assert FAST.delay(20) == 0.01
