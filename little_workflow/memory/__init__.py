"""Memory: namespaced key/value for agents, durable across kills.

``MemoryStore`` sits on a ``StorageAdapter``: files under ``<data_dir>/memory/`` on the
embedded default, the runtime's own KV store (under ``memory/``) when it has a store URL
(``open_memory`` decides). Inside a run a step gets it as ``ctx.memory``; ``MEMORY_TOOLS``
offer it to agents.
"""

from __future__ import annotations

from little_workflow.memory._open import MEMORY_PREFIX, open_memory
from little_workflow.memory._store import MemoryEntry, MemoryStore
from little_workflow.memory._tools import MEMORY_TOOLS, forget, recall, remember

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
