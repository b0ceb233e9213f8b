"""Whole-file replacement that a crash cannot tear: temp file, fsync, rename, fsync dir.

For the files the program keeps outside its stores (outer-loop manifests, and the like):
a reader sees the old content or the new, never a mixture, and once ``atomic_write``
returns the new content survives a power cut.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from little_workflow.errors import StorageError

__all__ = ["atomic_write"]


def atomic_write(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Replace ``path``'s content with ``data`` atomically and durably.

    The temp file sits in the same directory (a rename across filesystems is not
    atomic) and starts with ``.~`` so a reader listing the directory can skip it. Any
    ``OSError`` becomes ``StorageError`` naming the file, and the temp file is removed:
    the previous content is untouched.
    """
    directory = path.parent
    temp = directory / f".~{path.name}.{secrets.token_hex(8)}"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise StorageError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
