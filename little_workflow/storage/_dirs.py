"""Owner-only directories, one level at a time; an existing tree made private.

``os.makedirs(path, mode=0o700)`` and ``Path.mkdir(mode=0o700, parents=True)`` give
only the last directory that mode; the parents they create get the default mode less
the umask (0777 under ``umask 0``), which would leave a store's subtree readable, even
writable, by other users. Each missing level is made here with 0700 instead.

A data directory made by an earlier version or by hand may hold 0755 directories and
0644 files. ``make_private_tree`` takes the group and other bits off what this process
owns (the root, and the entries the program made below it), and refuses
(``DataDirPermissionsError``, naming the path and the ``chmod`` that fixes it) what it
cannot change: a path owned by another user (changing another user's modes is not this
program's business, even as root) or on a file system that refuses. Symbolic links are
neither followed nor changed (their mode means nothing on Linux).
"""

from __future__ import annotations

import os
import shlex
import stat
from collections.abc import Iterable
from pathlib import Path

from little_workflow.errors import DataDirPermissionsError

__all__ = ["make_private_dirs", "make_private_tree"]

#: The group and other permission bits: none of them on anything private.
_SHARED_BITS = 0o077


def make_private_dirs(path: str | os.PathLike[str]) -> list[Path]:
    """Create ``path`` and its missing parents, each mode 0700; the ones made, top first.

    A directory that already exists is left as it is (the user's own choice), and one
    made meanwhile by another process is not an error. ``OSError`` otherwise.
    """
    target = Path(path)
    missing: list[Path] = []
    current = target
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    made: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            if not directory.is_dir():
                raise
            continue
        made.append(directory)
    return made


def make_private_tree(root: Path, names: Iterable[str]) -> list[Path]:
    """Take the group and other bits off ``root`` and, if it had any, off its entries
    ``names`` and all below them; the paths changed.

    A ``root`` already private hides everything below it from other users, whatever
    their modes: then only ``root`` is looked at (one ``lstat``). Only the entries named
    are walked, the ones the program made: a data directory pointed at a folder that
    holds other things (``--data-dir .``) does not have the user's own files changed.
    """
    changed: list[Path] = []
    if not _tighten(root, root, changed):
        return changed
    for name in names:
        top = root / name
        _tighten(top, root, changed)
        if top.is_dir() and not top.is_symlink():
            for directory, dirs, files in os.walk(top):
                for entry in (*dirs, *files):
                    _tighten(Path(directory) / entry, root, changed)
    return changed


def _tighten(path: Path, root: Path, changed: list[Path]) -> bool:
    """Make ``path`` private if it is not; whether it was not."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False  # removed meanwhile (a lock released, a temporary file renamed)
    mode = stat.S_IMODE(info.st_mode)
    if stat.S_ISLNK(info.st_mode) or not mode & _SHARED_BITS:
        return False
    wanted = mode & ~_SHARED_BITS
    owner = info.st_uid
    if owner != os.geteuid():
        raise DataDirPermissionsError(
            f"{str(path)!r} in the data directory {str(root)!r} has mode {mode:04o}, open to "
            f"other users, and belongs to uid {owner}, not to this process (uid "
            f"{os.geteuid()}): refusing to use it. As its owner, run: "
            f"chmod -R go-rwx {shlex.quote(str(root))}",
            path=str(path),
        )
    try:
        os.chmod(path, wanted, follow_symlinks=False)
    except OSError as exc:
        raise DataDirPermissionsError(
            f"{str(path)!r} in the data directory {str(root)!r} has mode {mode:04o}, open to "
            f"other users, and cannot be made private ({exc.strerror or exc}): refusing to "
            f"use it. Run: chmod -R go-rwx {shlex.quote(str(root))}",
            path=str(path),
        ) from exc
    changed.append(path)
    return True
