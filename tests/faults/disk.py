"""Two ways to make storage fail under the program: a real full disk, and a failing fsync.

* ``SmallDisk`` mounts a tmpfs of a few MiB (``mount -t tmpfs -o size=...``): the kernel
  itself answers ``ENOSPC``, to ``write``, to SQLite's WAL and to ``mkdir`` alike, with
  nothing in the process patched. ``fill()`` takes every free byte with a ballast file,
  ``free()`` deletes it: space comes back. Mounting needs ``CAP_SYS_ADMIN`` (root in the
  CI container has it); without it the tests that use it skip, saying so.
* ``failing_fsync(pattern)`` makes ``os.fsync`` of any descriptor whose path contains
  ``pattern`` raise ``OSError(EIO)``, as a disk that lost the write does. No filesystem
  that a test can mount fails fsync on demand (tmpfs never does; ``dm-flakey`` needs
  device-mapper), so this one is a fault-injecting layer: it patches the ``os``
  function the library calls, in the process under test. SQLite's own fsyncs run in C
  and are out of its reach.

See ``docs/faults.md``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["SmallDisk", "failing_fsync", "temp_files"]


class SmallDisk:
    """A tmpfs of ``size`` mounted at ``path`` (see the module docstring)."""

    def __init__(self, path: Path, size: str = "8m") -> None:
        self.path = path
        self.size = size
        self._ballast = path / "ballast"

    def mount(self) -> str | None:
        """Mount it; the reason it cannot be mounted, or ``None``."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            result = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size},mode=0700", "tmpfs", self.path],
                capture_output=True,
                text=True,
                timeout=30,
                check=False,
            )
        except OSError as exc:
            return f"cannot run mount: {exc}"
        if result.returncode != 0:
            return f"cannot mount a tmpfs (needs CAP_SYS_ADMIN): {result.stderr.strip()}"
        return None

    def unmount(self) -> None:
        """Unmount it (lazily if something still holds a file in it)."""
        result = subprocess.run(["umount", self.path], capture_output=True, check=False)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", self.path], capture_output=True, check=False)

    def fill(self) -> None:
        """Take every free byte: write the ballast until even one byte gets ``ENOSPC``."""
        fd = os.open(self._ballast, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        chunk = 1 << 20
        try:
            while chunk:
                try:
                    os.write(fd, b"\0" * chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    chunk //= 2
        finally:
            os.close(fd)

    def free(self) -> None:
        """Give the space back."""
        self._ballast.unlink()


@contextlib.contextmanager
def failing_fsync(pattern: str) -> Iterator[list[str]]:
    """``os.fsync`` of a path containing ``pattern`` raises ``EIO``; yields the paths hit."""
    real_fsync = os.fsync
    hit: list[str] = []

    def fsync(fd: Any) -> None:
        number = fd if isinstance(fd, int) else fd.fileno()
        try:
            path = os.readlink(f"/proc/self/fd/{number}")
        except OSError:
            path = ""
        if pattern in path:
            hit.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_fsync(fd)

    os.fsync = fsync
    try:
        yield hit
    finally:
        os.fsync = real_fsync


def temp_files(root: Path) -> list[Path]:
    """The temp files of the atomic writers (``~tmp.*``, ``.~*``) under ``root``."""
    return [path for path in root.rglob("*") if path.name.startswith(("~", ".~"))]
