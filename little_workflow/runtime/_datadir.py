"""The data directory, ``.little-workflow/`` by default: the seed's layout, in one place.

::

    .little-workflow/
      little-workflow.db      the SQLite/WAL event log and KV store (the embedded default)
      blobs/                  payloads over 64 KiB by SHA-256 (``storage.SqliteBlobStore``)
      artifacts/              artifact files and their manifests
      runs/<runId>/harness/   harness session scratch, made when a session starts
      memory/                 the agents' memory store
      locks/                  run and outer-loop locks held by live processes
      outer-loops/            outer-loop manifests
      live/                   sockets of open UI run pages (answers streaming in; ui.md)

Directories are created owner-only (0700), the parents made on the way included, and
files 0600, whatever the umask: runs hold model prompts and tool results. An existing
directory open to other users is made private on open, or refused with the ``chmod``
that fixes it (``storage/_dirs.py``, ``make_private_tree``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from little_workflow.errors import StorageUnavailableError
from little_workflow.ids import validate_id
from little_workflow.storage import SQLITE_DEFAULT_FILENAME
from little_workflow.storage._dirs import make_private_dirs, make_private_tree

__all__ = ["DataDir"]

_SUBDIRECTORIES = ("artifacts", "runs", "memory", "locks", "outer-loops")
#: What the program makes in a data directory: made private on open if it was not.
_OWN_ENTRIES = (
    *_SUBDIRECTORIES,
    "blobs",
    SQLITE_DEFAULT_FILENAME,
    *(f"{SQLITE_DEFAULT_FILENAME}{suffix}" for suffix in ("-wal", "-shm", "-journal")),
)


@dataclass(frozen=True, slots=True)
class DataDir:
    """Paths inside one data directory. ``create()`` makes the layout."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> DataDir:
        """The data directory at ``root`` (made absolute, so a later ``chdir`` is harmless)."""
        return cls(Path(root).absolute())

    def create(self) -> DataDir:
        """Create the directory and its layout if missing; owner-only permissions.

        An existing directory open to other users (an earlier version's 0755 and 0644,
        or one made by hand) is made private: group and other bits off it and off what
        the program made in it; ``DataDirPermissionsError`` for a path this process does
        not own or cannot change.
        """
        try:
            # Every level made here is private, not only the last (``mkdir -p`` would
            # leave the parents it makes to the umask, 0777 under ``umask 0``).
            made = make_private_dirs(self.root)
            if not made:
                # One lstat when the root is private, which hides all below it; what the
                # program made in it when it was not.
                make_private_tree(self.root, _OWN_ENTRIES)
            for name in _SUBDIRECTORIES:
                (self.root / name).mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create the data directory {str(self.root)!r}: {exc}"
            ) from exc
        return self

    @property
    def database(self) -> Path:
        """The SQLite database of the embedded store."""
        return self.root / SQLITE_DEFAULT_FILENAME

    @property
    def store_url(self) -> str:
        """The store URL of the embedded default (SQLite in this directory)."""
        return f"sqlite:///{self.database}"

    @property
    def artifacts(self) -> Path:
        """Where artifact files and manifests live."""
        return self.root / "artifacts"

    @property
    def memory(self) -> Path:
        """Where the agents' memory store lives."""
        return self.root / "memory"

    @property
    def locks(self) -> Path:
        """Where lock files of live processes live."""
        return self.root / "locks"

    @property
    def outer_loops(self) -> Path:
        """Where outer-loop manifests live."""
        return self.root / "outer-loops"

    def run_dir(self, run_id: str) -> Path:
        """``runs/<runId>``; the id is validated, so it cannot name anything outside."""
        return self.root / "runs" / validate_id(run_id, what="run id")

    def harness_dir(self, run_id: str) -> Path:
        """``runs/<runId>/harness``: scratch of the run's harness sessions."""
        return self.run_dir(run_id) / "harness"

    def lock_path(self, kind: str, ident: str) -> Path:
        """The lock file of ``kind`` (``run``, ``outer-loop``) ``ident``."""
        return self.locks / f"{kind}-{validate_id(ident, what=f'{kind} id')}.lock"
