"""A failing fsync (``EIO``) under every kind of write, through a fault-injecting layer.

``failing_fsync(pattern)`` (``tests/faults/disk.py``) makes ``os.fsync`` fail for the
files and directories whose path holds ``pattern``; everything else is real. The write
must fail with a ``StorageError`` naming the file, keep the previous version, leave no
temp file, and succeed once fsync works again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore
from little_workflow.durable import create_checkpoint_store
from little_workflow.errors import StorageError
from little_workflow.events import RunStatus
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime
from little_workflow.storage import create_file_storage
from tests.faults.disk import failing_fsync, temp_files
from tests.faults.killer import EXECUTION_ID, snapshot

BIG = 300_000  # over the inline limit: the result goes to a blob file first

FLOW = Workflow(
    name="failing-fsync",
    steps=[
        ExecuteStep(id="first", fn="t:first"),
        ExecuteStep(id="big", fn="t:big"),
        OutputStep(id="out", value="${steps.big.output}"),
    ],
)


async def test_a_snapshot_save(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    store = create_checkpoint_store(storage=create_file_storage(root))
    await store.save(snapshot(1))
    with (
        failing_fsync(str(root)) as hit,
        pytest.raises(StorageError, match="Input/output error") as caught,
    ):
        await store.save(snapshot(2))
    assert hit
    assert str(root / f"execution:{EXECUTION_ID}:snapshot") in str(caught.value)
    assert await store.load(EXECUTION_ID) == snapshot(1)
    assert temp_files(root) == []
    await store.save(snapshot(2))
    assert await store.load(EXECUTION_ID) == snapshot(2)


def test_an_artifact_write(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    first = store.put("report.txt", b"version 1\n", run_id="run-1", step_path="write")
    with failing_fsync(str(store.root / "objects")), pytest.raises(StorageError) as caught:
        store.put("report.txt", b"version 2\n", run_id="run-1", step_path="write")
    assert "Input/output error" in str(caught.value)
    assert str(store.root / "objects") in str(caught.value)
    assert store.read_bytes(first.artifact_id) == b"version 1\n"
    assert temp_files(store.root) == []
    store.put("report.txt", b"version 2\n", run_id="run-1", step_path="write")
    assert store.read_bytes(first.artifact_id) == b"version 2\n"


def test_a_manifest_replace(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    first = store.put("notes", b"same bytes", media_type="text/plain", run_id="run-1")
    manifest = store.root / "manifests" / f"{first.artifact_id}.json"
    before = manifest.read_bytes()
    with failing_fsync(str(manifest.parent)), pytest.raises(StorageError) as caught:
        store.put("notes", b"same bytes", media_type="text/markdown", run_id="run-1")
    assert str(manifest) in str(caught.value)
    assert manifest.read_bytes() == before
    assert temp_files(store.root) == []
    store.put("notes", b"same bytes", media_type="text/markdown", run_id="run-1")
    assert store.get(first.artifact_id).media_type == "text/markdown"


async def test_an_append_of_a_large_result_then_the_run_resumes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    calls: list[str] = []

    def first() -> int:
        calls.append("first")
        return 1

    def big() -> str:
        calls.append("big")
        return "z" * BIG

    functions = {"t:first": first, "t:big": big}
    async with Runtime(data, functions=functions) as rt:
        with failing_fsync(str(data / "blobs")) as hit, pytest.raises(StorageError) as caught:
            await rt.run(FLOW, {}, run_id="run-eio")
        assert hit
        assert str(data / "blobs") in str(caught.value)
        records = await rt.events.read("run-eio")
        assert [record.type for record in records].count("StepCompleted") == 1
    assert [path for path in (data / "blobs").rglob("*") if path.is_file()] == []
    async with Runtime(data, functions=functions) as rt:
        result = await rt.resume("run-eio")
    assert result.status is RunStatus.COMPLETED
    assert result.output == "z" * BIG
    assert calls == ["first", "big", "big"]
