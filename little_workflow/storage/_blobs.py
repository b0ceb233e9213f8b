"""The ``BlobStore`` interface: immutable byte strings stored once, by their SHA-256.

Events hold references to large payloads instead of the payloads themselves (see
``_payloads``); the bytes live here. A blob's name is the lowercase hex SHA-256 of its
content, so storing the same bytes twice stores them once, and a reader can check that
what it got back is what was written: ``get`` always does, and a mismatch is a
``CorruptDataError`` naming the blob, never silently returned.

``put`` is idempotent and durable before it returns, so a caller that writes the blob
first and the event that points at it second never leaves a committed event whose blob
a power cut could take. Putting a blob that is already there refreshes its
``created_at``: garbage collection spares blobs younger than a grace period, and a
blob about to be referenced again must not be swept between the put and the append.
"""

from __future__ import annotations

import builtins
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from little_workflow.errors import CorruptDataError, InvalidKeyError

__all__ = [
    "BlobInfo",
    "BlobRef",
    "BlobStore",
    "LoggedBlobStore",
    "blob_digest",
    "is_digest",
    "validate_digest",
    "verified",
]

_DIGEST_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobRef:
    """A stored blob: its SHA-256 (64 lowercase hex digits) and its size in bytes."""

    digest: str
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BlobInfo:
    """A blob as ``BlobStore.list`` reports it (what garbage collection needs)."""

    digest: str
    size: int
    #: Seconds since the epoch of the latest ``put`` of this content.
    created_at: float


def blob_digest(data: bytes) -> str:
    """The name of ``data`` in a blob store: its SHA-256, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def is_digest(text: object) -> bool:
    """Whether ``text`` has the form of a blob digest (64 lowercase hex digits)."""
    return isinstance(text, str) and _DIGEST_RE.fullmatch(text) is not None


def validate_digest(digest: str) -> str:
    """``digest`` if it is 64 lowercase hex digits, else ``InvalidKeyError``.

    Checked before a digest becomes a file name or a query parameter.
    """
    if not is_digest(digest):
        raise InvalidKeyError(f"{digest!r} is not a blob digest (64 lowercase hex digits)")
    return digest


def verified(digest: str, data: bytes, *, where: str) -> bytes:
    """``data`` if its SHA-256 is ``digest``; else ``CorruptDataError`` naming ``where``."""
    actual = blob_digest(data)
    if actual != digest:
        raise CorruptDataError(
            f"blob {digest} ({where}) is corrupt: its {len(data)} bytes hash to {actual}; "
            "the blob store was modified outside little-workflow or damaged on disk"
        )
    return data


@runtime_checkable
class BlobStore(Protocol):
    """Content-addressed storage of byte strings (see the module docstring).

    Every backend passes ``little_workflow.testing.BlobStoreConformance``.
    """

    async def put(self, data: bytes) -> BlobRef:
        """Store ``data`` (once); durable when this returns. Idempotent."""
        ...

    async def get(self, digest: str) -> bytes:
        """The bytes named ``digest``, verified.

        ``BlobNotFoundError`` if there is no such blob, ``CorruptDataError`` if the
        stored bytes do not hash to ``digest``.
        """
        ...

    async def has(self, digest: str) -> bool:
        """Whether a blob named ``digest`` is stored (its content is not checked)."""
        ...

    async def delete(self, digest: str) -> None:
        """Remove the blob; removing a missing blob is not an error."""
        ...

    async def list(self) -> builtins.list[BlobInfo]:
        """Every stored blob, sorted by digest."""
        ...

    async def sweep(self, digests: Iterable[str], *, grace: float) -> builtins.list[BlobInfo]:
        """Delete those of ``digests`` last put at least ``grace`` seconds ago; return them.

        Garbage collection's delete. Age is measured by the store's own clock (the one
        ``created_at`` comes from), and each decision is atomic against a concurrent
        ``put`` of the same content: the put either refreshes the blob before it is
        judged (and it stays) or finds it gone and writes it anew. A writer that puts a
        blob and then appends the event referring to it within ``grace`` therefore never
        loses it, even if the blob was unreferenced when the collector looked.
        """
        ...

    async def close(self) -> None:
        """Release what the store holds. It is unusable afterwards."""
        ...


@runtime_checkable
class LoggedBlobStore(Protocol):
    """A blob store that writes through the same write-ahead log as an event log.

    Its commits and the log's are ordered (one WAL): a put committed without fsync is
    made durable by the log's next durable append, and can never outlive a crash that the
    append did not survive. So a ``PayloadLog`` over both puts an append's blobs *behind*
    and pays one fsync, the append's, instead of one more per blob.
    """

    def shares_log_with(self, log: object) -> bool:
        """Whether ``log`` appends through this store's write-ahead log."""
        ...

    async def put_behind(self, blobs: Iterable[bytes]) -> None:
        """Store ``blobs`` in one commit, without fsync (see the class docstring); a blob
        this store keeps outside its log (a large file) is still durable on return."""
        ...
