"""Storage: the ``StorageAdapter`` (KV) and ``EventLog`` interfaces and their backends.

Backends: in-memory, file (KV only), SQLite (WAL; the embedded default) and PostgreSQL.
A store URL picks one (``open_storage``, ``open_event_log``); only JSON crosses the
boundary, and every backend passes the conformance suites in
``little_workflow.testing``.
"""

from __future__ import annotations

from little_workflow.storage._file import FileStorage, create_file_storage
from little_workflow.storage._keys import MAX_KEY_LENGTH, validate_key, validate_prefix
from little_workflow.storage._memory import (
    MemoryEventLog,
    MemoryStorage,
    create_in_memory_event_log,
    create_in_memory_storage,
)
from little_workflow.storage._open import Store, open_event_log, open_storage, open_store
from little_workflow.storage._protocols import (
    EventLog,
    ManagedStorage,
    RunInfo,
    StorageAdapter,
    SupportsGetMany,
    read_many,
)
from little_workflow.storage._url import SQLITE_DEFAULT_FILENAME, StoreSpec, parse_store_url

__all__ = [
    "MAX_KEY_LENGTH",
    "SQLITE_DEFAULT_FILENAME",
    "EventLog",
    "FileStorage",
    "ManagedStorage",
    "MemoryEventLog",
    "MemoryStorage",
    "RunInfo",
    "StorageAdapter",
    "Store",
    "StoreSpec",
    "SupportsGetMany",
    "create_file_storage",
    "create_in_memory_event_log",
    "create_in_memory_storage",
    "open_event_log",
    "open_storage",
    "open_store",
    "parse_store_url",
    "read_many",
    "validate_key",
    "validate_prefix",
]
