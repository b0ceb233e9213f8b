"""Open a backend from a store URL or a parsed ``StoreSpec``.

The only place that maps a spec to a backend class; the backends' modules are imported
here lazily so that ``import little_workflow`` never pays for psycopg.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from little_workflow._extras import require
from little_workflow.errors import InvalidStoreUrlError
from little_workflow.storage._blobs import BlobStore
from little_workflow.storage._protocols import EventLog, ManagedStorage
from little_workflow.storage._queue import RunQueue
from little_workflow.storage._url import StoreSpec, parse_store_url

__all__ = ["Store", "open_event_log", "open_storage", "open_store"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Store:
    """An event log, a KV store and a blob store on one backend, sharing its connections.

    ``events`` holds events as stored: large payloads are references into ``blobs``
    (wrap it in ``PayloadLog`` to write and read values).
    """

    spec: StoreSpec
    events: EventLog
    kv: ManagedStorage
    closer: Callable[[], Awaitable[None]]
    blobs: BlobStore
    #: The run queue workers claim from; ``None`` on a backend that has none (the
    #: in-memory one: a worker in another process could never see it).
    queue: RunQueue | None = None

    async def close(self) -> None:
        """Close both (and the shared database)."""
        await self.closer()


async def open_store(store: str | StoreSpec) -> Store:
    """Open an event log and a KV store on the backend a store URL names.

    On SQLite and PostgreSQL they share one database (one file, one pool); a SQLite
    store keeps its blobs of up to 64 KiB in its database and larger ones in files beside
    it (``StoreSpec.blob_dir``; ``SqliteBlobStore``), a PostgreSQL one in a table. A
    ``file:`` URL is refused, since it holds no event log.
    """
    spec = _spec(store)
    if spec.kind == "memory":
        from little_workflow.storage._blobs_memory import MemoryBlobStore
        from little_workflow.storage._memory import (
            create_in_memory_event_log,
            create_in_memory_storage,
        )

        events, kv = create_in_memory_event_log(), create_in_memory_storage()

        async def close_memory() -> None:
            await events.close()
            await kv.close()

        return Store(spec=spec, events=events, kv=kv, closer=close_memory, blobs=MemoryBlobStore())
    if spec.kind == "sqlite":
        from little_workflow.storage._blobs_file import FileBlobStore
        from little_workflow.storage._blobs_sqlite import SqliteBlobStore
        from little_workflow.storage._queue_sqlite import SqliteRunQueue
        from little_workflow.storage._sqlite import SqliteEventLog, SqliteStorage
        from little_workflow.storage._sqlite_db import SqliteDatabase

        sqlite_db = await SqliteDatabase.open(spec)
        assert spec.blob_dir is not None
        return Store(
            spec=spec,
            events=SqliteEventLog(sqlite_db),
            kv=SqliteStorage(sqlite_db),
            closer=sqlite_db.close,
            blobs=SqliteBlobStore(sqlite_db, FileBlobStore(spec.blob_dir)),
            queue=SqliteRunQueue(sqlite_db),
        )
    if spec.kind == "postgres":
        require("postgres", "a postgresql:// store")
        from little_workflow.storage._blobs_postgres import PostgresBlobStore
        from little_workflow.storage._postgres import PostgresEventLog, PostgresStorage
        from little_workflow.storage._postgres_db import PostgresDatabase
        from little_workflow.storage._queue_postgres import PostgresRunQueue

        postgres_db = await PostgresDatabase.open(spec)
        return Store(
            spec=spec,
            events=PostgresEventLog(postgres_db),
            kv=PostgresStorage(postgres_db),
            closer=postgres_db.close,
            blobs=PostgresBlobStore(postgres_db),
            queue=PostgresRunQueue(postgres_db),
        )
    raise InvalidStoreUrlError(
        "a file: store holds key-value data only; use sqlite: or postgresql: for a run store"
    )


def _spec(store: str | StoreSpec) -> StoreSpec:
    return store if isinstance(store, StoreSpec) else parse_store_url(store)


async def open_storage(store: str | StoreSpec) -> ManagedStorage:
    """Open the ``StorageAdapter`` a store URL names. Close it with ``await s.close()``."""
    spec = _spec(store)
    if spec.kind == "memory":
        from little_workflow.storage._memory import create_in_memory_storage

        return create_in_memory_storage()
    if spec.kind == "file":
        from little_workflow.storage._file import create_file_storage

        assert spec.path is not None
        return create_file_storage(root=spec.path)
    if spec.kind == "sqlite":
        from little_workflow.storage._sqlite import open_sqlite_storage

        return await open_sqlite_storage(spec)
    require("postgres", "a postgresql:// store")
    from little_workflow.storage._postgres import open_postgres_storage

    return await open_postgres_storage(spec)


async def open_event_log(store: str | StoreSpec) -> EventLog:
    """Open the ``EventLog`` a store URL names. Close it with ``await log.close()``."""
    spec = _spec(store)
    if spec.kind == "memory":
        from little_workflow.storage._memory import create_in_memory_event_log

        return create_in_memory_event_log()
    if spec.kind == "file":
        raise InvalidStoreUrlError(
            "a file: store holds key-value data only; use sqlite: or postgresql: for an event log"
        )
    if spec.kind == "sqlite":
        from little_workflow.storage._sqlite import open_sqlite_event_log

        return await open_sqlite_event_log(spec)
    require("postgres", "a postgresql:// store")
    from little_workflow.storage._postgres import open_postgres_event_log

    return await open_postgres_event_log(spec)
