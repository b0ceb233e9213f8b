"""``ArtifactStore`` on a real directory: content by hash, manifests, replay ids, refusals."""

from __future__ import annotations

import hashlib
import json
import stat
from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore, artifact_id_for
from little_workflow.errors import (
    ArtifactNotFoundError,
    CorruptDataError,
    InvalidIdError,
    InvalidInputError,
    InvalidKeyError,
    InvalidValueError,
    SchemaVersionError,
)


class Clock:
    """A clock that moves one second per reading."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


def _store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "data", clock=Clock())


def _files(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


def test_put_stores_content_by_hash_and_a_manifest(tmp_path: Path) -> None:
    store = _store(tmp_path)
    data = b"# Findings\n\nAll good.\n"
    manifest = store.put("report.md", data, run_id="run_1", step_path="review[a].write")
    digest = hashlib.sha256(data).hexdigest()
    assert (manifest.name, manifest.sha256, manifest.size) == ("report.md", digest, len(data))
    assert manifest.media_type == "text/markdown"
    assert (manifest.run_id, manifest.step_path) == ("run_1", "review[a].write")
    root = tmp_path / "data" / "artifacts"
    assert (root / "objects" / digest[:2] / digest).read_bytes() == data
    on_disk = json.loads((root / "manifests" / f"{manifest.artifact_id}.json").read_text())
    assert on_disk == {"format": 1, **manifest.to_json()}
    assert set(manifest.to_json()) == {
        "artifactId",
        "name",
        "sha256",
        "size",
        "mediaType",
        "runId",
        "stepPath",
        "createdAt",
    }
    assert store.get(manifest.artifact_id) == manifest
    assert store.read_bytes(manifest.artifact_id) == data


def test_directories_are_0700_and_files_0600(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put("a.txt", b"a", run_id="run_1", step_path="s")
    root = tmp_path / "data" / "artifacts"
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), path


def test_media_type_is_guessed_from_the_name_unless_given(tmp_path: Path) -> None:
    store = _store(tmp_path)
    assert store.put("data.json", b"{}").media_type == "application/json"
    assert store.put("blob.zzunknown", b"?").media_type == "application/octet-stream"
    assert store.put("notes", b"x", media_type="text/plain").media_type == "text/plain"
    with pytest.raises(InvalidValueError):
        store.put("notes", b"x", media_type="not a type")


def test_identical_bytes_are_stored_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.put("one.txt", b"same", run_id="run_1", step_path="a")
    second = store.put("two.txt", b"same", run_id="run_2", step_path="b")
    assert first.artifact_id != second.artifact_id
    assert first.sha256 == second.sha256
    objects = _files(tmp_path / "data" / "artifacts" / "objects")
    assert len(objects) == 1
    assert len(store.list()) == 2


def test_a_step_putting_again_gets_the_same_artifact(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.put("out.txt", b"v1", run_id="run_1", step_path="write")
    again = store.put("out.txt", b"v1", run_id="run_1", step_path="write")
    assert again == first  # unchanged, the original time included
    assert first.artifact_id == artifact_id_for("run_1", "write", "out.txt")
    # A re-run that computed other bytes replaces what its uncommitted attempt wrote.
    changed = store.put("out.txt", b"v2", run_id="run_1", step_path="write")
    assert changed.artifact_id == first.artifact_id
    assert store.read_bytes(first.artifact_id) == b"v2"
    assert [m.artifact_id for m in store.list("run_1")] == [first.artifact_id]
    # Elsewhere in the run, or in another run, it is another artifact.
    other_step = store.put("out.txt", b"v1", run_id="run_1", step_path="write.visit[1]")
    other_run = store.put("out.txt", b"v1", run_id="run_2", step_path="write")
    assert len({first.artifact_id, other_step.artifact_id, other_run.artifact_id}) == 3


def test_outside_a_run_every_put_is_a_new_artifact(tmp_path: Path) -> None:
    store = _store(tmp_path)
    first = store.put("x.txt", b"x")
    second = store.put("x.txt", b"x")
    assert first.artifact_id != second.artifact_id
    assert [m.artifact_id for m in store.list()] == [first.artifact_id, second.artifact_id]


def test_list_is_oldest_first_and_filters_by_run(tmp_path: Path) -> None:
    store = _store(tmp_path)
    made = [
        store.put(f"{n}.txt", str(n).encode(), run_id=run, step_path="s")
        for n, run in enumerate(["run_b", "run_a", "run_b"])
    ]
    assert store.list() == made
    assert store.list("run_b") == [made[0], made[2]]
    assert store.list("run_none") == []
    assert store.find("run_b", "2.txt") == made[2]
    assert store.find("run_b", "1.txt") is None
    assert ArtifactStore(tmp_path / "empty").list() == []


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "a/b", "../escape", "/etc/passwd", "a\\b", "nul\x00byte", "x" * 256, "é" * 128],
)
def test_hostile_names_are_refused_and_nothing_is_written(tmp_path: Path, name: str) -> None:
    store = _store(tmp_path)
    with pytest.raises(InvalidKeyError) as raised:
        store.put(name, b"data", run_id="run_1", step_path="s")
    assert raised.value.code == "invalid_artifact_name"
    assert not (tmp_path / "data").exists()


def test_bad_ids_paths_and_data_are_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(InvalidIdError):
        store.put("a.txt", b"a", run_id="../run")
    with pytest.raises(InvalidValueError):
        store.put("a.txt", b"a", run_id="run_1", step_path="bad\x00path")
    with pytest.raises(InvalidValueError):
        store.put("a.txt", "text, not bytes")  # type: ignore[arg-type]
    assert not (tmp_path / "data").exists()
    with pytest.raises(InvalidIdError):
        store.get("../../etc/passwd")
    with pytest.raises(ArtifactNotFoundError):
        store.get("art_missing")
    with pytest.raises(ArtifactNotFoundError):
        store.read_bytes("art_missing")


def test_altered_content_is_a_corruption_error_naming_the_file(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.put("a.txt", b"original", run_id="run_1", step_path="s")
    blob = tmp_path / "data" / "artifacts" / "objects" / manifest.sha256[:2] / manifest.sha256
    blob.write_bytes(b"0riginal")
    with pytest.raises(CorruptDataError) as raised:
        store.read_bytes(manifest.artifact_id)
    assert str(blob) in raised.value.message
    blob.unlink()
    with pytest.raises(CorruptDataError, match="missing"):
        store.read_bytes(manifest.artifact_id)


def test_broken_manifests_are_reported_not_skipped(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.put("a.txt", b"a", run_id="run_1", step_path="s")
    path = tmp_path / "data" / "artifacts" / "manifests" / f"{manifest.artifact_id}.json"
    stored = json.loads(path.read_text())
    path.write_text(json.dumps({**stored, "format": 99}))
    with pytest.raises(SchemaVersionError):
        store.get(manifest.artifact_id)
    path.write_text(json.dumps(stored)[:-5])
    with pytest.raises(CorruptDataError, match=str(path)):
        store.list()
    path.write_text(json.dumps({**stored, "size": "big"}))
    with pytest.raises(CorruptDataError):
        store.get(manifest.artifact_id)


def test_a_writer_killed_mid_put_leaves_nothing_visible(tmp_path: Path) -> None:
    store = _store(tmp_path)
    kept = store.put("kept.txt", b"kept", run_id="run_1", step_path="s")
    manifests = tmp_path / "data" / "artifacts" / "manifests"
    # What a kill leaves: an atomic_write temp file, or an object no manifest names yet.
    (manifests / ".~art_x.json.0123456789abcdef").write_text('{"format": 1, "half')
    orphan = hashlib.sha256(b"orphan").hexdigest()
    (tmp_path / "data" / "artifacts" / "objects" / orphan[:2]).mkdir()
    (tmp_path / "data" / "artifacts" / "objects" / orphan[:2] / orphan).write_bytes(b"orphan")
    assert store.list() == [kept]


def test_export_writes_the_checked_content(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.put("report.md", b"# hi\n", run_id="run_1", step_path="s")
    target = tmp_path / "out" / "copy.md"
    target.parent.mkdir()
    assert store.export(manifest.artifact_id, target) == target
    assert target.read_bytes() == b"# hi\n"
    into_dir = store.export(manifest.artifact_id, tmp_path / "out")
    assert into_dir == tmp_path / "out" / "report.md"
    assert into_dir.read_bytes() == b"# hi\n"
    target.write_bytes(b"mine")
    with pytest.raises(InvalidInputError) as raised:
        store.export(manifest.artifact_id, target)
    assert raised.value.code == "destination_exists"
    assert target.read_bytes() == b"mine"
    store.export(manifest.artifact_id, target, overwrite=True)
    assert target.read_bytes() == b"# hi\n"


def test_export_of_corrupt_content_writes_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path)
    manifest = store.put("a.txt", b"good", run_id="run_1", step_path="s")
    blob = tmp_path / "data" / "artifacts" / "objects" / manifest.sha256[:2] / manifest.sha256
    blob.write_bytes(b"evil")
    with pytest.raises(CorruptDataError):
        store.export(manifest.artifact_id, tmp_path / "a.txt")
    assert not (tmp_path / "a.txt").exists()
