"""Deflating what a store keeps, and inflating it back within a bound.

One rule for every compressed thing a store writes: SQLite blob rows and event rows, and
conversation nodes. What is deflated must save at least an eighth, or it is kept as it
is: a failed try costs a few µs once, an inflate on every read costs more than the bytes
saved. What is inflated never grows past a bound the caller knows (a row's recorded
size, a node's or a value's limit): a damaged or hostile store cannot make a read
allocate without end.
"""

from __future__ import annotations

import zlib
from typing import Final

__all__ = ["InflateError", "deflated", "inflated"]

#: A write's level: on 2 KiB of model text level 6 saved 0.2-2% more than level 1, for
#: 10-20% more CPU (13-25 µs per 2 KiB at level 1), and writes are on a step's path.
LEVEL: Final = 1


class InflateError(ValueError):
    """Stored bytes that are not a whole zlib stream within the bound; says why."""


def deflated(raw: bytes, *, level: int = LEVEL) -> bytes | None:
    """``raw`` deflated if that saves at least an eighth of it, else ``None``."""
    packed = zlib.compress(raw, level)
    return packed if len(packed) <= len(raw) - len(raw) // 8 else None


def inflated(data: bytes, *, limit: int) -> bytes:
    """The bytes ``data`` deflates, at most ``limit`` of them; ``InflateError`` otherwise."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data, limit)
    except zlib.error as exc:
        raise InflateError(f"not a zlib stream ({exc})") from exc
    if inflater.unconsumed_tail:
        raise InflateError(f"it inflates past {limit} bytes")
    if not inflater.eof:
        raise InflateError("the stream is cut short")
    return raw
