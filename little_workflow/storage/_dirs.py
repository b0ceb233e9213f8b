"""Owner-only directories, one level at a time.

``os.makedirs(path, mode=0o700)`` and ``Path.mkdir(mode=0o700, parents=True)`` give
only the last directory that mode; the parents they create get the default mode less
the umask (0777 under ``umask 0``), which would leave a store's subtree readable, even
writable, by other users. Each missing level is made here with 0700 instead.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["make_private_dirs"]


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
