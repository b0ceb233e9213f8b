"""``MemoryBlobStore``: blobs in a dict, for tests and ``memory:`` stores."""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable

from little_workflow.errors import BlobNotFoundError
from little_workflow.storage._blobs import (
    BlobInfo,
    BlobRef,
    blob_digest,
    validate_digest,
    verified,
)

__all__ = ["MemoryBlobStore"]


class MemoryBlobStore:
    """A ``BlobStore`` that lives as long as the object (nothing is durable)."""

    def __init__(self) -> None:
        #: digest -> (bytes, created_at); tests may damage an entry to check ``get``.
        self.blobs: dict[str, tuple[bytes, float]] = {}

    async def put(self, data: bytes) -> BlobRef:
        """Store ``data`` under its SHA-256 (refreshing ``created_at`` if present)."""
        digest = blob_digest(data)
        existing = self.blobs.get(digest)
        self.blobs[digest] = (existing[0] if existing else bytes(data), time.time())
        return BlobRef(digest=digest, size=len(data))

    async def get(self, digest: str) -> bytes:
        """The verified bytes of blob ``digest``."""
        found = self.blobs.get(validate_digest(digest))
        if found is None:
            raise BlobNotFoundError(f"blob {digest} is not in this in-memory blob store")
        return verified(digest, found[0], where="in memory")

    async def has(self, digest: str) -> bool:
        """Whether blob ``digest`` is stored."""
        return validate_digest(digest) in self.blobs

    async def delete(self, digest: str) -> None:
        """Remove blob ``digest`` if present."""
        self.blobs.pop(validate_digest(digest), None)

    async def list(self) -> builtins.list[BlobInfo]:
        """Every blob, sorted by digest."""
        return [
            BlobInfo(digest=digest, size=len(data), created_at=created_at)
            for digest, (data, created_at) in sorted(self.blobs.items())
        ]

    async def sweep(self, digests: Iterable[str], *, grace: float) -> builtins.list[BlobInfo]:
        """Delete those of ``digests`` put at least ``grace`` seconds ago (see ``BlobStore``)."""
        cutoff = time.time() - grace
        swept: builtins.list[BlobInfo] = []
        for digest in dict.fromkeys(validate_digest(digest) for digest in digests):
            found = self.blobs.get(digest)
            if found is not None and found[1] <= cutoff:
                del self.blobs[digest]
                swept.append(BlobInfo(digest=digest, size=len(found[0]), created_at=found[1]))
        return swept

    async def close(self) -> None:
        """Nothing to release."""
