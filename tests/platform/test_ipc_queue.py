"""DurableOutboundQueue over every KV backend: numbering, persistence, compaction."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_workflow.codec import JsonValue
from little_workflow.errors import CorruptDataError, SchemaVersionError
from little_workflow.platform.ipc import (
    AckBeyondLastSeqError,
    DurableOutboundQueue,
    FrameError,
    QueueEntry,
    create_durable_outbound_queue,
)
from little_workflow.platform.ipc._queue import queue_prefix
from little_workflow.storage import (
    ManagedStorage,
    create_file_storage,
    create_in_memory_storage,
    open_storage,
)

SOCKET = "/run/little-workflow/child-42.sock"
Opener = Callable[[], Awaitable[ManagedStorage]]


@pytest.fixture(params=["memory", "file", "sqlite"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    """Opens the test's store; each call is a fresh handle on the same data (a reopen)."""
    opened: list[ManagedStorage] = []
    memory = create_in_memory_storage()

    async def open_once() -> ManagedStorage:
        if request.param == "memory":
            return memory  # the same object: in-memory data lives only there
        if request.param == "file":
            store: ManagedStorage = create_file_storage(root=tmp_path / "kv")
        else:
            store = await open_storage(f"sqlite:///{tmp_path}/kv.db")
        opened.append(store)
        return store

    yield open_once
    for store in opened:
        await store.close()
    await memory.close()


async def _open(opener: Opener, socket_path: str = SOCKET) -> DurableOutboundQueue:
    return await create_durable_outbound_queue(storage=await opener(), socket_path=socket_path)


async def _snapshot(store: ManagedStorage) -> dict[str, JsonValue]:
    keys = await store.list("")
    return await store.get_many(keys)


def _seqs(entries: Iterable[QueueEntry]) -> list[int]:
    return [entry.seq for entry in entries]


async def test_numbering_starts_at_one_and_counts_up(opener: Opener) -> None:
    queue = await _open(opener)
    assert (queue.last_seq, queue.acked_through, queue.pending) == (0, 0, 0)
    assert [await queue.append(f"f{i}") for i in range(5)] == [1, 2, 3, 4, 5]
    assert (queue.last_seq, queue.pending) == (5, 5)


async def test_keys_follow_the_documented_layout(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    await queue.append("a")
    prefix = queue_prefix(SOCKET)
    assert prefix.startswith("ipc:")
    assert len(prefix) == len("ipc:") + 16 + 1
    assert "/" not in prefix
    assert await store.list(prefix) == [f"{prefix}frame:0000000001", f"{prefix}meta"]
    assert await store.get(f"{prefix}meta") == {
        "v": 1,
        "socketPath": SOCKET,
        "lastSeq": 1,
        "ackedThrough": 0,
    }


async def test_reopen_continues_numbering_and_keeps_unacked_frames(opener: Opener) -> None:
    queue = await _open(opener)
    for i in range(5):
        await queue.append(f"frame {i + 1}")
    await queue.ack_up_to(2)

    reopened = await _open(opener)
    assert (reopened.last_seq, reopened.acked_through) == (5, 2)
    entries = await reopened.frame_range(1)
    assert entries == [QueueEntry(seq=s, frame=f"frame {s}") for s in (3, 4, 5)]
    assert await reopened.append("frame 6") == 6


async def test_reopen_after_everything_is_acked_keeps_counting(opener: Opener) -> None:
    queue = await _open(opener)
    for i in range(3):
        await queue.append(str(i))
    await queue.ack_up_to(3)
    reopened = await _open(opener)
    assert (reopened.last_seq, reopened.acked_through) == (3, 3)
    assert await reopened.frame_range(0) == []
    assert await reopened.append("next") == 4


async def test_ack_compacts_the_acked_frames(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    for i in range(6):
        await queue.append(str(i))
    await queue.ack_up_to(4)
    prefix = queue_prefix(SOCKET)
    assert await store.list(prefix + "frame:") == [
        f"{prefix}frame:0000000005",
        f"{prefix}frame:0000000006",
    ]
    assert (queue.acked_through, queue.pending) == (4, 2)
    assert _seqs(await queue.frame_range(1)) == [5, 6]


async def test_ack_beyond_the_last_seq_is_refused_and_changes_nothing(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    for i in range(3):
        await queue.append(str(i))
    await queue.ack_up_to(1)
    before = await _snapshot(store)
    with pytest.raises(AckBeyondLastSeqError) as caught:
        await queue.ack_up_to(4)
    assert caught.value.code == "ipc_ack_beyond_last_seq"
    assert "last seq is 3" in caught.value.message
    assert await _snapshot(store) == before
    assert (queue.last_seq, queue.acked_through) == (3, 1)
    assert _seqs(await queue.frame_range(1)) == [2, 3]


async def test_acking_backwards_or_again_is_a_no_op(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    for i in range(4):
        await queue.append(str(i))
    await queue.ack_up_to(3)
    before = await _snapshot(store)
    await queue.ack_up_to(3)
    await queue.ack_up_to(1)
    await queue.ack_up_to(0)
    assert await _snapshot(store) == before
    assert queue.acked_through == 3


async def test_frame_range_from_any_point_and_with_a_limit(opener: Opener) -> None:
    queue = await _open(opener)
    for i in range(1, 8):
        await queue.append(f"#{i}")
    await queue.ack_up_to(2)
    assert _seqs(await queue.frame_range(0)) == [3, 4, 5, 6, 7]
    assert _seqs(await queue.frame_range(5)) == [5, 6, 7]
    assert _seqs(await queue.frame_range(7)) == [7]
    assert await queue.frame_range(8) == []
    assert _seqs(await queue.frame_range(3, limit=2)) == [3, 4]
    assert await queue.frame_range(3, limit=0) == []
    # A reopened queue has nothing in memory: the same answers come from storage.
    reopened = await _open(opener)
    assert await reopened.frame_range(0) == await queue.frame_range(0)
    assert await reopened.frame_range(4, limit=2) == [
        QueueEntry(seq=4, frame="#4"),
        QueueEntry(seq=5, frame="#5"),
    ]


async def test_a_storage_read_is_one_read_many(tmp_path: Path) -> None:
    store = await open_storage(f"sqlite:///{tmp_path}/kv.db")
    calls: list[list[str]] = []
    original = store.get_many

    async def counting(keys: Iterable[str]) -> dict[str, JsonValue]:
        keys = list(keys)
        calls.append(keys)
        return await original(keys)

    try:
        queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
        for i in range(50):
            await queue.append(str(i))
        store.get_many = counting  # type: ignore[method-assign]
        reopened = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
        assert len(await reopened.frame_range(1)) == 50
        assert len(calls) == 1
        assert len(calls[0]) == 50
        calls.clear()
        assert len(await queue.frame_range(1)) == 50  # the appending object: from memory
        assert calls == []
    finally:
        await store.close()


async def test_concurrent_appends_get_distinct_consecutive_seqs(opener: Opener) -> None:
    queue = await _open(opener)
    frames = [f"task-{i}" for i in range(40)]
    seqs = await asyncio.gather(*(queue.append(frame) for frame in frames))
    assert sorted(seqs) == list(range(1, 41))
    by_seq = {entry.seq: entry.frame for entry in await queue.frame_range(1)}
    assert {by_seq[seq] for seq in seqs} == set(frames)
    assert all(by_seq[seq] == frame for seq, frame in zip(seqs, frames, strict=True))
    reopened = await _open(opener)
    assert {e.seq: e.frame for e in await reopened.frame_range(1)} == by_seq


OPAQUE = [
    "",
    " ",
    "{}",
    '{"type":"durable","seq":1,"frame":"x"}',
    "null",
    "[1, 2",
    "not json at all {",
    "\x00\x01\x1f\x7f",
    "line\nbreak\r\n\u2028\u2029",
    "emoji \U0001f600 and CJK 漢字 and RTL مرحبا",
    '\\"quoted\\" \\u0000',
    "x" * 100_000,
]


@pytest.mark.parametrize("frame", OPAQUE, ids=range(len(OPAQUE)))
async def test_frames_are_opaque_strings(opener: Opener, frame: str) -> None:
    queue = await _open(opener)
    seq = await queue.append(frame)
    assert await queue.frame_range(seq) == [QueueEntry(seq=seq, frame=frame)]
    reopened = await _open(opener)
    assert await reopened.frame_range(seq) == [QueueEntry(seq=seq, frame=frame)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(frames=st.lists(st.text(), min_size=1, max_size=8))
async def test_any_unicode_text_round_trips(tmp_path: Path, frames: list[str]) -> None:
    store = create_file_storage(root=tmp_path / "hyp")
    socket_path = f"hyp-{id(frames)}-{len(frames)}"
    queue = await create_durable_outbound_queue(storage=store, socket_path=socket_path)
    first = queue.last_seq + 1
    for frame in frames:
        await queue.append(frame)
    reopened = await create_durable_outbound_queue(storage=store, socket_path=socket_path)
    got = await reopened.frame_range(first)
    assert [entry.frame for entry in got] == frames


async def test_a_frame_that_is_not_text_is_refused_before_anything_is_written(
    opener: Opener,
) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    before = await _snapshot(store)
    with pytest.raises(FrameError, match="lone surrogate"):
        await queue.append("bad \udc80 text")
    with pytest.raises(FrameError, match="must be a str"):
        await queue.append(b"bytes")  # type: ignore[arg-type]
    assert await _snapshot(store) == before
    assert queue.last_seq == 0


async def test_socket_paths_name_separate_queues(opener: Opener) -> None:
    store = await opener()
    one = await create_durable_outbound_queue(storage=store, socket_path="/tmp/a.sock")
    two = await create_durable_outbound_queue(storage=store, socket_path="/tmp/b.sock")
    await one.append("a1")
    await one.append("a2")
    assert await two.append("b1") == 1
    assert _seqs(await one.frame_range(1)) == [1, 2]
    assert [e.frame for e in await two.frame_range(1)] == ["b1"]


async def test_leftovers_of_a_crash_are_collected_on_open(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    for i in range(4):
        await queue.append(f"f{i + 1}")
    await queue.ack_up_to(2)
    prefix = queue_prefix(SOCKET)
    # A crash after an ack's meta write, before its deletes; and one inside an append,
    # after the frame write, before the meta write.
    await store.set(f"{prefix}frame:0000000001", "acked, not deleted")
    await store.set(f"{prefix}frame:0000000005", "written, never returned")

    reopened = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    assert await store.list(prefix + "frame:") == [
        f"{prefix}frame:0000000003",
        f"{prefix}frame:0000000004",
    ]
    assert await reopened.append("f5") == 5
    assert [e.frame for e in await reopened.frame_range(1)] == ["f3", "f4", "f5"]


@pytest.mark.parametrize(
    ("meta", "error"),
    [
        ("not an object", CorruptDataError),
        ({"v": 2, "socketPath": SOCKET, "lastSeq": 1, "ackedThrough": 0}, SchemaVersionError),
        ({"v": 1, "socketPath": "/other", "lastSeq": 1, "ackedThrough": 0}, CorruptDataError),
        ({"v": 1, "socketPath": SOCKET, "lastSeq": 1, "ackedThrough": 2}, CorruptDataError),
        ({"v": 1, "socketPath": SOCKET, "lastSeq": True, "ackedThrough": 0}, CorruptDataError),
    ],
)
async def test_bad_meta_is_reported_not_overwritten(
    opener: Opener, meta: JsonValue, error: type[Exception]
) -> None:
    store = await opener()
    key = queue_prefix(SOCKET) + "meta"
    await store.set(key, meta)
    with pytest.raises(error):
        await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    assert await store.get(key) == meta


async def test_a_stray_key_under_the_prefix_is_corrupt_data(opener: Opener) -> None:
    store = await opener()
    await store.set(queue_prefix(SOCKET) + "frame:abc", "x")
    with pytest.raises(CorruptDataError, match="not a frame key"):
        await create_durable_outbound_queue(storage=store, socket_path=SOCKET)


async def test_a_missing_unacked_frame_is_corrupt_data(opener: Opener) -> None:
    store = await opener()
    queue = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    for i in range(3):
        await queue.append(str(i))
    await store.delete(queue_prefix(SOCKET) + "frame:0000000002")
    reopened = await create_durable_outbound_queue(storage=store, socket_path=SOCKET)
    with pytest.raises(CorruptDataError, match=r"frame 2 .* is missing"):
        await reopened.frame_range(1)
