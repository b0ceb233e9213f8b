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
import time
from collections.abc import Iterable
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
from little_workflow.storage._dirs import make_private_dirs

__all__ = ["FileBlobStore", "restore_aside", "sweep_file"]

# Where ``sweep`` moves a blob while it judges it; starts with ``.~``, so ``list`` skips it.
_ASIDE = ".~gc."


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


def sweep_file(path: Path, cutoff: float) -> os.stat_result | None:
    """Delete ``path`` if it was last written (or touched) at ``cutoff`` or before;
    its stat if deleted, ``None`` if kept or missing. Its directory is not fsynced.

    Moved aside first, then judged: a writer that touched the file before the move shows
    in its mtime (and it is put back); a writer after the move finds no file and writes
    it anew. Judging in place would let a writer touch the file between the age test and
    the unlink, and lose it.
    """
    aside = path.parent / f"{_ASIDE}{path.name}.{secrets.token_hex(8)}"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return None
    stat = os.stat(aside)
    if stat.st_mtime > cutoff:
        # FileExistsError: a writer wrote it anew meanwhile, the same bytes.
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        os.unlink(aside)
        return None
    os.unlink(aside)
    return stat


def restore_aside(directory: Path, name: str | None = None) -> None:
    """Put back the files (all, or ``name``) a ``sweep_file`` killed mid-way left aside.

    Put back, not deleted: the sweep had not decided yet, and a file it was about to keep
    may be referenced. The next sweep judges them again.
    """
    try:
        entries = [entry.name for entry in os.scandir(directory)]
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if not entry.startswith(_ASIDE):
            continue
        original = entry[len(_ASIDE) :].partition(".")[0]
        if not original or (name is not None and original != name):
            continue
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.link(directory / entry, directory / original)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / entry)


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
        make_private_dirs(self.root)
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
                try:
                    os.utime(path)
                except FileNotFoundError:
                    pass  # swept since we looked (see ``sweep``): written anew below
                else:
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
            # A sweep killed between moving this blob aside and judging it: put it back.
            try:
                restore_aside(path.parent, digest)
                data = path.read_bytes()
            except FileNotFoundError:
                raise BlobNotFoundError(f"blob {digest} is not in {str(self.root)!r}") from None
            except OSError as exc:
                raise StorageError(f"cannot read blob {str(path)!r}: {exc}") from exc
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

    def _sweep(self, digests: builtins.list[str], grace: float) -> builtins.list[BlobInfo]:
        try:
            for shard in sorted(self.root.iterdir()) if self.root.is_dir() else []:
                if len(shard.name) == 2 and shard.is_dir():
                    restore_aside(shard)
        except OSError as exc:
            raise StorageError(f"cannot sweep blobs under {str(self.root)!r}: {exc}") from exc
        cutoff = time.time() - grace
        swept: builtins.list[BlobInfo] = []
        touched: set[Path] = set()
        for digest in digests:
            path = self.path(digest)
            try:
                stat = sweep_file(path, cutoff)
            except OSError as exc:
                raise StorageError(f"cannot sweep blob {str(path)!r}: {exc}") from exc
            if stat is None:
                continue
            touched.add(path.parent)
            swept.append(BlobInfo(digest=digest, size=stat.st_size, created_at=stat.st_mtime))
        try:
            for shard in touched:
                _fsync_dir(shard)
        except OSError as exc:
            raise StorageError(f"cannot sync {str(self.root)!r}: {exc}") from exc
        return swept

    async def sweep(self, digests: Iterable[str], *, grace: float) -> builtins.list[BlobInfo]:
        """Delete those of ``digests`` put at least ``grace`` seconds ago (see ``BlobStore``)."""
        wanted = list(dict.fromkeys(validate_digest(digest) for digest in digests))
        return await asyncio.to_thread(self._sweep, wanted, grace)

    async def close(self) -> None:
        """Nothing to release."""
