"""Storage: the ``StorageAdapter`` (KV), ``EventLog`` and ``BlobStore`` interfaces and
their backends.

Backends: in-memory, file (KV only), SQLite (WAL; the embedded default) and PostgreSQL;
blobs in files (beside a SQLite database), in a PostgreSQL table, or in memory.
``PayloadLog`` keeps large event payloads in the blob store, by reference.
A store URL picks one (``open_storage``, ``open_event_log``); only JSON crosses the
boundary, and every backend passes the conformance suites in
``little_workflow.testing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a process imports only its backends.
if TYPE_CHECKING:
    from little_workflow.storage._blobs import (
        BlobInfo,
        BlobRef,
        BlobStore,
        LoggedBlobStore,
        blob_digest,
    )
    from little_workflow.storage._blobs_file import FileBlobStore
    from little_workflow.storage._blobs_memory import MemoryBlobStore
    from little_workflow.storage._blobs_sqlite import SqliteBlobStore
    from little_workflow.storage._fence import Fence, current_fence, fenced
    from little_workflow.storage._file import FileStorage, create_file_storage
    from little_workflow.storage._keys import MAX_KEY_LENGTH, validate_key, validate_prefix
    from little_workflow.storage._limits import DEFAULT_QUEUE, Limit, Permit, Rate
    from little_workflow.storage._memory import (
        MemoryEventLog,
        MemoryStorage,
        create_in_memory_event_log,
        create_in_memory_storage,
    )
    from little_workflow.storage._open import Store, open_event_log, open_storage, open_store
    from little_workflow.storage._payloads import (
        DEFAULT_INLINE_BYTES,
        DEFAULT_MAX_PAYLOAD_BYTES,
        PayloadLog,
        PayloadRef,
        payload_refs,
        referenced_digests,
    )
    from little_workflow.storage._protocols import (
        EventLog,
        ManagedStorage,
        RunInfo,
        StorageAdapter,
        SupportsGetMany,
        read_many,
    )
    from little_workflow.storage._queue import Claim, QueueEntry, RunQueue, WorkerInfo
    from little_workflow.storage._url import SQLITE_DEFAULT_FILENAME, StoreSpec, parse_store_url

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.storage._blobs": (
        "BlobInfo",
        "BlobRef",
        "BlobStore",
        "LoggedBlobStore",
        "blob_digest",
    ),
    "little_workflow.storage._blobs_file": ("FileBlobStore",),
    "little_workflow.storage._blobs_memory": ("MemoryBlobStore",),
    "little_workflow.storage._blobs_sqlite": ("SqliteBlobStore",),
    "little_workflow.storage._fence": ("Fence", "current_fence", "fenced"),
    "little_workflow.storage._file": (
        "FileStorage",
        "create_file_storage",
    ),
    "little_workflow.storage._keys": (
        "MAX_KEY_LENGTH",
        "validate_key",
        "validate_prefix",
    ),
    "little_workflow.storage._limits": ("DEFAULT_QUEUE", "Limit", "Permit", "Rate"),
    "little_workflow.storage._memory": (
        "MemoryEventLog",
        "MemoryStorage",
        "create_in_memory_event_log",
        "create_in_memory_storage",
    ),
    "little_workflow.storage._open": (
        "Store",
        "open_event_log",
        "open_storage",
        "open_store",
    ),
    "little_workflow.storage._payloads": (
        "DEFAULT_INLINE_BYTES",
        "DEFAULT_MAX_PAYLOAD_BYTES",
        "PayloadLog",
        "PayloadRef",
        "payload_refs",
        "referenced_digests",
    ),
    "little_workflow.storage._protocols": (
        "EventLog",
        "ManagedStorage",
        "RunInfo",
        "StorageAdapter",
        "SupportsGetMany",
        "read_many",
    ),
    "little_workflow.storage._queue": ("Claim", "QueueEntry", "RunQueue", "WorkerInfo"),
    "little_workflow.storage._url": (
        "SQLITE_DEFAULT_FILENAME",
        "StoreSpec",
        "parse_store_url",
    ),
}

__all__ = [
    "DEFAULT_INLINE_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "DEFAULT_QUEUE",
    "MAX_KEY_LENGTH",
    "SQLITE_DEFAULT_FILENAME",
    "BlobInfo",
    "BlobRef",
    "BlobStore",
    "Claim",
    "EventLog",
    "Fence",
    "FileBlobStore",
    "FileStorage",
    "Limit",
    "LoggedBlobStore",
    "ManagedStorage",
    "MemoryBlobStore",
    "MemoryEventLog",
    "MemoryStorage",
    "PayloadLog",
    "PayloadRef",
    "Permit",
    "QueueEntry",
    "Rate",
    "RunInfo",
    "RunQueue",
    "SqliteBlobStore",
    "StorageAdapter",
    "Store",
    "StoreSpec",
    "SupportsGetMany",
    "WorkerInfo",
    "blob_digest",
    "create_file_storage",
    "create_in_memory_event_log",
    "create_in_memory_storage",
    "current_fence",
    "fenced",
    "open_event_log",
    "open_storage",
    "open_store",
    "parse_store_url",
    "payload_refs",
    "read_many",
    "referenced_digests",
    "validate_key",
    "validate_prefix",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
