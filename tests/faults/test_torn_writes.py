"""Torn writes: a real child process SIGKILLed between the write of a file and its rename.

Every file the program replaces by write-then-rename is covered: file-storage values,
checkpoint snapshots, memory entries, IPC queue records, subprocess manifests (all
through ``storage/_file.py``), blobs (``storage/_blobs_file.py``), artifact objects and
manifests and outer-loop manifests (``platform/_atomic.py``). The child
(``tests/faults/killer.py``) writes a first version whole, then a second one, and dies
at the armed point: before the rename (the temp file written and fsynced), or halfway
through writing the temp file. The test then checks, in its own process, that the
previous version is intact and readable through the library, that no temp file is
taken for data, and that the next write succeeds.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore, artifact_id_for
from little_workflow.durable import create_checkpoint_store
from little_workflow.memory import open_memory
from little_workflow.platform import SpawnSpec, create_local_subprocess_adapter
from little_workflow.platform.ipc import create_durable_outbound_queue
from little_workflow.storage import FileBlobStore, blob_digest, create_file_storage
from tests.faults.disk import temp_files
from tests.faults.killer import (
    ARTIFACT,
    DESCRIBE,
    EXECUTION_ID,
    FIRST_BLOB,
    HANDLE_ID,
    KV_KEY,
    QUEUE_SOCKET,
    SECOND_BLOB,
    snapshot,
)
from tests.runtime.outer_support import CALLS_ENV, DONE_AT_ENV, FLOW, SUPERVISE, manifest_file

REPO = Path(__file__).resolve().parents[2]

#: Where to kill: before the second rename of the file, or halfway through its write.
MODES = ("before-rename", "mid-write")


def kill_child(scenario: str, root: Path, *kill: str, env: dict[str, str] | None = None) -> None:
    """Run the scenario in a child armed with ``kill``; it must die by SIGKILL."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.killer", scenario, str(root), *kill],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == -signal.SIGKILL, (result.returncode, result.stderr)


def arm(mode: str, pattern: str, rename: int, write: int) -> tuple[str, str]:
    """The child's switch: the ``rename``-th rename to ``pattern``, or the ``write``-th write."""
    if mode == "before-rename":
        return ("--before-rename", f"{pattern}#{rename}")
    return ("--mid-write", str(write))


@pytest.mark.parametrize("mode", MODES)
async def test_a_file_storage_value(tmp_path: Path, mode: str) -> None:
    kill_child("kv", tmp_path, *arm(mode, "value", 2, 2))
    storage = create_file_storage(tmp_path / "kv")
    assert await storage.get(KV_KEY) == {"version": 1}
    assert await storage.list("") == [KV_KEY]  # the dead writer's temp file is no key
    assert len(temp_files(tmp_path / "kv")) == 1
    await storage.set(KV_KEY, {"version": 3})
    assert await storage.get(KV_KEY) == {"version": 3}


@pytest.mark.parametrize("mode", MODES)
async def test_a_checkpoint_snapshot(tmp_path: Path, mode: str) -> None:
    kill_child("checkpoint", tmp_path, *arm(mode, "snapshot", 2, 2))
    store = create_checkpoint_store(storage=create_file_storage(tmp_path / "checkpoints"))
    assert await store.load(EXECUTION_ID) == snapshot(1)
    await store.save(snapshot(3))
    assert await store.load(EXECUTION_ID) == snapshot(3)


@pytest.mark.parametrize("mode", MODES)
async def test_a_memory_entry(tmp_path: Path, mode: str) -> None:
    kill_child("memory", tmp_path, *arm(mode, "topic", 2, 2))
    store, _files = open_memory(tmp_path / "memory", None)
    assert await store.get("notes", "topic") == {"version": 1}
    assert [entry.key for entry in await store.list("notes")] == ["topic"]
    await store.put("notes", "topic", {"version": 3})
    assert await store.get("notes", "topic") == {"version": 3}


@pytest.mark.parametrize("mode", MODES)
async def test_an_ipc_queue_record(tmp_path: Path, mode: str) -> None:
    # Writes: frame 1, meta 1, frame 2, meta 2. Killed at meta 2 (or mid-way through
    # frame 2): seq 2 was never handed out, and the queue reopens at seq 1.
    kill_child("queue", tmp_path, *arm(mode, "meta", 2, 3))
    storage = create_file_storage(tmp_path / "queue")
    queue = await create_durable_outbound_queue(storage=storage, socket_path=QUEUE_SOCKET)
    assert queue.last_seq == 1
    assert [entry.frame for entry in await queue.frame_range(1)] == ['{"frame":1}']
    assert await queue.append('{"frame":"again"}') == 2
    reopened = await create_durable_outbound_queue(storage=storage, socket_path=QUEUE_SOCKET)
    frames = [(entry.seq, entry.frame) for entry in await reopened.frame_range(1)]
    assert frames == [(1, '{"frame":1}'), (2, '{"frame":"again"}')]


@pytest.mark.parametrize("mode", MODES)
async def test_a_blob(tmp_path: Path, mode: str) -> None:
    kill_child("blob", tmp_path, *arm(mode, "blobs", 2, 2))
    store = FileBlobStore(tmp_path / "blobs")
    first, second = blob_digest(FIRST_BLOB), blob_digest(SECOND_BLOB)
    assert await store.get(first) == FIRST_BLOB
    # Content-addressed: the previous version of a blob that was never whole is none.
    assert not await store.has(second)
    assert [info.digest for info in await store.list()] == [first]
    await store.put(SECOND_BLOB)
    assert await store.get(second) == SECOND_BLOB


@pytest.mark.parametrize(
    ("mode", "pattern", "write"),
    [
        # Writes: object 1, manifest 1, object 2, manifest 2.
        ("before-rename", "objects", 3),
        ("before-rename", "manifests", 4),
        ("mid-write", "objects", 3),
        ("mid-write", "manifests", 4),
    ],
)
def test_an_artifact_object_and_manifest(
    tmp_path: Path, mode: str, pattern: str, write: int
) -> None:
    kill_child("artifact", tmp_path, *arm(mode, pattern, 2, write))
    name, run_id, step = ARTIFACT
    store = ArtifactStore(tmp_path)
    artifact_id = artifact_id_for(run_id, step, name)
    assert store.get(artifact_id).size == len(b"version 1\n")
    assert store.read_bytes(artifact_id) == b"version 1\n"
    assert [manifest.artifact_id for manifest in store.list()] == [artifact_id]
    store.put(name, b"version 3\n", run_id=run_id, step_path=step)
    assert store.read_bytes(artifact_id) == b"version 3\n"


@pytest.mark.parametrize("mode", MODES)
async def test_a_subprocess_manifest(tmp_path: Path, mode: str) -> None:
    # The host writes the manifest before the launch and again once the child listens;
    # it dies at the second write, with its child already running (in its own session).
    # Writes into temp files: the manifest, the child's status and queue records (from
    # another process, not counted here), then the manifest again.
    kill_child("subprocess", tmp_path, *arm(mode, f"subprocess:handle:{HANDLE_ID}", 2, 2))
    storage = create_file_storage(tmp_path / "subprocess")
    adapter = create_local_subprocess_adapter(
        storage=storage, runtime_dir=str(tmp_path / "runtime"), linger=0.5
    )
    value = await storage.get(f"subprocess:handle:{HANDLE_ID}")
    assert isinstance(value, dict)
    assert value["process"] is None  # the version written before the launch, whole
    handle = await adapter.reattach(HANDLE_ID)
    assert handle is not None
    try:
        result = await handle.wait()
    finally:
        await handle.close()
    assert isinstance(result, dict)
    assert result["handle"] == HANDLE_ID
    assert result["input"] == {"n": 1}
    # The next write of the manifest, a new spawn under the same id once the first child
    # has exited (it lingers until its last frame is acked), succeeds whole.
    for _ in range(200):
        if not handle.is_alive():
            break
        await asyncio.sleep(0.05)
    again = await adapter.spawn(SpawnSpec(target=DESCRIBE, input={"n": 2}, handle_id=HANDLE_ID))
    try:
        assert (await again.wait())["input"] == {"n": 2}  # type: ignore[call-overload,index]
    finally:
        await again.close()
    value = await storage.get(f"subprocess:handle:{HANDLE_ID}")
    assert isinstance(value, dict)
    assert value["process"] is not None


def test_an_outer_loop_manifest(tmp_path: Path) -> None:
    data, calls = tmp_path / "data", tmp_path / "calls"
    loop_id = "ol_torn"
    args = [
        "--data-dir",
        str(data),
        "loop",
        str(FLOW),
        "--input",
        json.dumps({"topic": "tea"}),
        "--max-cycles",
        "3",
        "--supervise",
        SUPERVISE,
        "--outer-loop-id",
        loop_id,
    ]
    env = {CALLS_ENV: str(calls), DONE_AT_ENV: "2"}
    path = manifest_file(data, loop_id)
    # The third write records cycle 1's answer; killed before its rename.
    kill_child("cli", tmp_path, "--before-rename", f"{loop_id}.json#3", "--", *args, env=env)
    before = json.loads(path.read_text())
    assert before["cycles"] == []
    assert before["pendingCycleRunId"] is not None
    resumed = subprocess.run(
        [sys.executable, "-m", "little_workflow", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads(path.read_text())
    assert [cycle["cycleNumber"] for cycle in after["cycles"]] == [1, 2]
    assert after["cycles"][0]["runId"] == before["pendingCycleRunId"]
    assert after["result"] is not None
