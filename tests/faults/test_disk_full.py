"""A full disk (a real one: a tmpfs of 8 MiB, filled) under every kind of write.

Each test commits something, fills the disk, and makes the next write: it must fail with
a ``StorageError`` naming the file, leave what was committed before readable and nothing
half-written (no temp file left behind, no partial value, the SQLite file intact), and
succeed once the space is back. See ``tests/faults/disk.py`` for the mechanism.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore
from little_workflow.durable import create_checkpoint_store
from little_workflow.errors import CorruptDataError, StorageError
from little_workflow.events import RunStatus
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime
from little_workflow.storage import create_file_storage
from tests.faults.disk import SmallDisk, temp_files
from tests.faults.killer import EXECUTION_ID, snapshot
from tests.storage.raw_sqlite import event_json

FLOW = Workflow(
    name="full-disk",
    steps=[
        ExecuteStep(id="first", fn="t:first"),
        ExecuteStep(id="big", fn="t:big", with_={"size": "${input.size}"}),
        ExecuteStep(id="last", fn="t:last"),
        OutputStep(id="out", value={"big": "${steps.big.output}", "last": "${steps.last.output}"}),
    ],
)


class Steps:
    """The flow's functions; ``big`` fills the disk the first time, before it returns."""

    def __init__(self, disk: SmallDisk) -> None:
        self.disk = disk
        self.calls: list[str] = []

    def first(self) -> int:
        self.calls.append("first")
        return 1

    def big(self, size: int) -> str:
        self.calls.append("big")
        if self.calls.count("big") == 1:
            self.disk.fill()
        return "y" * size

    def last(self) -> int:
        self.calls.append("last")
        return 3

    def functions(self) -> dict[str, Callable[..., object]]:
        return {"t:first": self.first, "t:big": self.big, "t:last": self.last}


def sqlite_rows(db: Path) -> list[tuple[str, str | None]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        (check,) = conn.execute("PRAGMA integrity_check").fetchone()
        assert check == "ok"
        return [
            (kind, event_json(data).get("stepPath"))
            for kind, data in conn.execute("SELECT type, data FROM events ORDER BY seq")
        ]
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("size", "where"),
    [
        # A small result goes into the event log: SQLite's COMMIT meets the full disk.
        (2_000, "little-workflow.db"),
        # A large one goes to a blob file first, which meets it.
        (300_000, "blobs"),
    ],
)
async def test_an_append_fails_typed_and_the_run_resumes_once_space_is_back(
    small_disk: SmallDisk, size: int, where: str
) -> None:
    data = small_disk.path / "data"
    steps = Steps(small_disk)
    async with Runtime(data, functions=steps.functions()) as rt:
        with pytest.raises(StorageError) as caught:
            await rt.run(FLOW, {"size": size}, run_id="run-full")
        assert type(caught.value) is StorageError
        assert caught.value.code == "storage_error"
        assert where in str(caught.value)
        assert str(data) in str(caught.value)
        # What was committed before is readable; nothing of the failed commit is.
        committed = [record.type for record in await rt.events.read("run-full")]
        assert committed.count("StepCompleted") == 1
    assert ("StepCompleted", "big") not in sqlite_rows(data / "little-workflow.db")
    assert temp_files(data) == []

    small_disk.free()
    async with Runtime(data, functions=steps.functions()) as rt:
        result = await rt.resume("run-full")
        assert result.status is RunStatus.COMPLETED
        assert result.output == {"big": "y" * size, "last": 3}
    # ``first`` was committed and is not called again; ``big`` was in flight.
    assert steps.calls == ["first", "big", "big", "last"]
    completed = [
        path for kind, path in sqlite_rows(data / "little-workflow.db") if kind == "StepCompleted"
    ]
    assert completed == ["first", "big", "last"]


async def test_a_snapshot_save_fails_typed_and_the_previous_one_stays(
    small_disk: SmallDisk,
) -> None:
    root = small_disk.path / "checkpoints"
    store = create_checkpoint_store(storage=create_file_storage(root))
    await store.save(snapshot(1))
    small_disk.fill()
    with pytest.raises(StorageError, match="No space left on device") as caught:
        await store.save(snapshot(2))
    assert not isinstance(caught.value, CorruptDataError)
    assert str(root / f"execution:{EXECUTION_ID}:snapshot") in str(caught.value)
    assert await store.load(EXECUTION_ID) == snapshot(1)
    assert temp_files(root) == []
    small_disk.free()
    await store.save(snapshot(2))
    assert await store.load(EXECUTION_ID) == snapshot(2)


def test_an_artifact_write_fails_typed_and_the_previous_version_stays(
    small_disk: SmallDisk,
) -> None:
    store = ArtifactStore(small_disk.path)
    first = store.put("report.txt", b"version 1\n", run_id="run-1", step_path="write")
    small_disk.fill()
    with pytest.raises(StorageError, match="No space left on device") as caught:
        store.put("report.txt", b"version 2\n" * 1000, run_id="run-1", step_path="write")
    assert str(store.root / "objects") in str(caught.value)
    assert store.get(first.artifact_id) == first
    assert store.read_bytes(first.artifact_id) == b"version 1\n"
    assert temp_files(store.root) == []
    objects = [path.name for path in (store.root / "objects").rglob("*") if path.is_file()]
    assert objects == [first.sha256]  # an empty new shard directory may stay; no file
    small_disk.free()
    second = store.put("report.txt", b"version 2\n" * 1000, run_id="run-1", step_path="write")
    assert store.read_bytes(second.artifact_id) == b"version 2\n" * 1000


def test_a_manifest_replace_fails_typed_and_the_previous_manifest_stays(
    small_disk: SmallDisk,
) -> None:
    store = ArtifactStore(small_disk.path)
    first = store.put("notes", b"same bytes", media_type="text/plain", run_id="run-1")
    small_disk.fill()
    # The same content under another media type: the object is there, only the manifest
    # is replaced.
    with pytest.raises(StorageError, match="No space left on device") as caught:
        store.put("notes", b"same bytes", media_type="text/markdown", run_id="run-1")
    assert str(store.root / "manifests" / f"{first.artifact_id}.json") in str(caught.value)
    assert store.get(first.artifact_id).media_type == "text/plain"
    assert temp_files(store.root) == []
    small_disk.free()
    again = store.put("notes", b"same bytes", media_type="text/markdown", run_id="run-1")
    assert store.get(again.artifact_id).media_type == "text/markdown"
