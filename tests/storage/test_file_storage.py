"""What the file backend promises beyond the conformance suite: layout, crash leftovers,
corrupt files, permissions, and OSError translation."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import little_workflow
from little_workflow.errors import (
    CorruptDataError,
    InvalidKeyError,
    InvalidValueError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from little_workflow.storage import FileStorage, create_file_storage
from little_workflow.testing.storage_conformance import HOSTILE_KEYS, ODD_KEYS


@pytest.fixture
def root(tmp_path: Path) -> Path:
    # Two levels below tmp_path, so that writes escaping root or its parent both show up
    # in a snapshot of tmp_path.
    return tmp_path / "outer" / "store"


@pytest.fixture
def store(root: Path) -> FileStorage:
    return create_file_storage(root)


def snapshot(top: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``top`` with its mode and, for files, its content."""
    result: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(top.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        result[str(path.relative_to(top))] = (info.st_mode, content)
    return result


def entries_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith("~")]


# -- hostile keys --------------------------------------------------------------------------

EXTRA_HOSTILE = ("../../escape", "a/../../../b", "../store~/x", "x" * 300, "ok/" + "%" * 100)


@pytest.mark.parametrize("key", HOSTILE_KEYS + EXTRA_HOSTILE, ids=repr)
async def test_hostile_keys_create_nothing_anywhere(
    tmp_path: Path, root: Path, store: FileStorage, key: str
) -> None:
    await store.set("existing", "kept")
    before = snapshot(tmp_path)
    with pytest.raises(InvalidKeyError):
        await store.set(key, "x")
    with pytest.raises(InvalidKeyError):
        await store.get(key)
    with pytest.raises(InvalidKeyError):
        await store.delete(key)
    with pytest.raises(InvalidKeyError):
        await store.get_many(["existing", key])
    assert snapshot(tmp_path) == before
    assert await store.get("existing") == "kept"


@pytest.mark.parametrize(
    "prefix", ["../", "../../", "/", "//", "a//", "./", "a/../", "../store~/", "x" * 300 + "/"]
)
async def test_unreachable_prefixes_list_nothing_and_touch_nothing(
    tmp_path: Path, root: Path, store: FileStorage, prefix: str
) -> None:
    await store.set("a/b", 1)
    # A key-shaped file outside root that a naive join of "../" would find.
    (tmp_path / "outer" / "a").write_text('{"lwkv":1,"value":"outside"}')
    before = snapshot(tmp_path)
    assert await store.list(prefix) == []
    assert snapshot(tmp_path) == before


async def test_list_reads_only_the_directories_the_prefix_reaches(
    root: Path, store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in ("a/b/c", "a/bb", "a/x/y", "z/q", "top"):
        await store.set(key, key)
    scanned: list[str] = []
    real_scandir = os.scandir

    def recording_scandir(path: Any) -> Any:
        scanned.append(os.path.relpath(os.fspath(path), root))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", recording_scandir)
    assert await store.list("a/b") == ["a/b/c", "a/bb"]
    assert sorted(scanned) == ["a~", "a~/b~"]


# -- layout --------------------------------------------------------------------------------


async def test_key_and_its_children_coexist(root: Path, store: FileStorage) -> None:
    await store.set("a", "parent")
    await store.set("a/b", "child")
    await store.set("a/b/c", "grandchild")
    assert files_under(root) == ["a", "a~/b", "a~/b~/c"]
    assert await store.get_many(["a", "a/b", "a/b/c"]) == {
        "a": "parent",
        "a/b": "child",
        "a/b/c": "grandchild",
    }
    assert await store.list("a") == ["a", "a/b", "a/b/c"]
    await store.delete("a/b")
    assert await store.get("a") == "parent"
    assert await store.get("a/b/c") == "grandchild"
    assert await store.list("a/") == ["a/b/c"]


@pytest.mark.parametrize(
    ("key", "on_disk"),
    [
        ("with space", "with space"),
        ("50%", "50%25"),
        ("%41", "%2541"),
        ("til~de", "til%7Ede"),
        ("~", "%7E"),
        ("ü 🚀/x~y", "ü 🚀~/x%7Ey"),
        ("a b/50%~ü/end", "a b~/50%25%7Eü~/end"),
        ("back\\slash:colon", "back\\slash:colon"),
        ("dots.in.names/.hidden", "dots.in.names~/.hidden"),
    ],
)
async def test_odd_keys_have_the_documented_name_and_decode_back(
    root: Path, store: FileStorage, key: str, on_disk: str
) -> None:
    await store.set(key, {"key": key})
    assert files_under(root) == [on_disk]
    reopened = create_file_storage(root)
    assert await reopened.list("") == [key]
    assert await reopened.get(key) == {"key": key}


@pytest.mark.parametrize("key", ODD_KEYS)
async def test_conformance_odd_keys_use_no_raw_tilde_or_percent_escape_ambiguity(
    root: Path, store: FileStorage, key: str
) -> None:
    await store.set(key, 1)
    (name,) = files_under(root)
    parts = name.split("/")
    assert all("~" not in part for part in parts[-1:])
    assert all(part.endswith("~") and "~" not in part[:-1] for part in parts[:-1])
    assert await create_file_storage(root).list("") == [key]


async def test_segment_size_limit(tmp_path: Path, root: Path, store: FileStorage) -> None:
    before = snapshot(tmp_path)
    # 254 bytes is the most a segment may take, so that its directory form fits 255.
    for key in ("x" * 255, "x" * 256, "%" * 85, "é" * 128, "x" * 255 + "/b", "a/" + "~" * 90):
        with pytest.raises(InvalidKeyError, match="bytes as a file name"):
            await store.set(key, 1)
    assert snapshot(tmp_path) == before
    await store.set("x" * 254, 1)
    await store.set("x" * 254 + "/" + "é" * 127, 2)
    assert await store.list("") == ["x" * 254, "x" * 254 + "/" + "é" * 127]


async def test_empty_directories_are_pruned_up_to_but_not_including_root(
    root: Path, store: FileStorage
) -> None:
    await store.set("a/b/c", 1)
    await store.set("a/d", 2)
    await store.delete("a/b/c")
    assert entries_under(root) == ["a~", "a~/d"]
    await store.delete("a/d")
    assert entries_under(root) == []
    assert entries_under(root.parent) == ["store"]


# -- crash leftovers -----------------------------------------------------------------------


async def test_leftover_temp_files_are_ignored(root: Path, store: FileStorage) -> None:
    await store.set("a/b", {"v": 1})
    await store.set("top", "t")
    # What a writer killed between writing its temp file and renaming it leaves behind.
    (root / "a~" / "~tmp.0123456789abcdef").write_bytes(b'{"lwkv":1,"value":{"v":2')
    (root / "~tmp.fedcba9876543210").write_bytes(b'{"lwkv":1,"value":"new"}\n')
    assert await store.list("") == ["a/b", "top"]
    assert await store.list("a/") == ["a/b"]
    assert await store.get("a/b") == {"v": 1}
    assert await store.get_many(["a/b", "top"]) == {"a/b": {"v": 1}, "top": "t"}
    await store.set("a/b", {"v": 3})
    assert await store.get("a/b") == {"v": 3}
    # The leftover keeps its directory from being pruned; nothing fails because of it.
    await store.delete("a/b")
    assert await store.list("") == ["top"]
    assert (root / "a~" / "~tmp.0123456789abcdef").exists()


# -- corrupt files -------------------------------------------------------------------------

CORRUPT_CONTENTS = [
    b'{"lwkv":1,"value":{"trunc',
    b"",
    b"not json at all",
    b"\xff\xfe\x00garbage",
    b'{"value":1}',
    b'{"lwkv":1}',
    b"[1, 2]",
    b'"just a string"',
    b'{"lwkv":"1","value":1}',
    b'{"lwkv":true,"value":1}',
    b'{"lwkv":1.0,"value":1}',
    b'{"lwkv":1,"value":null}',
    b'{"lwkv":1,"value":1,"extra":0}',
]


@pytest.mark.parametrize("content", CORRUPT_CONTENTS, ids=repr)
async def test_corrupt_file_is_reported_and_left_unchanged(
    root: Path, store: FileStorage, content: bytes
) -> None:
    await store.set("runs/r1", {"ok": True})
    await store.set("runs/r2", {"ok": True})
    path = root / "runs~" / "r1"
    path.write_bytes(content)
    with pytest.raises(CorruptDataError) as info:
        await store.get("runs/r1")
    assert str(path) in str(info.value)
    assert "runs/r1" in str(info.value)
    with pytest.raises(CorruptDataError, match="r1"):
        await store.get_many(["runs/r2", "runs/r1"])
    # Still listed: a corrupt value is reported, not hidden.
    assert await store.list("runs/") == ["runs/r1", "runs/r2"]
    assert path.read_bytes() == content
    assert await store.get("runs/r2") == {"ok": True}


async def test_unknown_version_says_so(root: Path, store: FileStorage) -> None:
    await store.set("k", 1)
    (root / "k").write_bytes(b'{"lwkv":7,"value":1}')
    with pytest.raises(SchemaVersionError, match=r"lwkv=7.*newer"):
        await store.get("k")
    assert (root / "k").read_bytes() == b'{"lwkv":7,"value":1}'


async def test_foreign_names_in_root_are_reported(root: Path, store: FileStorage) -> None:
    await store.set("k", 1)
    for name in ("bad%zz", "a%41", "raw~tilde"):
        (root / name).write_bytes(b'{"lwkv":1,"value":1}')
        with pytest.raises(CorruptDataError, match="never writes"):
            await store.list("")
        (root / name).unlink()
    (root / "plain~").write_bytes(b"a file where a directory of keys should be")
    with pytest.raises(CorruptDataError, match="plain~"):
        await store.list("")
    with pytest.raises(CorruptDataError, match="plain~"):
        await store.set("plain/x", 1)


async def test_symlink_and_fifo_values_are_not_followed(
    tmp_path: Path, root: Path, store: FileStorage
) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b'{"lwkv":1,"value":"secret"}')
    await store.set("k", 1)
    (root / "link").symlink_to(secret)
    with pytest.raises(CorruptDataError, match="link"):
        await store.get("link")
    with pytest.raises(CorruptDataError, match="link"):
        await store.list("")
    (root / "link").unlink()
    os.mkfifo(root / "fifo")
    with pytest.raises(CorruptDataError, match="fifo"):
        await asyncio.wait_for(store.get("fifo"), timeout=5)


# -- permissions ---------------------------------------------------------------------------


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.usefixtures("umask_022")
async def test_owner_only_permissions(root: Path) -> None:
    store = create_file_storage(root)
    await store.set("a/b/c", 1)
    await store.set("top", 2)
    assert mode_of(root) == 0o700
    assert mode_of(root / "a~") == 0o700
    assert mode_of(root / "a~" / "b~") == 0o700
    assert mode_of(root / "a~" / "b~" / "c") == 0o600
    assert mode_of(root / "top") == 0o600


# -- OSError translation -------------------------------------------------------------------


def _fail(error: int) -> Any:
    def fail(*_args: object, **_kwargs: object) -> None:
        raise OSError(error, os.strerror(error))

    return fail


@pytest.mark.parametrize(
    ("function", "error", "expected"),
    [
        ("replace", errno.EIO, StorageError),
        ("replace", errno.EXDEV, StorageError),
        ("fsync", errno.EIO, StorageError),
        ("write", errno.ENOSPC, StorageError),
        ("replace", errno.EACCES, StorageUnavailableError),
    ],
)
async def test_oserror_during_write_becomes_storage_error(
    root: Path,
    store: FileStorage,
    monkeypatch: pytest.MonkeyPatch,
    function: str,
    error: int,
    expected: type[StorageError],
) -> None:
    await store.set("a/k", {"v": 1})
    with monkeypatch.context() as patch:
        patch.setattr(os, function, _fail(error))
        with pytest.raises(expected) as info:
            await store.set("a/k", {"v": 2})
    assert str(root / "a~" / "k") in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert temp_files(root) == []
    assert await store.get("a/k") == {"v": 1}


async def test_permission_denied_creating_temp_file_is_unavailable(
    root: Path, store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.set("k", 1)
    real_open = os.open

    def deny_create(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", path)
        return real_open(path, flags, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(os, "open", deny_create)
        with pytest.raises(StorageUnavailableError, match="Permission denied"):
            await store.set("k", 2)
    assert temp_files(root) == []
    assert await store.get("k") == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores permission bits")
async def test_read_only_root_is_unavailable(root: Path, store: FileStorage) -> None:
    await store.set("k", 1)
    os.chmod(root, 0o500)
    try:
        with pytest.raises(StorageUnavailableError, match=str(root)):
            await store.set("k", 2)
        with pytest.raises(StorageUnavailableError):
            await store.set("new/dir", 2)
    finally:
        os.chmod(root, 0o700)
    assert temp_files(root) == []
    assert await store.get("k") == 1


async def test_missing_root_is_not_an_empty_store(root: Path, store: FileStorage) -> None:
    await store.set("k", 1)
    (root / "k").unlink()
    os.rmdir(root)
    with pytest.raises(StorageUnavailableError, match="unreachable"):
        await store.get("k")
    with pytest.raises(StorageUnavailableError):
        await store.get_many(["k"])
    with pytest.raises(StorageUnavailableError):
        await store.list("")
    with pytest.raises(StorageUnavailableError):
        await store.set("a/b", 1)
    with pytest.raises(StorageUnavailableError):
        await store.delete("k")
    assert entries_under(root.parent) == []


def test_root_that_is_a_file_is_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StorageUnavailableError, match="file"):
        create_file_storage(tmp_path / "file")


# -- values, batches, lifecycle ------------------------------------------------------------


async def test_lone_surrogate_value_is_refused(root: Path, store: FileStorage) -> None:
    with pytest.raises(InvalidValueError, match="surrogate"):
        await store.set("k", "bad\ud800")
    assert files_under(root) == []


async def test_file_format(root: Path, store: FileStorage) -> None:
    await store.set("k", {"b": [1, "ü"]})
    assert (root / "k").read_bytes() == '{"lwkv":1,"value":{"b":[1,"ü"]}}\n'.encode()


def _full_path(path: Any, kwargs: dict[str, Any]) -> str:
    """The path an ``os`` call with ``dir_fd`` (or without) names."""
    dir_fd = kwargs.get("dir_fd")
    if dir_fd is None:
        return os.fspath(path)
    return os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), os.fspath(path))


async def test_get_many_reads_each_file_once(
    root: Path, store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    await store.set("a", 1)
    await store.set("d/b", 2)
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if not flags & os.O_DIRECTORY:
            opened.append(_full_path(path, kwargs))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", counting_open)
    result = await store.get_many(["a", "d/b", "a", "missing", "d/b", "x/y"])
    assert result == {"a": 1, "d/b": 2}
    # x/y: its directory x~ is missing, so no file is opened for it.
    assert sorted(opened) == sorted(str(root / name) for name in ("a", "d~/b", "missing"))


async def test_closed_store_refuses_use(store: FileStorage) -> None:
    await store.close()
    with pytest.raises(StorageError, match="closed"):
        await store.get("k")
    with pytest.raises(StorageError, match="closed"):
        await store.set("k", 1)


# -- races with pruning --------------------------------------------------------------------


async def test_write_retries_when_its_directory_is_pruned_before_the_temp_file(
    root: Path, store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_open = os.open
    target = str(root / "a~" / "b~")
    pruned: list[str] = []

    def open_then_prune(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        fd = real_open(path, flags, *args, **kwargs)
        if _full_path(path, kwargs) == target and not pruned:
            # A delete in another process empties and removes the directories right
            # after this writer opened its directory.
            os.rmdir(target)
            os.rmdir(os.path.dirname(target))
            pruned.append(target)
        return fd

    monkeypatch.setattr(os, "open", open_then_prune)
    await store.set("a/b/c", "kept")
    monkeypatch.undo()
    assert pruned == [target]
    assert await store.get("a/b/c") == "kept"
    assert temp_files(root) == []


async def test_write_retries_when_a_parent_is_pruned_between_mkdirs(
    root: Path, store: FileStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_mkdir = os.mkdir
    first = str(root / "a~")
    calls: list[str] = []

    def mkdir_then_prune(path: Any, *args: Any, **kwargs: Any) -> None:
        calls.append(_full_path(path, kwargs))
        try:
            real_mkdir(path, *args, **kwargs)
        finally:
            if calls == [first]:
                os.rmdir(first)

    monkeypatch.setattr(os, "mkdir", mkdir_then_prune)
    await store.set("a/b/c", "kept")
    monkeypatch.undo()
    # a~ is gone when it is opened to make b~ in it: the write starts again from a~.
    assert calls[:3] == [first, first, first + "/b~"]
    assert await store.get("a/b/c") == "kept"


_CHURN = textwrap.dedent(
    """
    import asyncio, sys
    from little_workflow.storage import create_file_storage

    async def main(root, name, count):
        store = create_file_storage(root)
        for i in range(count):
            key = f"shared/dir/{name}"
            await store.set(key, i)
            value = await store.get(key)
            assert value == i, (key, i, value)
            await store.delete(key)
            assert await store.get(key) is None

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


def spawn_churn(root: Path, name: str, count: int) -> subprocess.Popen[str]:
    project = str(Path(little_workflow.__file__).parent.parent)
    path = os.pathsep.join(filter(None, [project, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", _CHURN, str(root), name, str(count)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
    )


async def test_two_processes_pruning_and_writing_one_directory_lose_nothing(root: Path) -> None:
    """Deletes prune the shared directories while the other process writes into them."""
    create_file_storage(root)
    children = [spawn_churn(root, name, 300) for name in ("w1", "w2")]
    loop = asyncio.get_running_loop()
    results = await asyncio.gather(
        *(loop.run_in_executor(None, child.communicate, None) for child in children)
    )
    for child, (_out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
    assert temp_files(root) == []


async def test_a_root_under_tilde_is_the_home_directory_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, first, second = tmp_path / "home", tmp_path / "first", tmp_path / "second"
    for directory in (home, first, second):
        directory.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(first)
    store = create_file_storage(root="~/.little-workflow/checkpoints")
    assert store.root == str(home / ".little-workflow" / "checkpoints")
    await store.set("execution:e:snapshot", {"ok": True})
    assert not (first / "~").exists()
    # A host restarted from another directory finds the same record.
    monkeypatch.chdir(second)
    again = create_file_storage(root="~/.little-workflow/checkpoints")
    assert await again.get("execution:e:snapshot") == {"ok": True}


async def test_a_relative_root_is_made_absolute_when_the_store_is_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = create_file_storage(root="relative/store")
    assert store.root == str(tmp_path / "relative" / "store")
    monkeypatch.chdir(tmp_path / "relative")
    await store.set("k", 1)  # still under the root it was created with
    assert await create_file_storage(root=tmp_path / "relative" / "store").get("k") == 1
