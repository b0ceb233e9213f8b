"""Memory: namespaced key/value for agents, durable across kills.

``MemoryStore`` sits on a ``StorageAdapter``: files under ``<data_dir>/memory/`` on the
embedded default, the runtime's own KV store (under ``memory/``) when it has a store URL
(``open_memory`` decides). Inside a run a step gets it as ``ctx.memory``; ``MEMORY_TOOLS``
offer it to agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a run needs the store, not the
# agents' memory tools.
if TYPE_CHECKING:
    from little_workflow.memory._open import MEMORY_PREFIX, open_memory
    from little_workflow.memory._store import MemoryEntry, MemoryStore
    from little_workflow.memory._tools import MEMORY_TOOLS, forget, recall, remember

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.memory._open": ("MEMORY_PREFIX", "open_memory"),
    "little_workflow.memory._store": ("MemoryEntry", "MemoryStore"),
    "little_workflow.memory._tools": ("MEMORY_TOOLS", "forget", "recall", "remember"),
}

__all__ = [
    "MEMORY_PREFIX",
    "MEMORY_TOOLS",
    "MemoryEntry",
    "MemoryStore",
    "forget",
    "open_memory",
    "recall",
    "remember",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
