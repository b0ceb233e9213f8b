"""``DurableOutboundQueue``: numbered, persisted outbound frames, compacted by acks.

Keys (``<h>`` is the first 16 hex digits of the SHA-256 of the socket path, since a
path holds ``/``, which a key would turn into directories, and may be long)::

    ipc:<h>:meta                  {"v": 1, "socketPath": ..., "lastSeq": n, "ackedThrough": m}
    ipc:<h>:frame:<seq, 10 digits>  the frame, a JSON string

Crash safety without transactions (a ``StorageAdapter`` has none): ``append`` writes
the frame, then the meta; the seq is returned only after both. A crash between them
leaves a frame past ``lastSeq`` that was never returned to anyone; the next append
overwrites it, and opening the queue deletes it. ``ack_up_to`` writes the meta first,
then deletes the frames: a crash between leaves frames at or below ``ackedThrough``,
never read again and deleted on the next open.

One producer: a queue is owned by one object in one process. Two processes appending
to the same queue would hand out the same seqs (the meta is read once, at open).
Within the process, an ``asyncio.Lock`` gives concurrent ``append`` calls distinct,
consecutive seqs.

The frames not yet acked are also kept in memory (up to ``cache_bytes`` of them, the
most recent), so a server sending what it just appended does not read it back from
storage; after a reopen they are read from storage, in one ``read_many`` per range.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections import deque
from dataclasses import dataclass

from little_workflow.codec import JsonValue
from little_workflow.errors import (
    AckBeyondLastSeqError,
    CorruptDataError,
    FrameError,
    SchemaVersionError,
)
from little_workflow.storage import StorageAdapter, read_many

__all__ = ["DurableOutboundQueue", "QueueEntry", "create_durable_outbound_queue", "queue_prefix"]

_META_VERSION = 1
_DEFAULT_CACHE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueEntry:
    """One frame of a queue with its sequence number."""

    seq: int
    frame: str


def queue_prefix(socket_path: str) -> str:
    """The key prefix of the queue for ``socket_path`` (``ipc:<16 hex digits>:``)."""
    return f"ipc:{hashlib.sha256(socket_path.encode('utf-8')).hexdigest()[:16]}:"


def _check_seq(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


class DurableOutboundQueue:
    """Outbound frames numbered 1, 2, 3, ..., persisted before their seq is returned.

    Frames are opaque strings. Create one with ``await create_durable_outbound_queue``;
    the module docstring says how it survives a crash and why it has one producer.
    """

    def __init__(
        self,
        *,
        storage: StorageAdapter,
        socket_path: str,
        last_seq: int,
        acked_through: int,
        cache_bytes: int = _DEFAULT_CACHE_BYTES,
    ) -> None:
        self._storage = storage
        self._socket_path = socket_path
        self._prefix = queue_prefix(socket_path)
        self._last_seq = last_seq
        self._acked_through = acked_through
        self._lock = asyncio.Lock()
        # The newest unacked frames, contiguous: seqs _cache_first .. _last_seq.
        self._cache: deque[str] = deque()
        self._cache_first = last_seq + 1
        self._cache_chars = 0
        self._cache_limit = cache_bytes

    @property
    def socket_path(self) -> str:
        """The socket path (or any stable channel name) this queue is keyed by."""
        return self._socket_path

    @property
    def key_prefix(self) -> str:
        """The storage key prefix of this queue's meta and frames."""
        return self._prefix

    @property
    def last_seq(self) -> int:
        """The seq of the latest appended frame; 0 before the first."""
        return self._last_seq

    @property
    def acked_through(self) -> int:
        """Every frame up to this seq is acked and deleted; 0 before the first ack."""
        return self._acked_through

    @property
    def pending(self) -> int:
        """How many frames are appended and not yet acked."""
        return self._last_seq - self._acked_through

    def _frame_key(self, seq: int) -> str:
        return f"{self._prefix}frame:{seq:010d}"

    def _meta(self, last_seq: int, acked_through: int) -> JsonValue:
        return {
            "v": _META_VERSION,
            "socketPath": self._socket_path,
            "lastSeq": last_seq,
            "ackedThrough": acked_through,
        }

    async def append(self, frame: str) -> int:
        """Persist ``frame`` as the next seq and return that seq.

        ``FrameError`` (and nothing written) if ``frame`` is not a string of valid
        Unicode text.
        """
        if not isinstance(frame, str):
            raise FrameError(f"a queued frame must be a str, not {type(frame).__name__}")
        if not frame.isascii():
            try:
                frame.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise FrameError(
                    f"a queued frame holds a lone surrogate at position {exc.start}, "
                    "which is not valid Unicode text"
                ) from exc
        async with self._lock:
            seq = self._last_seq + 1
            await self._storage.set(self._frame_key(seq), frame)
            await self._storage.set(self._prefix + "meta", self._meta(seq, self._acked_through))
            self._last_seq = seq
            self._cache_put(seq, frame)
            return seq

    async def ack_up_to(self, seq: int) -> None:
        """Mark every frame up to ``seq`` consumed and delete it.

        Acking backwards (``seq <= acked_through``) does nothing. ``seq > last_seq``
        raises ``AckBeyondLastSeqError`` and changes nothing.
        """
        _check_seq(seq, "seq")
        async with self._lock:
            if seq > self._last_seq:
                raise AckBeyondLastSeqError(
                    f"cannot ack through seq {seq} of the IPC queue for "
                    f"{self._socket_path!r}: its last seq is {self._last_seq}"
                )
            previous = self._acked_through
            if seq <= previous:
                return
            await self._storage.set(self._prefix + "meta", self._meta(self._last_seq, seq))
            self._acked_through = seq
            self._cache_drop_through(seq)
        # Outside the lock: deleting is slow and appends need not wait for it. Each ack
        # deletes its own range (previous, seq], disjoint from every other ack's.
        for old in range(previous + 1, seq + 1):
            await self._storage.delete(self._frame_key(old))

    async def frame_range(self, from_seq: int, *, limit: int | None = None) -> list[QueueEntry]:
        """The unacked frames with seq ``>= from_seq``, in order (at most ``limit``).

        Frames already acked are gone: the first entry may have a larger seq than
        ``from_seq``. Served from memory when the range is cached, else one ``read_many``.
        """
        _check_seq(from_seq, "from_seq")
        start = max(from_seq, self._acked_through + 1)
        end = self._last_seq
        if limit is not None:
            end = min(end, start + max(limit, 0) - 1)
        if start > end:
            return []
        if self._cache and self._cache_first <= start:
            offset = start - self._cache_first
            frames = itertools.islice(self._cache, offset, offset + end - start + 1)
            return [QueueEntry(seq=start + i, frame=f) for i, f in enumerate(frames)]
        keys = {self._frame_key(seq): seq for seq in range(start, end + 1)}
        values = await read_many(self._storage, keys)
        entries: list[QueueEntry] = []
        for key, seq in keys.items():
            value = values.get(key)
            if value is None:
                if seq <= self._acked_through:
                    continue  # acked and deleted while we read: not wanted any more
                raise CorruptDataError(
                    f"frame {seq} of the IPC queue for {self._socket_path!r} is missing "
                    f"(key {key!r}), though the queue holds seqs up to {self._last_seq}"
                )
            if not isinstance(value, str):
                raise CorruptDataError(
                    f"frame {seq} of the IPC queue for {self._socket_path!r} (key {key!r}) "
                    f"is a {type(value).__name__}, not a string"
                )
            entries.append(QueueEntry(seq=seq, frame=value))
        return entries

    def _cache_put(self, seq: int, frame: str) -> None:
        if self._cache and self._cache_first + len(self._cache) != seq:
            self._cache.clear()  # not contiguous (cannot happen under the lock): restart
            self._cache_chars = 0
        if not self._cache:
            self._cache_first = seq
        self._cache.append(frame)
        self._cache_chars += len(frame)
        while self._cache_chars > self._cache_limit and self._cache:
            self._cache_chars -= len(self._cache.popleft())
            self._cache_first += 1

    def _cache_drop_through(self, seq: int) -> None:
        while self._cache and self._cache_first <= seq:
            self._cache_chars -= len(self._cache.popleft())
            self._cache_first += 1
        if not self._cache:
            self._cache_first = self._last_seq + 1

    async def _collect_garbage(self) -> None:
        # Frames a crash left behind (see the module docstring): at or below the acked
        # seq, or past the last returned one.
        frame_prefix = self._prefix + "frame:"
        for key in await self._storage.list(frame_prefix):
            suffix = key[len(frame_prefix) :]
            if not suffix.isdigit() or not suffix.isascii():
                raise CorruptDataError(
                    f"key {key!r} is under the IPC queue prefix of {self._socket_path!r} "
                    "but is not a frame key"
                )
            seq = int(suffix)
            if seq <= self._acked_through or seq > self._last_seq:
                await self._storage.delete(key)


def _parse_meta(value: JsonValue, *, key: str, socket_path: str) -> tuple[int, int]:
    if not isinstance(value, dict):
        raise CorruptDataError(f"IPC queue meta {key!r} is not a JSON object")
    version = value.get("v")
    if type(version) is not int:
        # No version at all is damage, not a format from another release.
        raise CorruptDataError(
            f"IPC queue meta {key!r} has no format version (v={version!r}); it is not a "
            "record this program writes. Discard the queue's keys to start it afresh."
        )
    if version != _META_VERSION:
        raise SchemaVersionError(
            f"IPC queue meta {key!r} has format version {version!r}; this program reads "
            f"version {_META_VERSION}. Discard the queue's keys to start it afresh."
        )
    if value.get("socketPath") != socket_path:
        raise CorruptDataError(
            f"IPC queue meta {key!r} belongs to socket path {value.get('socketPath')!r}, "
            f"not {socket_path!r}"
        )
    last, acked = value.get("lastSeq"), value.get("ackedThrough")
    valid = (
        isinstance(last, int)
        and isinstance(acked, int)
        and not isinstance(last, bool)
        and not isinstance(acked, bool)
        and 0 <= acked <= last
    )
    if not valid:
        raise CorruptDataError(
            f"IPC queue meta {key!r} holds lastSeq={last!r}, ackedThrough={acked!r}: "
            "expected integers with 0 <= ackedThrough <= lastSeq"
        )
    assert isinstance(last, int)
    assert isinstance(acked, int)
    return last, acked


async def create_durable_outbound_queue(
    *, storage: StorageAdapter, socket_path: str, cache_bytes: int = _DEFAULT_CACHE_BYTES
) -> DurableOutboundQueue:
    """Open the queue for ``socket_path`` on ``storage``, creating it on its first append.

    A queue reopened on the same storage and socket path continues the numbering and
    still holds its unacked frames. ``socket_path`` is any stable string naming the
    channel: the Unix socket's path, or for TCP and WebSocket a fixed name (not an
    address with a port picked at random, which would name a new queue each start).
    """
    if not isinstance(socket_path, str) or not socket_path:
        raise TypeError("socket_path must be a non-empty string")
    prefix = queue_prefix(socket_path)
    meta = await storage.get(prefix + "meta")
    last, acked = (
        (0, 0) if meta is None else _parse_meta(meta, key=prefix + "meta", socket_path=socket_path)
    )
    queue = DurableOutboundQueue(
        storage=storage,
        socket_path=socket_path,
        last_seq=last,
        acked_through=acked,
        cache_bytes=cache_bytes,
    )
    await queue._collect_garbage()
    return queue
