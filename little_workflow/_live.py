"""Model answers streaming across processes: from the process that drives a run to a UI.

The web UI (``little-workflow ui``) is one process and the run is driven by another (the
CLI's ``run``/``resume``, or a worker), sharing the data directory. While a run page's
event stream is open, the UI binds a Unix datagram socket for it in
``<data_dir>/live/`` (``ui/_live.py``); this module is the driving side, a ``DeltaRelay``
for ``_deltas``: at each model call it lists that directory, and when a socket watches
the call's run (or a run above it), the call streams and its deltas are sent there as
JSON datagrams. Nothing is journaled and nothing waits: the committed message, in the
log, is what counts, and the page replaces the live answer with it.

The entries are named ``<digest>.<pid>.<n>``, ``digest`` the first 16 hex digits of the
SHA-256 of the watched run id: a fixed length, since a run id may be 200 characters
and a socket path at most 107 bytes, and one listing serves every run of a lineage.
When ``<data_dir>/live/<name>`` is still too long (a data directory deep in a home, or
a test's temp directory), the UI binds the socket in a short private directory
(``$TMPDIR/little-workflow-<uid>/live/``) and the entry is a symlink to it; this side
sends to the target only if its directory is this user's and private, since a temp
directory could be re-created by someone else after a reboot.

The cost when nobody watches is one ``listdir`` of a directory that is usually empty or
missing, per model call (never per durable step). A watched call's deltas are batched
per event-loop turn (``call_soon``): the deltas of one network read leave as one
datagram, because a receiving Unix datagram socket queues only
``net.unix.max_dgram_qlen`` datagrams (10 by default), and the stream's end flushes
what is left before the answer is committed. A batch that finds the queue full
(``EAGAIN``) is held and joined to the next, within a bound; past it, or at the
stream's end, it is dropped and counted (``LiveRelay.dropped``), and the sequence
number each datagram carries shows the page the gap. A socket nobody holds any more
(``ECONNREFUSED``, or a symlink whose target is gone: the UI was killed) is unlinked.
The sockets directory is listed again every ``RESCAN_SECONDS`` while a call streams, so
a page opened during a long answer joins it.

Rejected: a table or KV key in the store for watchers and deltas (every delta a write,
fsync'd, to a log meant to be durable, and polled by the UI); Postgres
``LISTEN``/``NOTIFY`` (one backend only, 8000-byte payloads, and a connection per
driver; the same-host case covers the UI as documented); a stream socket per page (a
connection to manage per call, and a slow reader would block or need a buffer here);
abstract-namespace sockets (no file permissions: any local user could bind the name
first and read the answers); a TCP port (the same, and a token to manage).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import logging
import os
import socket
import stat
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from little_workflow._deltas import RunDelta

__all__ = [
    "LIVE_DIR",
    "MAX_DATAGRAM",
    "MAX_SOCKET_PATH",
    "LiveOutlet",
    "LiveRelay",
    "decode",
    "encode",
    "entry_prefix",
    "short_socket_dir",
    "trusted_directory",
    "unlink_socket",
]

logger = logging.getLogger(__name__)

#: What became of one datagram (``LiveRelay.deliver``).
Delivery = Literal["sent", "full", "gone"]

#: The directory of the UI's sockets, in the data directory.
LIVE_DIR = "live"
#: The largest datagram sent or accepted: far above a batch of deltas of one turn.
MAX_DATAGRAM = 32 * 1024
#: ``sun_path`` is 108 bytes on Linux, one of them the terminating NUL.
MAX_SOCKET_PATH = 107
#: How often a streaming call looks for sockets again (a page opened meanwhile).
RESCAN_SECONDS = 0.5
#: The datagram format; a receiver ignores any other.
VERSION = 1


def entry_prefix(run_id: str) -> str:
    """The start of the names of the sockets that watch ``run_id``."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:16] + "."


def short_socket_dir() -> Path:
    """Where a socket whose entry path is too long is bound instead."""
    return Path(tempfile.gettempdir()) / f"little-workflow-{os.getuid()}" / LIVE_DIR


def trusted_directory(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a real directory of this user that nobody else can enter."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def unlink_socket(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` if it is a socket: a symlink's target is never trusted further."""
    with contextlib.suppress(OSError):  # gone already
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


def _fits(path: str) -> bool:
    return len(path.encode("utf-8", "surrogateescape")) <= MAX_SOCKET_PATH


def _address(entry: str) -> str | None:
    """Where to send for the sockets-directory entry ``entry``; ``None``: nowhere."""
    try:
        if not os.path.islink(entry):
            return entry if _fits(entry) else None
        target = os.readlink(entry)
    except OSError:
        return None
    if not os.path.isabs(target) or not _fits(target):
        return None
    if not trusted_directory(os.path.dirname(target)):
        return None
    return target


def encode(delta: RunDelta, seq: int, pieces: list[dict[str, Any]]) -> bytes:
    """One datagram: the call ``delta`` belongs to, and the delta ``pieces`` of a batch."""
    return json.dumps(
        {
            "v": VERSION,
            "seq": seq,
            "runId": delta.run_id,
            "lineage": list(delta.lineage),
            "path": delta.path,
            "slot": delta.slot,
            "attempt": delta.attempt,
            "deltas": pieces,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8", "replace")  # a lone surrogate in a model's text: shown as "?"


def piece(delta: RunDelta) -> dict[str, Any]:
    """The part of ``delta`` that changes within a call, as the page reads it."""
    model = delta.delta
    item: dict[str, Any] = {"kind": model.kind, "text": model.text}
    if model.kind == "tool_call":
        item["index"] = model.index
        if model.tool_call_id is not None:
            item["toolCallId"] = model.tool_call_id
        if model.name is not None:
            item["name"] = model.name
    return item


_KINDS = ("text", "reasoning", "tool_call")
_MAX_NAME = 1000
_MAX_LINEAGE = 64


def _short_text(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_NAME


def _count(value: object, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**53


def _decoded_piece(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict) or value.get("kind") not in _KINDS:
        return None
    if not isinstance(value.get("text", ""), str):
        return None
    item: dict[str, Any] = {"kind": value["kind"], "text": value.get("text", "")}
    if value["kind"] == "tool_call":
        if not _count(value.get("index", 0), 0):
            return None
        item["index"] = value.get("index", 0)
        for key in ("toolCallId", "name"):
            if key in value:
                if not _short_text(value[key]):
                    return None
                item[key] = value[key]
    return item


def decode(data: bytes) -> dict[str, Any] | None:
    """The batch in a datagram, checked field by field; ``None`` for anything else.

    The sender is a process of this user (the sockets directory is private), but it is
    read as untrusted all the same: whatever reached the socket becomes JSON the page
    renders, so only the known fields, of the known types and sizes, pass.
    """
    if len(data) > MAX_DATAGRAM:
        return None
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("v") != VERSION:
        return None
    lineage = value.get("lineage")
    if not (
        _count(value.get("seq"), 0)
        and _count(value.get("attempt"), 1)
        and _short_text(value.get("runId"))
        and _short_text(value.get("path"))
        and _short_text(value.get("slot"))
        and isinstance(lineage, list)
        and 0 < len(lineage) <= _MAX_LINEAGE
        and all(_short_text(run) for run in lineage)
        and lineage[-1] == value["runId"]
        and isinstance(value.get("deltas"), list)
    ):
        return None
    pieces = [_decoded_piece(item) for item in value["deltas"]]
    if not pieces or any(item is None for item in pieces):
        return None
    return {
        "seq": value["seq"],
        "runId": value["runId"],
        "lineage": lineage,
        "path": value["path"],
        "slot": value["slot"],
        "attempt": value["attempt"],
        "deltas": pieces,
    }


def _size(item: dict[str, Any]) -> int:
    """An upper bound of the bytes of ``item`` in a datagram's JSON."""
    return len(item["text"]) * 4 + 64


def _merged(pieces: list[dict[str, Any]], item: dict[str, Any]) -> None:
    """Add ``item`` to a batch, joined to the last piece when it continues it."""
    last = pieces[-1] if pieces else None
    if (
        last is not None
        and last["kind"] == item["kind"]
        and (
            item["kind"] != "tool_call"
            or (last["index"] == item["index"] and "name" not in item and "toolCallId" not in item)
        )
    ):
        last["text"] += item["text"]
    else:
        pieces.append(item)


class LiveRelay:
    """The driving side: finds the UI's sockets and sends them deltas (a ``DeltaRelay``).

    One non-blocking datagram socket, made on first use, sends to every watcher;
    ``close()`` closes it. Counters say what was lost, for tests and logs.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str], *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.directory = os.path.join(os.fspath(data_dir), LIVE_DIR)
        self.clock = clock
        #: Datagrams not sent because the receiver's queue was full.
        self.dropped = 0
        #: Sockets-directory entries removed because nobody held their socket.
        self.unlinked = 0
        #: Datagrams not sent for another reason (logged once).
        self.failed = 0
        self._socket: socket.socket | None = None

    def scan(self, lineage: tuple[str, ...]) -> dict[str, str]:
        """The watchers of a run of ``lineage``: entry path to the address to send to."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return {}  # no UI has watched anything here yet
        if not names:
            return {}
        prefixes = tuple(entry_prefix(run_id) for run_id in lineage)
        found: dict[str, str] = {}
        for name in names:
            if name.startswith(prefixes):
                entry = os.path.join(self.directory, name)
                address = _address(entry)
                if address is not None:
                    found[entry] = address
        return found

    def outlet(self, lineage: tuple[str, ...]) -> LiveOutlet | None:
        """Where one stream of a model call of ``lineage``'s run sends; ``None``: nobody watches."""
        targets = self.scan(lineage)
        return None if not targets else LiveOutlet(self, lineage, targets)

    def deliver(self, entry: str, address: str, data: bytes) -> Delivery:
        """Send ``data`` to one watcher without waiting: ``sent``, ``full`` (its queue
        is; nothing sent), or ``gone`` (a stale entry, now unlinked, or a failure)."""
        try:
            if self._socket is None:
                self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._socket.setblocking(False)
            self._socket.sendto(data, address)
        except (BlockingIOError, InterruptedError):
            return "full"
        except (ConnectionRefusedError, FileNotFoundError):
            self._unlink(entry, address)
            return "gone"
        except OSError as exc:
            if exc.errno == errno.ENOBUFS:
                return "full"
            if not self.failed:
                logger.warning("cannot send a live model answer to %s: %s", address, exc)
            self.failed += 1
            return "gone"
        return "sent"

    def _unlink(self, entry: str, address: str) -> None:
        # The UI that bound it is gone (killed: a clean exit removes its own).
        with contextlib.suppress(OSError):  # another driver removed it first
            os.unlink(entry)
        if address != entry:
            unlink_socket(address)
        self.unlinked += 1

    def close(self) -> None:
        sock, self._socket = self._socket, None
        if sock is not None:
            sock.close()


class LiveOutlet:
    """One stream of one model call, to the sockets that watch its run.

    A batch that finds a watcher's queue full is held for it and sent with the next
    one, up to ``MAX_DATAGRAM // 2`` bytes; past that, or at the stream's end, it is
    dropped and counted, and that watcher's sequence number skips, so its page sees
    the gap.
    """

    def __init__(self, relay: LiveRelay, lineage: tuple[str, ...], targets: dict[str, str]) -> None:
        self.relay = relay
        self.lineage = lineage
        self.targets = targets
        self._scanned = relay.clock()
        self._seqs: dict[str, int] = {}
        self._held: dict[str, list[dict[str, Any]]] = {}
        #: The first delta: its call's fields head every datagram.
        self._header: RunDelta | None = None
        self._pieces: list[dict[str, Any]] = []
        self._size = 0
        self._scheduled = False

    def send(self, delta: RunDelta) -> None:
        """Queue ``delta``; the batch leaves at the end of this event-loop turn."""
        item = piece(delta)
        if self._header is None:
            self._header = delta
        _merged(self._pieces, item)
        self._size += _size(item)
        if self._size >= MAX_DATAGRAM // 2:
            self.flush()
        elif not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._turn_ended)

    def _turn_ended(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self, *, last: bool = False) -> None:
        """Send what is queued; ``last``: the stream ended (before its answer commits),
        so nothing is held any more."""
        first, pieces = self._header, self._pieces
        if first is None or not (pieces or self._held):
            return
        self._pieces, self._size = [], 0
        now = self.relay.clock()
        if now - self._scanned >= RESCAN_SECONDS:
            self._scanned = now
            self.targets = self.relay.scan(self.lineage)
        for entry, address in list(self.targets.items()):
            batch = self._held.pop(entry, [])
            for item in pieces:
                _merged(batch, dict(item))
            for data in _datagrams(first, self._seqs.get(entry, 0), batch):
                outcome = self.relay.deliver(entry, address, data)
                if outcome == "gone":
                    del self.targets[entry]
                    break
                if outcome == "full" and not last and sum(map(_size, batch)) < MAX_DATAGRAM // 2:
                    self._held[entry] = batch  # the page is busy: it gets it next time
                    break
                if outcome == "full":
                    self.relay.dropped += 1
                self._seqs[entry] = self._seqs.get(entry, 0) + 1

    def end(self) -> None:
        """The stream is over: send what is queued or held, once, or drop it."""
        self.flush(last=True)


def _datagrams(first: RunDelta, seq: int, pieces: list[dict[str, Any]]) -> list[bytes]:
    """``pieces`` in as many datagrams as their size needs (a long text split up)."""
    data = encode(first, seq, pieces)
    if len(data) <= MAX_DATAGRAM:
        return [data]
    if len(pieces) > 1:
        half = len(pieces) // 2
        head = _datagrams(first, seq, pieces[:half])
        return head + _datagrams(first, seq + len(head), pieces[half:])
    item = pieces[0]
    if len(item["text"]) < 2:
        return []  # too big for its text (an absurd tool name): not shown
    middle = len(item["text"]) // 2
    left, right = dict(item), {**item, "text": item["text"][middle:]}
    left["text"] = item["text"][:middle]
    right.pop("name", None)
    right.pop("toolCallId", None)
    head = _datagrams(first, seq, [left])
    return head + _datagrams(first, seq + len(head), [right])
