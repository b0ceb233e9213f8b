"""Tools an agent can be offered to remember and recall across runs.

Plain typed callables (the harness makes them tools): register them with
``Runtime(tools=[*MEMORY_TOOLS, ...])`` and offer them by name in an agent step's
``tools``. Each takes ``ctx``, whose ``memory`` is the runtime's memory store bound to
the run and step, so each entry records who wrote it. In a session a tool's result is
recorded, so a resumed session replays what ``recall`` answered the first time.
"""

from __future__ import annotations

from typing import Any, Protocol

from little_workflow.codec import JsonValue
from little_workflow.memory._store import MemoryStore

__all__ = ["MEMORY_TOOLS", "forget", "recall", "remember"]


class _HasMemory(Protocol):
    @property
    def memory(self) -> MemoryStore: ...


async def remember(namespace: str, key: str, value: Any, ctx: _HasMemory) -> str:
    """Remember a value under a key, for this and later runs; replaces what was there.

    Args:
        namespace: A group of keys, such as "customer-acme" (letters, digits, _ . : -).
        key: The key, such as "preferences".
        value: Any JSON value.
    """
    await ctx.memory.put(namespace, key, value)
    return f"remembered {namespace}/{key}"


async def recall(namespace: str, ctx: _HasMemory, key: str | None = None) -> JsonValue:
    """Recall a remembered value, or (without a key) everything in a namespace.

    Args:
        namespace: The group of keys.
        key: The key; omit it to get every key and value of the namespace.

    Returns the value (null if nothing is remembered there), or an object of key: value.
    """
    if key is not None:
        return await ctx.memory.get(namespace, key)
    return {entry.key: entry.value for entry in await ctx.memory.list(namespace)}


async def forget(namespace: str, key: str, ctx: _HasMemory) -> str:
    """Forget a remembered value.

    Args:
        namespace: The group of keys.
        key: The key to forget.
    """
    await ctx.memory.delete(namespace, key)
    return f"forgot {namespace}/{key}"


#: The memory tools, to register with a runtime.
MEMORY_TOOLS = (remember, recall, forget)
