"""``FileBlobStore``: one file per blob, ``<root>/<2 hex>/<sha256>``.

The embedded default keeps blobs in ``.little-workflow/blobs/`` next to its SQLite
database rather than in it: a 50 MiB tool result is written once, by a plain file
write, and never passes through the WAL (where it would be written twice and copied
again at checkpoint). The two-hex fan-out keeps directories small.

Writes are atomic and durable (temp file, fsync, rename, fsync directory: the steps of
``platform._atomic.atomic_write``, written out here because storage sits below
platform), so a blob either exists whole or not at all; a reader never sees a torn one. A torn one
could still appear through damage outside our control, which ``get``'s hash check
reports. The file I/O runs in a worker thread: a large blob must not stall the event
loop that other runs share.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
import secrets
from pathlib import Path

from little_workflow.errors import BlobNotFoundError, StorageError
from little_workflow.storage._blobs import (
    BlobInfo,
    BlobRef,
    blob_digest,
    is_digest,
    validate_digest,
    verified,
)

__all__ = ["FileBlobStore"]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes) -> None:
    # The temp name starts with ``.~`` and is not a digest, so ``list`` skips it.
    temp = path.parent / f".~{path.name[:16]}.{secrets.token_hex(8)}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise StorageError(f"cannot write blob {str(path)!r}: {exc.strerror or exc}") from exc


class FileBlobStore:
    """A ``BlobStore`` in a directory (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).absolute()

    def path(self, digest: str) -> Path:
        """The file that holds blob ``digest`` (validated, so it names nothing else)."""
        validate_digest(digest)
        return self.root / digest[:2] / digest

    def _make_shard(self, shard: Path) -> None:
        if shard.is_dir():
            return
        created_root = not self.root.is_dir()
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        shard.mkdir(mode=0o700, exist_ok=True)
        # The new directory entries must survive a power cut too, or the blob's file
        # would be lost with its directory although its own fsync succeeded.
        _fsync_dir(self.root)
        if created_root:
            _fsync_dir(self.root.parent)

    def _put(self, data: bytes, digest: str) -> None:
        path = self.root / digest[:2] / digest
        try:
            if path.exists():
                # Refreshed, not rewritten: garbage collection's grace period counts from
                # the latest put (see ``_blobs``).
                os.utime(path)
                return
            self._make_shard(path.parent)
        except OSError as exc:
            raise StorageError(
                f"cannot write blob {digest} under {str(self.root)!r}: {exc}"
            ) from exc
        _write_atomically(path, data)

    async def put(self, data: bytes) -> BlobRef:
        """Store ``data`` durably under its SHA-256."""
        digest = blob_digest(data)
        await asyncio.to_thread(self._put, data, digest)
        return BlobRef(digest=digest, size=len(data))

    def _get(self, digest: str) -> bytes:
        path = self.path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise BlobNotFoundError(f"blob {digest} is not in {str(self.root)!r}") from None
        except OSError as exc:
            raise StorageError(f"cannot read blob {str(path)!r}: {exc}") from exc
        return verified(digest, data, where=str(path))

    async def get(self, digest: str) -> bytes:
        """The verified bytes of blob ``digest``."""
        return await asyncio.to_thread(self._get, digest)

    async def has(self, digest: str) -> bool:
        """Whether blob ``digest`` is stored."""
        return self.path(digest).is_file()

    async def delete(self, digest: str) -> None:
        """Remove blob ``digest`` if present."""
        path = self.path(digest)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete blob {str(path)!r}: {exc}") from exc

    def _list(self) -> builtins.list[BlobInfo]:
        found: builtins.list[BlobInfo] = []
        try:
            shards = sorted(self.root.iterdir()) if self.root.is_dir() else []
            for shard in shards:
                if not shard.is_dir() or len(shard.name) != 2:
                    continue
                for entry in os.scandir(shard):
                    # Temp files of writes in progress start with ``.~``; skip anything
                    # that is not a blob's name.
                    name = entry.name
                    if not is_digest(name) or not name.startswith(shard.name):
                        continue
                    try:
                        stat = entry.stat()
                    except FileNotFoundError:
                        continue  # deleted since the scan began
                    found.append(BlobInfo(digest=name, size=stat.st_size, created_at=stat.st_mtime))
        except OSError as exc:
            raise StorageError(f"cannot list blobs under {str(self.root)!r}: {exc}") from exc
        found.sort(key=lambda info: info.digest)
        return found

    async def list(self) -> builtins.list[BlobInfo]:
        """Every blob, sorted by digest."""
        return await asyncio.to_thread(self._list)

    async def close(self) -> None:
        """Nothing to release."""
