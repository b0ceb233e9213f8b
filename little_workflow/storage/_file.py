"""The file backend of ``StorageAdapter``: one small JSON file per key, under a root.

Layout. A key's ``/``-separated segments become nested directories, so ``list(prefix)``
opens only the directories the prefix can reach. Each segment is escaped into a name
that is safe in a Linux directory: every character is kept except ``/``, ``%``, ``~``
and control characters, which become ``%XX`` (UTF-8 bytes, uppercase hex). The value of
a key is the file named by its last escaped segment; each earlier segment is a
directory named by the escaped segment plus ``~``::

    key "a"                 root/a
    key "a/b"               root/a~/b
    key "50%/x~y"           root/50%25~/x%7Ey
    (writer in flight)      root/a~/~tmp.3f9c0e1d2b4a6c8e

Since an escaped segment never holds a raw ``~``, a name ending in ``~`` is always a
directory of keys, a name starting with ``~`` is always a temporary file, and neither
can be mistaken for a value: keys ``a`` and ``a/b`` coexist, and a file left behind by
a writer killed before its rename is ignored. Every escaped segment is at most 254
bytes, so that its directory form (one ``~`` more) fits the 255-byte limit of a file
name; a longer one is refused with ``InvalidKeyError`` before anything is written.

File format: ``{"lwkv":1,"value":<value>}``. The version tag lets a later format be
told apart; a file that is not JSON, lacks the envelope or carries another version
raises ``CorruptDataError`` naming the file and the key. It is never skipped and never
rewritten by a read.

Durability. ``set`` writes a uniquely named temp file in the target directory, fsyncs
it, fsyncs the ancestors of that directory the first time this store writes there (a
directory's own entry is durable only once its parent is synced, whoever created it),
renames it over the target and fsyncs the directory. Two processes may share a root:
temp names are random, ``mkdir`` races are expected, and the last rename wins whole.

Empty directories are pruned on ``delete``. That is safe against a concurrent ``set``
in another process because ``rmdir`` removes only an *empty* directory: a writer's temp
file, created through a descriptor of the directory, keeps it non-empty from before
the rename until the key is deleted again, and a writer that finds its directory gone
(``ENOENT`` from ``mkdir`` or from creating the temp file) makes it again and retries.

All file I/O runs inline on the event-loop thread. A hop to a worker thread
(``asyncio.to_thread``) costs about 100 µs here, more than reading a small value; a
write blocks the loop for its fsyncs, the price of the durable step itself. Rejected
layouts: one flat directory of escaped full keys (``list`` of a prefix reads every
name in the store), and hashed file names (no prefix listing without an index file
that would itself need atomic updates).

Symlinks. Nothing under the root is followed: a value file is opened with
``O_NOFOLLOW``, and a key's directories are opened one at a time from the root, each
with ``O_NOFOLLOW`` relative to its parent (``openat``), and made there (``mkdirat``);
a symlink in the way is ``CorruptDataError``. The root itself may be a symlink: it is
the caller's configuration, not the store's content.

Portability: the escaping targets Linux. On a case-insensitive or Unicode-normalising
filesystem (default macOS, Windows) distinct keys may share a file. The root should be
a directory used only by this store: anything else found in it (``lost+found`` at the
top of a mount point, an editor's backup) is reported as corrupt data, not skipped.
"""

from __future__ import annotations

import builtins
import errno
import os
import re
import secrets
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.errors import (
    CorruptDataError,
    InvalidKeyError,
    InvalidValueError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from little_workflow.errors import shown as _shown
from little_workflow.storage._dirs import make_private_dirs
from little_workflow.storage._keys import validate_key, validate_prefix
from little_workflow.storage._values import encode_value

__all__ = ["FileStorage", "create_file_storage"]

_FORMAT_VERSION = 1
_DIR_SUFFIX = "~"
# Every name starting with this is a temp file; escaping keeps it out of key names.
_TEMP_MARK = "~"
_TEMP_PREFIX = _TEMP_MARK + "tmp."
_TEMP_NAME_LENGTH = len(_TEMP_PREFIX) + 16
# NAME_MAX is 255 bytes; a directory name is the escaped segment plus "~".
_MAX_SEGMENT_BYTES = 254
# PATH_MAX is 4096 bytes including the terminating NUL.
_MAX_PATH_BYTES = 4095
# How often a write starts again when a concurrent delete prunes its directory; each
# retry means another process deleted the last key there in the last microseconds.
_PRUNE_RACE_ATTEMPTS = 100
# Bound on the cache of directories whose ancestors were synced (see _sync_ancestors).
_SYNCED_DIRS_LIMIT = 4096

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# A key's directories are opened one by one from their parent's descriptor with this: a
# symlink planted in the root (``a~ -> /elsewhere``) fails to open (ELOOP/ENOTDIR)
# rather than leading reads, writes and deletes outside the root.
_SUBDIR_FLAGS = _DIR_FLAGS | os.O_NOFOLLOW
# O_NONBLOCK: a FIFO planted at a value's path must not hang the event loop on open.
_READ_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW

_ESCAPED_CHARS_RE = re.compile(r"[/%~\x00-\x1f\x7f]")
_ESCAPE_RUN_RE = re.compile(r"(?:%[0-9A-F]{2})+")
_UNAVAILABLE_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_PRUNE_STOP_ERRNOS = frozenset({errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT})


def _escape_match(match: re.Match[str]) -> str:
    return "".join(f"%{byte:02X}" for byte in match.group().encode("utf-8"))


def _unescape_match(match: re.Match[str]) -> str:
    return bytes.fromhex(match.group().replace("%", "")).decode("utf-8")


def _encode_segment(segment: str) -> str:
    return _ESCAPED_CHARS_RE.sub(_escape_match, segment)


def _decode_name(name: str) -> str | None:
    """The segment ``name`` encodes, or ``None`` if ``_encode_segment`` never makes it.

    Requiring the round trip rejects lowercase hex, a stray ``%`` and raw characters
    that should have been escaped, so one key has exactly one name on disk.
    """
    try:
        segment = _ESCAPE_RUN_RE.sub(_unescape_match, name)
    except UnicodeDecodeError:
        return None
    return segment if segment and _encode_segment(segment) == name else None


def _ancestors(root: str, directory: str) -> tuple[str, ...]:
    """The directories from ``root`` (excluded) down to ``directory`` (included)."""
    parts = os.path.relpath(directory, root).split(os.sep)
    return tuple(os.path.join(root, *parts[: index + 1]) for index in range(len(parts)))


def _fs_len(path: str) -> int:
    return len(os.fsencode(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int, size: int) -> bytes:
    # Files are replaced whole, never written in place, so st_size is the whole file;
    # the loop only guards against short reads.
    chunks: list[bytes] = []
    remaining = size
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class _Location:
    key: str
    #: The directories from the root (excluded) down to the one holding the value.
    dirs: tuple[str, ...]
    directory: str
    name: str

    @property
    def path(self) -> str:
        return os.path.join(self.directory, self.name)


class FileStorage:
    """A ``StorageAdapter`` keeping each key in its own file under a root directory.

    Layout, file format, durability and concurrency are described in the module
    docstring of ``little_workflow.storage._file``. Several ``FileStorage`` objects, in
    this process or others, may share one root.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        """Open (and create, owner-only, if missing) the store rooted at ``root``.

        Raises ``StorageUnavailableError`` if the root cannot be created or is not a
        directory.
        """
        # ``~`` is the user's home, as in the documented examples, and a relative root is
        # made absolute now: a host restarted from another directory finds the same store.
        self._root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self._closed = False
        # Directory path -> inode whose ancestors this store has fsynced (_sync_ancestors).
        self._synced_dirs: dict[str, int] = {}
        self._create_root()

    @property
    def root(self) -> str:
        """The absolute path of the store's root directory."""
        return self._root

    def __repr__(self) -> str:
        return f"FileStorage(root={self._root!r})"

    # -- the StorageAdapter interface ---------------------------------------------------

    async def get(self, key: str) -> JsonValue | None:
        """The value at ``key``, or ``None`` if there is none."""
        self._check_open()
        value = self._read(self._locate(key))
        if value is None:
            self._require_root()
        return value

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        """The stored values of ``keys``, reading each file once; missing keys are absent.

        Every key is validated before any file is read.
        """
        self._check_open()
        wanted = [validate_key(key) for key in keys]
        locations = [self._locate(key) for key in dict.fromkeys(wanted)]
        result: dict[str, JsonValue] = {}
        for location in locations:
            value = self._read(location)
            if value is not None:
                result[location.key] = value
        if len(result) < len(locations):
            self._require_root()
        return result

    async def set(self, key: str, value: JsonValue) -> None:
        """Store ``value`` at ``key`` atomically and durably (see the module docstring)."""
        self._check_open()
        location = self._locate(key)
        text = encode_value(key, value)
        try:
            data = f'{{"lwkv":{_FORMAT_VERSION},"value":{text}}}\n'.encode()
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"value for key {key!r} contains a lone surrogate (at character {exc.start} "
                "of its JSON text), which cannot be written as UTF-8"
            ) from exc
        self._write(location, data)

    async def delete(self, key: str) -> None:
        """Remove ``key`` durably; removing a missing key is not an error.

        Directories left empty are removed too (see the module docstring for why that
        is safe against concurrent writers).
        """
        self._check_open()
        location = self._locate(key)
        dir_fd = self._open_directory(location, create=False)
        if dir_fd is None:
            self._require_root()
            return
        try:
            try:
                os.unlink(location.name, dir_fd=dir_fd)
            except FileNotFoundError:
                self._require_root()
                return
            os.fsync(dir_fd)
        except OSError as exc:
            raise self._error(exc, "delete", location.path, key) from exc
        finally:
            os.close(dir_fd)
        self._prune(location)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        """Every key starting with exactly ``prefix``, sorted by code point.

        Only the directory of the prefix's complete segments is read (and everything
        below the entries that match); a prefix that no key can have lists nothing.
        """
        self._check_open()
        validate_prefix(prefix)
        *complete, partial = prefix.split("/")
        directory = self._root
        for segment in complete:
            if segment in ("", ".", ".."):
                return []
            encoded = _encode_segment(segment)
            if _fs_len(encoded) > _MAX_SEGMENT_BYTES:
                return []
            directory = os.path.join(directory, encoded + _DIR_SUFFIX)
        if _fs_len(directory) > _MAX_PATH_BYTES:
            return []
        # A missing root must not look like an empty store.
        self._require_root()
        if complete:
            # Only to refuse a symlink on the way down (see the module docstring); the
            # directories below are checked entry by entry as they are walked.
            dirs = _ancestors(self._root, directory)
            found = self._open_directory(
                _Location(key=prefix, dirs=dirs, directory=directory, name=""), create=False
            )
            if found is None:
                return []
            os.close(found)
        base = "".join(segment + "/" for segment in complete)
        keys: builtins.list[str] = []
        stack: builtins.list[tuple[str, str, str]] = [(directory, base, partial)]
        while stack:
            path, key_base, wanted = stack.pop()
            for entry in self._scan(path):
                self._collect(entry, key_base, wanted, keys, stack)
        keys.sort()
        return keys

    async def close(self) -> None:
        """Mark the store closed; it holds no open files between calls."""
        self._closed = True

    # -- layout -------------------------------------------------------------------------

    def _locate(self, key: str) -> _Location:
        validate_key(key)
        encoded = [_encode_segment(segment) for segment in key.split("/")]
        for segment, name in zip(key.split("/"), encoded, strict=True):
            size = _fs_len(name)
            if size > _MAX_SEGMENT_BYTES:
                raise InvalidKeyError(
                    f"storage key {_shown(key)} has a segment, {_shown(segment)}, that takes "
                    f"{size} bytes as a file name; the file backend allows at most "
                    f"{_MAX_SEGMENT_BYTES} per '/'-separated segment ('/', '%' and '~' take 3 "
                    "bytes each, other non-ASCII characters 2 to 4). Split it into shorter "
                    "segments or hash the long part"
                )
        dirs: builtins.list[str] = []
        directory = self._root
        for name in encoded[:-1]:
            directory = os.path.join(directory, name + _DIR_SUFFIX)
            dirs.append(directory)
        longest = max(_fs_len(encoded[-1]), _TEMP_NAME_LENGTH)
        if _fs_len(directory) + 1 + longest > _MAX_PATH_BYTES:
            raise InvalidKeyError(
                f"storage key {_shown(key)} would be a path longer than the system limit of "
                f"{_MAX_PATH_BYTES} bytes under {self._root!r}; use a shorter key"
            )
        return _Location(key=key, dirs=tuple(dirs), directory=directory, name=encoded[-1])

    def _collect(
        self,
        entry: os.DirEntry[str],
        key_base: str,
        wanted: str,
        keys: builtins.list[str],
        stack: builtins.list[tuple[str, str, str]],
    ) -> None:
        name = entry.name
        if name.startswith(_TEMP_MARK):
            return  # a writer's temp file: in flight, or left by a process killed mid-write
        is_dir_name = name.endswith(_DIR_SUFFIX)
        segment = _decode_name(name[:-1] if is_dir_name else name)
        if segment is None:
            raise CorruptDataError(
                f"file storage {self._root!r} holds {entry.path!r}, whose name this store "
                "never writes; move it out of the storage root"
            )
        if not segment.startswith(wanted):
            return
        try:
            if is_dir_name:
                is_expected_kind = entry.is_dir(follow_symlinks=False)
            else:
                is_expected_kind = entry.is_file(follow_symlinks=False)
        except OSError as exc:
            raise self._error(exc, "inspect", entry.path, None) from exc
        if not is_expected_kind:
            kind = "directory" if is_dir_name else "regular file"
            raise CorruptDataError(
                f"file storage {self._root!r} holds {entry.path!r}, which is not a {kind} "
                "as this store writes it (a symlink or foreign entry?); move it out of the "
                "storage root"
            )
        if is_dir_name:
            # Everything below a matching directory matches: the prefix ends at this level.
            stack.append((entry.path, key_base + segment + "/", ""))
            return
        key = key_base + segment
        try:
            validate_key(key)
        except InvalidKeyError as exc:
            raise CorruptDataError(
                f"file storage {self._root!r} holds {entry.path!r}, which decodes to a key "
                f"no store accepts ({exc.message}); move it out of the storage root"
            ) from exc
        keys.append(key)

    def _scan(self, path: str) -> builtins.list[os.DirEntry[str]]:
        try:
            with os.scandir(path) as entries:
                return builtins.list(entries)
        except FileNotFoundError:
            return []  # never created, or pruned by a delete while we walked
        except OSError as exc:
            raise self._error(exc, "list", path, None) from exc

    # -- reading ------------------------------------------------------------------------

    def _read(self, location: _Location) -> JsonValue | None:
        path = location.path
        if location.dirs:
            dir_fd = self._open_directory(location, create=False)
            if dir_fd is None:
                return None
        else:
            dir_fd = None  # in the root: its path is the caller's, followed as given
        try:
            fd = os.open(path if dir_fd is None else location.name, _READ_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(exc, "read", path, location.key) from exc
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise CorruptDataError(
                    f"file storage entry {path!r} (key {location.key!r}) is not a regular "
                    "file; this store writes only regular files. Move it out of the root"
                )
            data = _read_all(fd, info.st_size)
        except OSError as exc:
            raise self._error(exc, "read", path, location.key) from exc
        finally:
            os.close(fd)
        return self._decode(data, path, location.key)

    def _decode(self, data: bytes, path: str, key: str) -> JsonValue:
        where = f"file {path!r} (key {key!r})"
        document = codec.loads(data, where=where)
        if (
            not isinstance(document, dict)
            or set(document) != {"lwkv", "value"}
            or document["value"] is None
        ):
            raise CorruptDataError(
                f"{where} is not a value file of this store: expected exactly "
                '{"lwkv": 1, "value": <non-null JSON>}. It was left unchanged; restore it '
                "from a backup or delete the key"
            )
        version = document["lwkv"]
        if type(version) is int and version > _FORMAT_VERSION:
            raise SchemaVersionError(
                f"{where} has format version lwkv={version}; this program reads only "
                f"lwkv={_FORMAT_VERSION}. It was written by a newer little-workflow; upgrade "
                "to read it. It was left unchanged"
            )
        if type(version) is not int or version != _FORMAT_VERSION:
            raise CorruptDataError(
                f"{where} has format version lwkv={version!r}; this program reads only "
                f"lwkv={_FORMAT_VERSION}. Was it written by a newer little-workflow? It was "
                "left unchanged"
            )
        return document["value"]

    # -- writing ------------------------------------------------------------------------

    def _write(self, location: _Location, data: bytes) -> None:
        for _attempt in range(_PRUNE_RACE_ATTEMPTS):
            dir_fd = self._open_directory(location, create=True)
            if dir_fd is None:
                self._require_root()
                continue  # a directory on the way was pruned by a concurrent delete
            try:
                if self._write_in(dir_fd, location, data):
                    return
            finally:
                os.close(dir_fd)
        raise StorageError(
            f"file storage could not write {location.path!r} (key {location.key!r}): its "
            f"directory was removed {_PRUNE_RACE_ATTEMPTS} times while writing, by deletes "
            "in another process. Nothing was written; retry"
        )

    def _open_directory(self, location: _Location, *, create: bool) -> int | None:
        """A descriptor of the location's directory, or ``None`` if one on the way is
        missing (never made, or pruned by a concurrent delete meanwhile).

        Each directory is opened from its parent's descriptor with ``O_NOFOLLOW`` (and,
        with ``create``, made there first), so no symlink under the root is followed.
        """
        try:
            fd = os.open(self._root, _DIR_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(exc, "open the directory of", location.path, location.key) from exc
        for path in location.dirs:
            try:
                child = self._open_child(fd, path, location, create=create)
            finally:
                os.close(fd)
            if child is None:
                return None
            fd = child
        return fd

    def _open_child(self, fd: int, path: str, location: _Location, *, create: bool) -> int | None:
        name = os.path.basename(path)
        if create:
            try:
                os.mkdir(name, 0o700, dir_fd=fd)
            except FileExistsError:
                pass  # made earlier, or by a concurrent writer; a non-directory fails below
            except FileNotFoundError:
                return None  # this parent was pruned by a concurrent delete
            except OSError as exc:
                raise self._error(exc, "create directory", path, location.key) from exc
        try:
            return os.open(name, _SUBDIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error(exc, "open the directory of", location.path, location.key) from exc

    def _write_in(self, dir_fd: int, location: _Location, data: bytes) -> bool:
        """Write through ``dir_fd``; ``False`` if the directory was pruned before we began."""
        temp = _TEMP_PREFIX + secrets.token_hex(8)
        try:
            fd = os.open(temp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
        except FileNotFoundError:
            return False  # pruned between mkdir and here: creating in a removed directory fails
        except OSError as exc:
            raise self._error(
                exc, "create a temporary file for", location.path, location.key
            ) from exc
        try:
            try:
                _write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            self._sync_ancestors(dir_fd, location)
            os.replace(temp, location.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except OSError as exc:
            error = self._error(exc, "write", location.path, location.key)
            self._discard(dir_fd, location, temp, error)
            raise error from exc
        except BaseException as exc:
            self._discard(dir_fd, location, temp, exc)
            raise
        try:
            os.fsync(dir_fd)
        except OSError as exc:
            raise self._error(
                exc, "sync the directory after replacing", location.path, location.key
            ) from exc
        return True

    def _sync_ancestors(self, dir_fd: int, location: _Location) -> None:
        # A directory's entry is durable only once its parent is fsynced. Syncing only the
        # directories this call created would leave a window when another process created
        # one a moment ago and has not synced it yet, so the first write into a directory
        # (by inode: a pruned-and-remade one counts as new) syncs every ancestor. Run while
        # our temp file keeps the directory non-empty, so no concurrent prune can race it.
        if not location.dirs:
            return
        inode = os.fstat(dir_fd).st_ino
        if self._synced_dirs.get(location.directory) == inode:
            return
        for path in location.dirs:
            _fsync_dir(os.path.dirname(path))
        if len(self._synced_dirs) >= _SYNCED_DIRS_LIMIT:
            self._synced_dirs.clear()
        self._synced_dirs[location.directory] = inode

    def _discard(self, dir_fd: int, location: _Location, temp: str, error: BaseException) -> None:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass  # the rename may have happened before the failure
        except OSError as cleanup:
            error.add_note(
                f"the temporary file {os.path.join(location.directory, temp)!r} could not be "
                f"removed either ({cleanup.strerror}); it is ignored by reads and safe to delete"
            )

    def _prune(self, location: _Location) -> None:
        # No fsync after rmdir: an empty directory that reappears after a crash is harmless.
        for path in reversed(location.dirs):
            try:
                os.rmdir(path)
            except OSError as exc:
                if exc.errno in _PRUNE_STOP_ERRNOS:
                    return  # still in use, or another deleter got there first
                error = self._error(exc, "remove the empty directory", path, location.key)
                error.add_note(f"the key {location.key!r} itself was deleted durably")
                raise error from exc

    # -- root and errors ----------------------------------------------------------------

    def _create_root(self) -> None:
        if os.path.isdir(self._root):
            return
        try:
            make_private_dirs(self._root)
            _fsync_dir(os.path.dirname(self._root))
        except OSError as exc:
            raise StorageUnavailableError(
                f"cannot create the file storage root {self._root!r}: {exc.strerror or exc}; "
                "check that the path is a directory (or can be made one) writable by this user"
            ) from exc

    def _require_root(self) -> None:
        """Raise unless the root is still a directory: a missing store is not a missing key."""
        try:
            info = os.stat(self._root)
        except OSError as exc:
            raise StorageUnavailableError(
                f"the file storage root {self._root!r} is unreachable ({exc.strerror}); was it "
                "deleted or unmounted after the store was opened? Nothing was read or written"
            ) from exc
        if not stat.S_ISDIR(info.st_mode):
            raise StorageUnavailableError(
                f"the file storage root {self._root!r} is no longer a directory"
            )

    def _check_open(self) -> None:
        if self._closed:
            raise StorageError(f"file storage {self._root!r} is closed")

    def _error(self, exc: OSError, action: str, path: str, key: str | None) -> StorageError:
        what = repr(path) if key is None else f"{path!r} (key {key!r})"
        reason = exc.strerror or str(exc)
        if exc.errno in _UNAVAILABLE_ERRNOS:
            return StorageUnavailableError(
                f"file storage cannot {action} {what}: {reason}; check that {self._root!r} "
                "and everything under it is writable by this user"
            )
        if exc.errno == errno.ENOENT:
            self._require_root()
        if exc.errno in (errno.ENOTDIR, errno.EISDIR, errno.ELOOP):
            return CorruptDataError(
                f"file storage cannot {action} {what}: {reason}; something this store did "
                f"not write (a file, directory or symlink) is in the way under "
                f"{self._root!r}. Move it out of the storage root"
            )
        hint = "; free some disk space" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else ""
        return StorageError(f"file storage cannot {action} {what}: {reason}{hint}")


def create_file_storage(root: str | os.PathLike[str]) -> FileStorage:
    """A ``StorageAdapter`` keeping one JSON file per key under ``root``.

    A leading ``~`` in ``root`` is the user's home directory; a relative ``root`` is
    resolved against the working directory once, here (``store.root`` is absolute).
    ``root`` is created (mode 0700) if it does not exist; raises
    ``StorageUnavailableError`` if it cannot be.
    """
    return FileStorage(root)
