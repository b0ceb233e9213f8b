"""``ObjectCache``: what was computed from an immutable object, kept while it lives.

A ``Workflow`` is frozen, and a process that runs one many times (a worker, a server,
a loop of ``Runtime.run``) analysed it again at every run: its definition dumped and
hashed, the input every completed run reads. That work is linear in the definition and,
for a long chain, cost as much as a third of running it. The cache is keyed by the
object's identity, not by equality: hashing a frozen pydantic model walks every field,
which is the cost being saved. A weak reference drops the entry when the object goes,
so an id reused by a later object never finds another object's value.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["ObjectCache"]

K = TypeVar("K")
V = TypeVar("V")


class ObjectCache(Generic[K, V]):
    """``compute(obj)`` once per live object (``obj`` must be immutable and weak-referenceable)."""

    def __init__(self, compute: Callable[[K], V]) -> None:
        self._compute = compute
        self._entries: dict[int, tuple[weakref.ref[K], V]] = {}

    def __call__(self, obj: K) -> V:
        key = id(obj)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        # Computed before anything is stored: a computation that raises caches nothing.
        value = self._compute(obj)
        self._entries[key] = (weakref.ref(obj, self._dropper(key)), value)
        return value

    def _dropper(self, key: int) -> Callable[[weakref.ref[K]], None]:
        entries = self._entries

        def drop(ref: weakref.ref[K]) -> None:
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]

        return drop

    def __len__(self) -> int:
        return len(self._entries)
