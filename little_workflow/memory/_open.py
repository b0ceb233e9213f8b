"""Where a runtime's memory lives: decided once, here, from the store the runtime uses."""

from __future__ import annotations

from pathlib import Path

from little_workflow.memory._store import MemoryStore
from little_workflow.storage import FileStorage, StorageAdapter, create_file_storage

__all__ = ["MEMORY_PREFIX", "open_memory"]

#: Where memory sits inside a shared store.
MEMORY_PREFIX = "memory/"


def open_memory(
    directory: Path, shared: StorageAdapter | None
) -> tuple[MemoryStore, FileStorage | None]:
    """The memory store, and the file storage it opened (to close) if any.

    ``shared`` is the runtime's KV when it was given a store URL: memory goes there, under
    ``memory/``, so workers on other machines share it. Without one (the embedded default)
    memory is files under ``directory`` (``<data_dir>/memory/``), the seed's layout.
    """
    if shared is not None:
        return MemoryStore(shared, prefix=MEMORY_PREFIX), None
    files = create_file_storage(directory)
    return MemoryStore(files), files
