"""Every BlobStore backend through the one conformance suite: memory, files (what a
SQLite store uses) and PostgreSQL, each opened the way ``open_store`` opens it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from little_workflow.storage import (
    BlobStore,
    FileBlobStore,
    MemoryBlobStore,
    SqliteBlobStore,
    Store,
    open_store,
    parse_store_url,
)
from little_workflow.testing import BlobStoreConformance
from little_workflow.testing.blobstore_conformance import BlobDamager, BlobReopener
from tests.storage.raw_sqlite import damage_sqlite_blob

# ``sqlite-files``: a SQLite store's blob store with every blob a file, as large blobs
# are, and as a store written before the blobs table kept them all.
BACKENDS = [
    "memory",
    "sqlite",
    "sqlite-files",
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def _blobs_of(store: Store, backend: str) -> BlobStore:
    if backend != "sqlite-files":
        return store.blobs
    assert isinstance(store.blobs, SqliteBlobStore)
    return SqliteBlobStore(store.blobs.database, store.blobs.files, file_bytes=0)


class TestBlobStoreConformance(BlobStoreConformance):
    @pytest.fixture(params=BACKENDS)
    def backend(self, request: pytest.FixtureRequest) -> str:
        name: str = request.param
        return name

    @pytest.fixture
    def blob_url(self, backend: str, request: pytest.FixtureRequest) -> str:
        if backend == "memory":
            return "memory:"
        url: str = request.getfixturevalue(f"{backend.partition('-')[0]}_url")
        return url

    @pytest.fixture
    async def blob_store(self, blob_url: str, backend: str) -> AsyncIterator[BlobStore]:
        store = await open_store(blob_url)
        yield _blobs_of(store, backend)
        await store.close()

    @pytest.fixture
    async def reopen_blob_store(
        self, blob_url: str, backend: str
    ) -> AsyncIterator[BlobReopener | None]:
        if blob_url == "memory:":
            yield None
            return
        opened: list[Store] = []

        async def reopen() -> BlobStore:
            store = await open_store(blob_url)
            opened.append(store)
            return _blobs_of(store, backend)

        yield reopen
        for store in opened:
            await store.close()

    @pytest.fixture
    def damage_blob(self, blob_store: BlobStore, blob_url: str) -> BlobDamager:
        async def damage(digest: str, data: bytes) -> None:
            if isinstance(blob_store, MemoryBlobStore):
                blob_store.blobs[digest] = (data, blob_store.blobs[digest][1])
            elif isinstance(blob_store, SqliteBlobStore):
                await damage_sqlite_blob(blob_store, digest, data)
            else:
                spec = parse_store_url(blob_url)
                assert spec.conninfo is not None
                async with await psycopg.AsyncConnection.connect(spec.conninfo) as conn:
                    await conn.execute(
                        sql.SQL("UPDATE {}.blobs SET data = %s WHERE digest = %s").format(
                            sql.Identifier(spec.schema)
                        ),
                        [data, digest],
                    )

        return damage


def test_a_sqlite_store_keeps_its_blobs_beside_the_database(tmp_path: Path) -> None:
    default = parse_store_url(f"sqlite:///{tmp_path}/little-workflow.db")
    other = parse_store_url(f"sqlite:///{tmp_path}/other.db")
    assert default.blob_dir == tmp_path / "blobs"
    assert other.blob_dir == tmp_path / "other.db.blobs"
    assert parse_store_url("memory:").blob_dir is None


async def test_file_blobs_are_sharded_and_owner_only(tmp_path: Path) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    ref = await blobs.put(b"private")
    path = tmp_path / "blobs" / ref.digest[:2] / ref.digest
    assert path.read_bytes() == b"private"
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "blobs").stat().st_mode & 0o777 == 0o700
    # A write cut off before its rename leaves a temp file, which is no blob.
    (path.parent / ".~partial.0123").write_bytes(b"torn")
    assert [info.digest for info in await blobs.list()] == [ref.digest]


async def test_a_blob_a_killed_sweep_left_aside_is_put_back(tmp_path: Path) -> None:
    # A sweep moves a blob aside before it judges it; killed in between, the blob is
    # neither deleted nor in place. A read and the next sweep both put it back.
    blobs = FileBlobStore(tmp_path / "blobs")
    first = await blobs.put(b"read back")
    second = await blobs.put(b"swept back")
    for ref in (first, second):
        path = blobs.path(ref.digest)
        path.rename(path.parent / f".~gc.{ref.digest}.0123456789abcdef")
    assert await blobs.get(first.digest) == b"read back"
    assert await blobs.sweep([], grace=0) == []
    assert await blobs.get(second.digest) == b"swept back"
    assert sorted(info.digest for info in await blobs.list()) == sorted(
        [first.digest, second.digest]
    )
    leftovers = [p.name for p in (tmp_path / "blobs").rglob(".~gc.*")]
    assert leftovers == []
