"""Open a backend from a store URL or a parsed ``StoreSpec``.

The only place that maps a spec to a backend class; the backends' modules are imported
here lazily so that ``import little_workflow`` never pays for psycopg.
"""

from __future__ import annotations

from little_workflow.errors import InvalidStoreUrlError
from little_workflow.storage._protocols import EventLog, ManagedStorage
from little_workflow.storage._url import StoreSpec, parse_store_url

__all__ = ["open_event_log", "open_storage"]


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
    from little_workflow.storage._postgres import open_postgres_event_log

    return await open_postgres_event_log(spec)
