"""The conformance suite every ``BlobStore`` backend must pass, unchanged.

Subclass it in a test module and provide three fixtures:

* ``blob_store``: a fresh, empty store;
* ``reopen_blob_store``: an async callable returning another store object over the same
  storage (what a restarted process opens; the fixture closes it), or ``None`` if the
  backend keeps nothing;
* ``damage_blob``: an async callable ``(digest, data)`` that replaces a stored blob's
  bytes behind the store's back (what a failing disk or a stray editor does).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable

import pytest

from little_workflow.errors import BlobNotFoundError, CorruptDataError, InvalidKeyError
from little_workflow.storage import BlobStore, LoggedBlobStore

__all__ = ["BlobDamager", "BlobReopener", "BlobStoreConformance"]

BlobReopener = Callable[[], Awaitable[BlobStore]]
BlobDamager = Callable[[str, bytes], Awaitable[None]]

_BAD_DIGESTS = (
    "",
    "../" * 10,
    "A" * 64,
    "0" * 63,
    "0" * 65,
    "g" * 64,
    "00/" + "0" * 61,
)


class BlobStoreConformance:
    """Every ``BlobStore`` behaves like this (see the module docstring for fixtures)."""

    async def test_put_names_the_content_by_its_sha256(self, blob_store: BlobStore) -> None:
        data = b'{"hello":"world"}'
        ref = await blob_store.put(data)
        assert ref.digest == hashlib.sha256(data).hexdigest()
        assert ref.size == len(data)
        assert await blob_store.get(ref.digest) == data
        assert await blob_store.has(ref.digest)

    async def test_put_is_idempotent(self, blob_store: BlobStore) -> None:
        first = await blob_store.put(b"same bytes")
        second = await blob_store.put(b"same bytes")
        assert first == second
        listed = await blob_store.list()
        assert [info.digest for info in listed] == [first.digest]
        assert listed[0].size == len(b"same bytes")

    async def test_a_repeated_put_refreshes_created_at(self, blob_store: BlobStore) -> None:
        ref = await blob_store.put(b"refresh me")
        (before,) = await blob_store.list()
        await blob_store.put(b"refresh me")
        (after,) = await blob_store.list()
        assert after.digest == ref.digest
        assert after.created_at >= before.created_at > 0

    async def test_concurrent_puts_of_one_content_store_it_once(
        self, blob_store: BlobStore
    ) -> None:
        refs = await asyncio.gather(*(blob_store.put(b"raced" * 1000) for _ in range(8)))
        assert len({ref.digest for ref in refs}) == 1
        assert len(await blob_store.list()) == 1
        assert await blob_store.get(refs[0].digest) == b"raced" * 1000

    async def test_empty_and_binary_content(self, blob_store: BlobStore) -> None:
        empty = await blob_store.put(b"")
        binary = await blob_store.put(bytes(range(256)) * 3)
        assert await blob_store.get(empty.digest) == b""
        assert await blob_store.get(binary.digest) == bytes(range(256)) * 3

    async def test_a_large_blob_round_trips(self, blob_store: BlobStore) -> None:
        data = hashlib.sha256(b"seed").digest() * (5 * 1024 * 1024 // 32)
        ref = await blob_store.put(data)
        assert ref.size == len(data)
        assert await blob_store.get(ref.digest) == data

    async def test_a_missing_blob_is_a_typed_error(self, blob_store: BlobStore) -> None:
        digest = hashlib.sha256(b"never stored").hexdigest()
        assert not await blob_store.has(digest)
        with pytest.raises(BlobNotFoundError, match=digest):
            await blob_store.get(digest)

    async def test_delete(self, blob_store: BlobStore) -> None:
        kept = await blob_store.put(b"kept")
        gone = await blob_store.put(b"gone")
        await blob_store.delete(gone.digest)
        await blob_store.delete(gone.digest)  # a missing blob: not an error
        assert not await blob_store.has(gone.digest)
        assert [info.digest for info in await blob_store.list()] == [kept.digest]
        with pytest.raises(BlobNotFoundError):
            await blob_store.get(gone.digest)

    async def test_sweep_deletes_only_the_named_blobs_old_enough(
        self, blob_store: BlobStore
    ) -> None:
        old = await blob_store.put(b"unreferenced")
        kept = await blob_store.put(b"referenced")
        missing = hashlib.sha256(b"never stored").hexdigest()
        # A long grace spares what was just put; nothing is deleted.
        assert await blob_store.sweep([old.digest, missing], grace=3600) == []
        assert await blob_store.has(old.digest)
        swept = await blob_store.sweep([old.digest, missing, old.digest], grace=0)
        assert [(info.digest, info.size) for info in swept] == [(old.digest, old.size)]
        assert not await blob_store.has(old.digest)
        assert [info.digest for info in await blob_store.list()] == [kept.digest]
        assert await blob_store.get(kept.digest) == b"referenced"
        assert await blob_store.sweep([], grace=0) == []

    async def test_a_put_after_a_sweep_stores_the_blob_again(self, blob_store: BlobStore) -> None:
        ref = await blob_store.put(b"swept, then wanted again")
        assert len(await blob_store.sweep([ref.digest], grace=0)) == 1
        assert await blob_store.put(b"swept, then wanted again") == ref
        assert await blob_store.get(ref.digest) == b"swept, then wanted again"

    async def test_sweep_refuses_a_malformed_digest_before_deleting(
        self, blob_store: BlobStore
    ) -> None:
        ref = await blob_store.put(b"stays")
        with pytest.raises(InvalidKeyError):
            await blob_store.sweep([ref.digest, "../" * 10], grace=0)
        assert await blob_store.has(ref.digest)

    async def test_list_is_sorted_with_sizes(self, blob_store: BlobStore) -> None:
        contents = [f"blob {i}".encode() * (i + 1) for i in range(20)]
        refs = [await blob_store.put(data) for data in contents]
        listed = await blob_store.list()
        assert [info.digest for info in listed] == sorted(ref.digest for ref in refs)
        sizes = {ref.digest: ref.size for ref in refs}
        assert all(info.size == sizes[info.digest] for info in listed)

    @pytest.mark.parametrize("digest", _BAD_DIGESTS)
    async def test_a_malformed_digest_is_refused(self, blob_store: BlobStore, digest: str) -> None:
        for call in (blob_store.get, blob_store.has, blob_store.delete):
            with pytest.raises(InvalidKeyError):
                await call(digest)

    async def test_content_that_does_not_match_its_name_is_corrupt(
        self, blob_store: BlobStore, damage_blob: BlobDamager
    ) -> None:
        data = b'{"payload":"' + b"x" * 5000 + b'"}'
        ref = await blob_store.put(data)
        flipped = bytearray(data)
        flipped[100] ^= 0x01
        await damage_blob(ref.digest, bytes(flipped))
        with pytest.raises(CorruptDataError, match=ref.digest):
            await blob_store.get(ref.digest)
        # Reported, never repaired or skipped: it stays corrupt until someone acts.
        with pytest.raises(CorruptDataError):
            await blob_store.get(ref.digest)

    async def test_blobs_survive_a_reopen(
        self, blob_store: BlobStore, reopen_blob_store: BlobReopener | None
    ) -> None:
        if reopen_blob_store is None:
            pytest.skip("this backend keeps nothing")
        ref = await blob_store.put(b"durable")
        other = await reopen_blob_store()
        assert await other.get(ref.digest) == b"durable"
        assert [info.digest for info in await other.list()] == [ref.digest]

    async def test_blobs_put_behind_read_as_put(self, blob_store: BlobStore) -> None:
        # Only a store that shares a write-ahead log with an event log puts behind.
        if not isinstance(blob_store, LoggedBlobStore):
            pytest.skip("this backend does not put blobs behind an append")
        blobs = [b"one", b"two" * 1000, b"one", bytes(range(256)) * 4]
        await blob_store.put_behind(blobs)
        await blob_store.put_behind([])
        for data in blobs:
            assert await blob_store.get(hashlib.sha256(data).hexdigest()) == data
        listed = {info.digest: info.size for info in await blob_store.list()}
        assert listed == {hashlib.sha256(data).hexdigest(): len(data) for data in blobs}
