"""DurableClient's own rules (acks, its ack store) and a replay racing with publishes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, CorruptDataError, SchemaVersionError
from little_workflow.platform.ipc import (
    AckBeyondLastSeqError,
    DurableClient,
    DurableServer,
    IpcAddress,
    ack_key,
    create_durable_outbound_queue,
)
from little_workflow.storage import create_in_memory_storage
from tests.platform.ipc_support import (
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
    return address_for(request.param, directory)


@pytest.fixture
async def server(address: IpcAddress) -> AsyncIterator[DurableServer]:
    queue = await create_durable_outbound_queue(
        storage=create_in_memory_storage(), socket_path="client-rules"
    )
    async with DurableServer(queue, address) as started:
        yield started


async def test_a_publish_racing_a_long_replay_is_sent_once_in_order(
    server: DurableServer,
) -> None:
    # More than one replay batch (256) is waiting; publishes land while it is sent.
    for index in range(700):
        await server.publish(f"old {index}")
    consumer = Consumer(client_for(server.address, create_in_memory_storage()))
    for index in range(300):
        await server.publish(f"new {index}")
        await asyncio.sleep(0)
    await consumer.wait_for_count(1000)
    assert consumer.seqs == list(range(1, 1001))
    assert consumer.received[699].frame == "old 699"
    assert consumer.received[700].frame == "new 0"
    assert consumer.client.duplicates_dropped == 0
    await consumer.stop()


async def test_acking_what_was_not_received_is_refused(server: DurableServer) -> None:
    store = create_in_memory_storage()
    client = client_for(server.address, store)
    consumer = Consumer(client, ack=False)
    await server.publish("one")
    await server.publish("two")
    await consumer.wait_for_count(2)
    with pytest.raises(AckBeyondLastSeqError):
        await client.ack(3)
    assert await store.get(ack_key("consumer")) is None
    await client.ack(2)
    await client.ack(1)  # backwards: nothing
    assert await store.get(ack_key("consumer")) == {"v": 1, "ackedThrough": 2}
    assert client.acked_through == 2
    await wait_until(lambda: server.queue.acked_through == 2, "the server's ack")
    await consumer.stop()


async def test_an_ack_while_disconnected_is_persisted_and_resumed_with(
    server: DurableServer,
) -> None:
    store = create_in_memory_storage()
    client = client_for(server.address, store, reconnect=None)
    consumer = Consumer(client, ack=False)
    for index in range(3):
        await server.publish(str(index))
    await consumer.wait_for_count(3)
    await server.drop_connections()
    await wait_until(consumer.task.done, "the lost connection")
    await client.ack(3)  # no connection: persisted only
    assert await store.get(ack_key("consumer")) == {"v": 1, "ackedThrough": 3}
    await client.reconnect()  # its durableResume says 3
    await wait_until(lambda: server.queue.acked_through == 3, "the resume to count as an ack")
    await client.close()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("three", CorruptDataError),
        ({"v": 1, "ackedThrough": -1}, CorruptDataError),
        ({"v": 1, "ackedThrough": True}, CorruptDataError),
        ({"v": 9, "ackedThrough": 3}, SchemaVersionError),
        ({"ackedThrough": 3}, CorruptDataError),
        ({"v": "1", "ackedThrough": 3}, CorruptDataError),
    ],
)
async def test_a_bad_ack_record_is_reported(
    server: DurableServer, value: JsonValue, error: type[Exception]
) -> None:
    store = create_in_memory_storage()
    await store.set(ack_key("consumer"), value)
    client = client_for(server.address, store)
    with pytest.raises(error):
        await client.connect()
    assert await store.get(ack_key("consumer")) == value
    await client.close()


def test_client_ids_and_versions_are_checked() -> None:
    with pytest.raises(ConfigError):
        DurableClient("tcp://127.0.0.1:1", ack_store=None, client_id="c", version=3)
    with pytest.raises(Exception, match="IPC client id"):
        DurableClient("tcp://127.0.0.1:1", ack_store=None, client_id="../escape")
    assert ack_key("host:job-7") == "ipc-client:host:job-7:ack"
