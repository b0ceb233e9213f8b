"""No path that comes from outside escapes the data directory or a storage root: run ids,
outer-loop and artifact ids, artifact names, storage keys, blob digests, export targets
and the ids the CLI takes, tried with '..', absolute paths, symlinks, NUL bytes,
backslashes and unicode look-alikes."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.artifacts import ArtifactStore
from little_workflow.cli._main import cli
from little_workflow.errors import (
    CorruptDataError,
    InvalidIdError,
    InvalidInputError,
    InvalidKeyError,
    StorageError,
)
from little_workflow.ids import is_valid_id, validate_id
from little_workflow.memory import MemoryStore
from little_workflow.runtime._datadir import DataDir
from little_workflow.storage import create_file_storage
from little_workflow.storage._blobs_file import FileBlobStore
from tests.hostile.support import FUZZ, PATH_TRICKS, expect, path_tricks

HOSTILE_IDS = [
    "..", "../run_1", "/etc/passwd", "run_1/../../x", "a\x00b", "..\\..\\x", "run\\1",
    "\uff0e\uff0e", "run\u2215x", "r\u202eun", "\u212a", "run_1\n", " run", "", "x" * 201,
    ".hidden", "-rf", "~root", "C:\\x", "run_1\ud800",
]  # fmt: skip


def _files_under(path: Path) -> set[str]:
    return {str(p.relative_to(path)) for p in path.rglob("*")}


@pytest.mark.parametrize("ident", HOSTILE_IDS)
def test_hostile_ids_are_refused_everywhere_an_id_becomes_a_path(
    tmp_path: Path, ident: str
) -> None:
    data = DataDir(tmp_path / "data")
    store = ArtifactStore(tmp_path / "data")
    calls: list[Callable[[], object]] = [
        lambda: data.run_dir(ident),
        lambda: data.lock_path("run", ident),
        lambda: data.lock_path("outer-loop", ident),
        lambda: store.get(ident),
        lambda: store.list(run_id=ident),
        lambda: store.put("r.txt", b"x", run_id=ident),
        lambda: store.export(ident, tmp_path / "out"),
    ]
    for call in calls:
        with pytest.raises(InvalidIdError) as caught:
            call()
        assert caught.value.code == "invalid_id"
        assert caught.value.message.startswith("invalid ")
    assert _files_under(tmp_path) == set()


@FUZZ
@given(path_tricks)
def test_an_accepted_id_is_one_plain_file_name(ident: str) -> None:
    if not is_valid_id(ident):
        with pytest.raises(InvalidIdError):
            validate_id(ident, what="run id")
        return
    assert validate_id(ident) == ident
    assert os.path.normpath(os.path.join("/base", ident)) == "/base/" + ident
    assert ident.isascii()
    assert not set(ident) & set("/\\\x00")


@FUZZ
@given(st.lists(path_tricks, min_size=1, max_size=3).map("/".join))
async def test_file_storage_keys_stay_under_the_root(
    tmp_path_factory: pytest.TempPathFactory, key: str
) -> None:
    base = tmp_path_factory.mktemp("kv")
    root = base / "root"
    storage = create_file_storage(root)
    try:
        await storage.set(key, 1)
    except InvalidKeyError as exc:
        expect(exc.code == "invalid_key", exc)
        expect(exc.message.startswith("storage key "), exc)
    else:
        assert await storage.get(key) == 1
        assert await storage.list("") == [key]
        for path in root.rglob("*"):
            assert path.resolve().is_relative_to(root.resolve())
    finally:
        await storage.close()
    assert {p.name for p in base.iterdir()} <= {"root"}


@pytest.mark.parametrize(
    "key",
    ["../x", "/etc/passwd", "a/../../x", "a/./b", "a//b", "a\x00b", "a/", "\ud800", "x" * 1025],
)
async def test_file_storage_refuses_keys_that_would_leave_the_root(
    tmp_path: Path, key: str
) -> None:
    storage = create_file_storage(tmp_path / "root")
    for call in (storage.set(key, 1), storage.get(key), storage.delete(key)):
        with pytest.raises(InvalidKeyError) as caught:
            await call
        assert "storage key" in caught.value.message
    await storage.close()
    assert _files_under(tmp_path) <= {"root"}


async def test_a_symlinked_directory_in_the_root_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text(json.dumps({"lwkv": 1, "value": "secret"}))
    storage = create_file_storage(tmp_path / "root")
    await storage.set("a/b", 1)
    (tmp_path / "root" / "a~" / "b").unlink()
    (tmp_path / "root" / "a~").rmdir()
    (tmp_path / "root" / "a~").symlink_to(outside)
    try:
        with pytest.raises(CorruptDataError):
            await storage.get("a/x")
        with pytest.raises(CorruptDataError):
            await storage.set("a/c", 2)
    finally:
        await storage.close()
    assert sorted(os.listdir(outside)) == ["x"]


async def test_a_symlinked_directory_is_not_written_deleted_or_listed_through(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text(json.dumps({"lwkv": 1, "value": "secret"}))
    storage = create_file_storage(tmp_path / "root")
    (tmp_path / "root" / "a~").symlink_to(outside)
    try:
        attempts: list[Callable[[], Awaitable[object]]] = [
            lambda: storage.delete("a/x"),
            lambda: storage.set("a/deeper/key", 1),
            lambda: storage.get("a/deeper/key"),
            lambda: storage.list("a/"),
            lambda: storage.list(""),
        ]
        for attempt in attempts:
            with pytest.raises(CorruptDataError):
                await attempt()
    finally:
        await storage.close()
    assert sorted(os.listdir(outside)) == ["x"]
    assert json.loads((outside / "x").read_text())["value"] == "secret"


async def test_a_symlinked_value_file_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"lwkv": 1, "value": "secret"}))
    storage = create_file_storage(tmp_path / "root")
    await storage.set("k", 1)
    (tmp_path / "root" / "k").unlink()
    (tmp_path / "root" / "k").symlink_to(secret)
    with pytest.raises(StorageError) as caught:
        await storage.get("k")
    await storage.close()
    assert "'k'" in caught.value.message


@pytest.mark.parametrize(
    "digest",
    [
        "",
        "..",
        "../" + "a" * 61,
        "/" + "a" * 63,
        "A" * 64,
        "a" * 63,
        "a" * 65,
        "a" * 63 + "\x00",
        "a" * 63 + "\n",
        "\uff41" * 64,
    ],
)
async def test_blob_digests_are_64_lowercase_hex_digits(tmp_path: Path, digest: str) -> None:
    blobs = FileBlobStore(tmp_path / "blobs")
    with pytest.raises(InvalidKeyError, match="is not a blob digest"):
        blobs.path(digest)
    with pytest.raises(InvalidKeyError):
        await blobs.get(digest)
    with pytest.raises(InvalidKeyError):
        await blobs.sweep([digest], grace=0)
    assert _files_under(tmp_path) <= {"blobs"}


@pytest.mark.parametrize("trick", PATH_TRICKS)
def test_artifact_names_are_file_names_and_export_stays_in_its_directory(
    tmp_path: Path, trick: str
) -> None:
    store = ArtifactStore(tmp_path / "data")
    name = f"r{trick}.txt"
    exports = tmp_path / "exports"
    exports.mkdir()
    try:
        manifest = store.put(name, b"content", run_id="run_1", step_path="s")
    except InvalidKeyError as exc:
        expect(exc.code == "invalid_artifact_name", exc)
        expect(set(name) & {"/", "\\"} or not name.isprintable() or "\ud800" in name, exc)
        return
    written = store.export(manifest.artifact_id, exports)
    assert written.parent == exports
    assert written.read_bytes() == b"content"
    assert [p.name for p in exports.iterdir()] == [name]


def test_an_edited_manifest_cannot_export_outside_the_directory(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "data")
    manifest = store.put("r.txt", b"content", run_id="run_1", step_path="s")
    path = tmp_path / "data" / "artifacts" / "manifests" / f"{manifest.artifact_id}.json"
    stored = json.loads(path.read_text())
    (tmp_path / "exports" / "inner").mkdir(parents=True)
    for name in ("../escaped.txt", "/tmp/escaped.txt", "..", "a\x00"):
        path.write_text(json.dumps({**stored, "name": name}))
        with pytest.raises(CorruptDataError) as caught:
            store.export(manifest.artifact_id, tmp_path / "exports" / "inner")
        assert caught.value.code == "corrupt_data"
        assert str(path) in caught.value.message
    assert _files_under(tmp_path / "exports") == {"inner"}


def test_export_over_a_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path / "data")
    manifest = store.put("r.txt", b"content")
    target = tmp_path / "precious"
    target.write_bytes(b"keep")
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(InvalidInputError) as caught:
        store.export(manifest.artifact_id, link)
    assert caught.value.code == "destination_exists"
    store.export(manifest.artifact_id, link, overwrite=True)
    assert target.read_bytes() == b"keep"
    assert not link.is_symlink()
    assert link.read_bytes() == b"content"


# --- the command line ----------------------------------------------------------------

CLI_COMMANDS = {
    "show": ["show", "{id}"],
    "events": ["events", "{id}"],
    "resume": ["resume", "{id}"],
    "retry": ["retry", "{id}"],
    "replay": ["replay", "{id}"],
    "cancel": ["cancel", "{id}"],
    "fork": ["fork", "{id}", "--at", "a"],
    "fork --run-id": ["fork", "run_1", "--at", "a", "--run-id", "{id}"],
    "loop-status": ["loop-status", "{id}"],
    "artifacts": ["artifacts", "{id}"],
    "export-artifact": ["export-artifact", "{id}", "{out}"],
    "answer": ["answer", "{id}", "p1", "text"],
    "clear": ["clear", "{id}", "--yes"],
}
CLI_IDS = ["../../etc/passwd", "/abs", "a\x00b", "a\\..\\b", "\uff52\uff55\uff4e", "run\u202e"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", sorted(CLI_COMMANDS))
def test_cli_commands_refuse_hostile_ids(tmp_path: Path, command: str) -> None:
    data = tmp_path / "data"
    runner = CliRunner()
    for ident in CLI_IDS:
        args = [a.format(id=ident, out=tmp_path / "out") for a in CLI_COMMANDS[command]]
        result = runner.invoke(cli, ["--data-dir", str(data), *args])
        assert result.exit_code == 3, (ident, result.output)
        assert "error: invalid_id: invalid " in result.output, result.output
    assert {p.name for p in tmp_path.iterdir()} <= {"data"}


@FUZZ
@given(path_tricks, st.lists(path_tricks, min_size=1, max_size=3).map("/".join))
async def test_memory_namespaces_and_keys_stay_under_the_store_root(
    tmp_path_factory: pytest.TempPathFactory, namespace: str, key: str
) -> None:
    base = tmp_path_factory.mktemp("memory")
    storage = create_file_storage(base / "root")
    memory = MemoryStore(storage, prefix="memory/")
    try:
        await memory.put(namespace, key, {"v": 1})
    except (InvalidIdError, InvalidKeyError) as exc:
        expect(exc.message.startswith(("invalid memory namespace", "memory key: ")), exc)
    else:
        assert await memory.get(namespace, key) == {"v": 1}
        for path in (base / "root").rglob("*"):
            assert path.resolve().is_relative_to((base / "root").resolve())
    finally:
        await storage.close()
    assert {p.name for p in base.iterdir()} <= {"root"}
