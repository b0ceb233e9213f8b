"""``LiveWatch``: the socket through which one open run page hears answers stream in.

The receiving side of ``little_workflow._live`` (read its docstring for the design):
while a run page's event stream is open, the server binds a Unix datagram socket at
``<data_dir>/live/<digest>.<pid>.<n>`` (or in a short private temp directory, with that
entry a symlink to it, when the path would pass the 107-byte limit). The process
driving the run finds it at its next model call and sends the call's deltas there. The
socket and its entry are removed when the stream ends; a server that is killed leaves
them, and the next driver to try one unlinks it.

Whatever arrives is untrusted: a datagram over ``MAX_DATAGRAM`` bytes, one that is not
the format's JSON, or one for a run this page does not show, is dropped and counted
(``rejected``); so are datagrams past ``PENDING_LIMIT`` not yet taken (``dropped``).
Nothing here can fail the page's stream: a socket that cannot be bound is logged, and
the page shows committed answers only, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import logging
import os
import socket
from pathlib import Path
from typing import Any

from little_workflow._live import (
    LIVE_DIR,
    MAX_DATAGRAM,
    MAX_SOCKET_PATH,
    decode,
    entry_prefix,
    short_socket_dir,
    trusted_directory,
    unlink_socket,
)
from little_workflow.storage._dirs import make_private_dirs

__all__ = ["PENDING_LIMIT", "LiveWatch", "remove_own"]

logger = logging.getLogger(__name__)

#: Batches kept for a page before new ones are dropped (the stream takes them often).
PENDING_LIMIT = 2000
_NUMBERS = itertools.count(1)


def _private(directory: Path) -> None:
    # Every level made private, not only the last: ``$TMPDIR/little-workflow-<uid>`` is
    # shared with the subprocess adapter, which refuses it when it is open to others.
    make_private_dirs(directory)
    if not trusted_directory(directory):
        raise PermissionError(f"{str(directory)!r} is not a private directory of this user")


class LiveWatch:
    """A bound datagram socket for the page of ``run_id``; ``open()`` then ``take()``."""

    def __init__(self, data_dir: Path, run_id: str, *, pending_limit: int = PENDING_LIMIT) -> None:
        self.run_id = run_id
        self.directory = data_dir / LIVE_DIR
        #: Datagrams refused: oversized, malformed, or for another run.
        self.rejected = 0
        #: Datagrams lost because the page had not taken the earlier ones.
        self.dropped = 0
        self._limit = pending_limit
        self._pending: list[dict[str, Any]] = []
        self._ready = asyncio.Event()
        self._socket: socket.socket | None = None
        self._entry: Path | None = None
        self._bound: Path | None = None

    def open(self) -> bool:
        """Bind the socket and start reading; ``False`` (logged) if it cannot be bound."""
        name = f"{entry_prefix(self.run_id)}{os.getpid()}.{next(_NUMBERS)}"
        entry = self.directory / name
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        bound: Path | None = None
        try:
            _private(self.directory)
            if len(os.fsencode(entry)) <= MAX_SOCKET_PATH:
                bound = entry
            else:
                short = short_socket_dir()
                _private(short)
                bound = short / hashlib.sha256(os.fsencode(entry)).hexdigest()[:24]
                if len(os.fsencode(bound)) > MAX_SOCKET_PATH:
                    raise OSError(f"no short enough path for a socket (tried {str(bound)!r})")
            # Left by a killed server whose pid this one has now: nobody reads them.
            self._remove(entry, bound)
            sock.bind(os.fspath(bound))
            if bound != entry:
                os.symlink(bound, entry)
            sock.setblocking(False)
            asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)
        except OSError as exc:
            sock.close()
            self._remove(entry, bound)
            logger.warning("the run page of %s cannot show answers live: %s", self.run_id, exc)
            return False
        self._socket, self._entry, self._bound = sock, entry, bound
        return True

    def _readable(self) -> None:
        assert self._socket is not None
        while True:
            try:
                # One byte more than the limit: a longer datagram arrives cut, and is seen.
                data = self._socket.recv(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # closed under us
            batch = decode(data)
            if batch is None or self.run_id not in batch["lineage"]:
                self.rejected += 1
            elif len(self._pending) >= self._limit:
                self.dropped += 1
            else:
                self._pending.append(batch)
                self._ready.set()

    def take(self) -> list[dict[str, Any]]:
        """The batches that arrived since the last call, in order (the socket's queue
        read now, not only when the event loop last looked)."""
        if self._socket is not None:
            self._readable()
        taken, self._pending = self._pending, []
        self._ready.clear()
        return taken

    async def wait(self, timeout: float) -> None:
        """Until a batch is waiting, or ``timeout`` seconds pass."""
        if self._pending:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), timeout)

    def close(self) -> None:
        """Stop reading; remove the socket and its entry. Idempotent."""
        sock, self._socket = self._socket, None
        if sock is not None:
            asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
        self._remove(self._entry, self._bound)
        self._entry = self._bound = None

    @staticmethod
    def _remove(*paths: Path | None) -> None:
        for path in paths:
            if path is not None:
                with contextlib.suppress(OSError):  # never made, or already gone
                    path.unlink()


def remove_own(data_dir: Path) -> None:
    """Remove what this process left in the sockets directory (at the server's exit)."""
    directory = data_dir / LIVE_DIR
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if name.split(".")[1:2] == [str(os.getpid())]:
            entry = directory / name
            with contextlib.suppress(OSError):  # gone already
                target = os.readlink(entry) if entry.is_symlink() else None
                entry.unlink()
                if target is not None:
                    unlink_socket(target)
