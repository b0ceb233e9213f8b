"""Corrupt files on disk: truncated, a flipped byte, the wrong JSON.

Each file is written whole through the library, then damaged on disk the way a failing
disk or a careless hand would; the next read through the library must raise
``CorruptDataError`` naming the file (or the run), and leave the file as it found it:
never skipped, never overwritten. Covered: the event log (its rows and the SQLite file
itself), checkpoint snapshots, memory entries, IPC queue records, subprocess manifests
and artifact manifests. (Outer-loop manifests: ``tests/runtime/test_outer_loop_manifests.py``;
blobs: ``tests/storage/test_payloads.py``; artifact objects: ``tests/artifacts``.)

A flipped byte is flipped where it breaks the JSON (the first byte): a flip inside a
string value of a JSON file leaves valid JSON, which only the hash-addressed files
(blobs, artifact objects) can tell from the original.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore
from little_workflow.durable import create_checkpoint_store
from little_workflow.errors import CorruptDataError
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.memory import open_memory
from little_workflow.platform import SpawnSpec, create_local_subprocess_adapter
from little_workflow.platform.ipc import create_durable_outbound_queue
from little_workflow.runtime import Runtime
from little_workflow.storage import create_file_storage
from tests.faults.killer import DESCRIBE, EXECUTION_ID, HANDLE_ID, QUEUE_SOCKET, snapshot
from tests.storage.raw_sqlite import event_text


def truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


def flipped(data: bytes) -> bytes:
    return bytes([data[0] ^ 0x01]) + data[1:]


#: The fields that say which format a file is in: kept by ``wrong_json``, so that what
#: is wrong is the content, not the version (another version is a ``SchemaVersionError``).
VERSION_FIELDS = ("lwkv", "format", "version", "v", "schemaVersion")


def wrong_json(data: bytes) -> bytes:
    """Valid JSON of the wrong shape, in the file's own format version (and envelope)."""

    def wrong(value: object) -> dict[str, object]:
        kept = (
            {k: v for k, v in value.items() if k in VERSION_FIELDS}
            if isinstance(value, dict)
            else {}
        )
        return {**kept, "unexpected": True}

    document = json.loads(data)
    if isinstance(document, dict) and "lwkv" in document:
        return json.dumps({"lwkv": document["lwkv"], "value": wrong(document["value"])}).encode()
    return json.dumps(wrong(document)).encode()


def unversioned(data: bytes) -> bytes:
    """The same record without its format version field (damage, not another version)."""
    document = json.loads(data)
    record = document["value"] if "lwkv" in document else document
    for field in VERSION_FIELDS:
        record.pop(field, None)
    return json.dumps(document).encode()


DAMAGE: dict[str, Callable[[bytes], bytes]] = {
    "truncated": truncated,
    "flipped": flipped,
    "wrong-json": wrong_json,
}
#: For the records that carry a format version (checkpoints keep the seed's
#: CHECKPOINT_SCHEMA_MISMATCH for a missing one).
VERSIONED_DAMAGE = {**DAMAGE, "unversioned": unversioned}


def damage(path: Path, kind: str) -> bytes:
    """Damage ``path`` in place; its new bytes."""
    data = VERSIONED_DAMAGE[kind](path.read_bytes())
    path.write_bytes(data)
    return data


def only_file(root: Path, name: str) -> Path:
    (found,) = [path for path in root.rglob(name) if path.is_file()]
    return found


@pytest.mark.parametrize("kind", sorted(DAMAGE))
async def test_a_snapshot(tmp_path: Path, kind: str) -> None:
    root = tmp_path / "checkpoints"
    store = create_checkpoint_store(storage=create_file_storage(root))
    await store.save(snapshot(1))
    path = only_file(root, f"execution:{EXECUTION_ID}:snapshot")
    data = damage(path, kind)
    with pytest.raises(CorruptDataError) as caught:
        await store.load(EXECUTION_ID)
    assert caught.value.code == "corrupt_data"
    # The file when it is not a value at all; the key (the execution) when the value is
    # not a snapshot: the checkpoint store does not know where its storage keeps a key.
    assert f"execution:{EXECUTION_ID}:snapshot" in str(caught.value)
    if kind != "wrong-json":
        assert str(path) in str(caught.value)
    assert path.read_bytes() == data


@pytest.mark.parametrize("kind", sorted(DAMAGE))
async def test_a_memory_entry(tmp_path: Path, kind: str) -> None:
    store, _files = open_memory(tmp_path / "memory", None)
    await store.put("notes", "topic", {"version": 1})
    path = only_file(tmp_path / "memory", "topic")
    data = damage(path, kind)
    for read in (lambda: store.get("notes", "topic"), lambda: store.list("notes")):
        with pytest.raises(CorruptDataError, match="topic") as caught:
            await read()
        if kind != "wrong-json":  # as for snapshots: the key, and the file if not a value
            assert str(path) in str(caught.value)
    assert path.read_bytes() == data


@pytest.mark.parametrize(
    ("record", "kind"),
    [("meta", kind) for kind in sorted(VERSIONED_DAMAGE)]
    + [("frame:0000000001", kind) for kind in sorted(DAMAGE)],
)
async def test_an_ipc_queue_record(tmp_path: Path, kind: str, record: str) -> None:
    storage = create_file_storage(tmp_path / "queue")
    queue = await create_durable_outbound_queue(storage=storage, socket_path=QUEUE_SOCKET)
    await queue.append('{"frame":1}')
    path = only_file(tmp_path / "queue", f"{queue.key_prefix}{record}")
    data = damage(path, kind)

    async def reopen() -> None:
        reopened = await create_durable_outbound_queue(storage=storage, socket_path=QUEUE_SOCKET)
        await reopened.frame_range(1)

    with pytest.raises(CorruptDataError) as caught:
        await reopen()
    assert f"{queue.key_prefix}{record}" in str(caught.value)
    assert path.read_bytes() == data


@pytest.fixture(scope="module")
def spawned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A subprocess adapter's storage after one finished child (made once, copied per test)."""
    root = tmp_path_factory.mktemp("spawned")

    async def spawn() -> None:
        adapter = create_local_subprocess_adapter(
            storage=create_file_storage(root / "subprocess"),
            runtime_dir=str(root / "runtime"),
            linger=0.1,
        )
        handle = await adapter.spawn(SpawnSpec(target=DESCRIBE, handle_id=HANDLE_ID))
        try:
            await handle.wait()
        finally:
            await handle.close()

    asyncio.run(spawn())
    return root / "subprocess"


@pytest.mark.parametrize("kind", sorted(VERSIONED_DAMAGE))
async def test_a_subprocess_manifest(tmp_path: Path, spawned: Path, kind: str) -> None:
    root = tmp_path / "subprocess"
    shutil.copytree(spawned, root)
    storage = create_file_storage(root)
    adapter = create_local_subprocess_adapter(storage=storage, runtime_dir=str(tmp_path / "rt"))
    path = only_file(root, f"subprocess:handle:{HANDLE_ID}")
    data = damage(path, kind)
    for read in (lambda: adapter.reattach(HANDLE_ID), adapter.list_live):
        with pytest.raises(CorruptDataError) as caught:
            await read()
        assert f"subprocess:handle:{HANDLE_ID}" in str(caught.value)
    assert path.read_bytes() == data


@pytest.mark.parametrize("kind", sorted(VERSIONED_DAMAGE))
def test_an_artifact_manifest(tmp_path: Path, kind: str) -> None:
    store = ArtifactStore(tmp_path)
    made = store.put("report.txt", b"version 1\n", run_id="run-1", step_path="write")
    path = store.root / "manifests" / f"{made.artifact_id}.json"
    data = damage(path, kind)
    with pytest.raises(CorruptDataError) as by_id:
        store.get(made.artifact_id)
    with pytest.raises(CorruptDataError) as listed:
        store.list()
    for error in (by_id.value, listed.value):
        assert str(path) in str(error)
    assert path.read_bytes() == data


# --- the event log ------------------------------------------------------------------------

FLOW = Workflow(
    name="corrupt-log",
    steps=[
        ExecuteStep(id="one", fn="t:one"),
        ExecuteStep(id="two", fn="t:two"),
        OutputStep(id="out", value="${steps.two.output}"),
    ],
)
FUNCTIONS = {"t:one": lambda: 1, "t:two": lambda: 2}


def rows(db: Path) -> list[tuple[int, str, str]]:
    conn = sqlite3.connect(db)
    try:
        return [
            (seq, kind, event_text(data))
            for seq, kind, data in conn.execute(
                "SELECT seq, type, data FROM events ORDER BY run_id, seq"
            )
        ]
    finally:
        conn.close()


async def unfinished_run(data_dir: Path) -> None:
    """A run with ``one`` completed: a crash after the step's commit, as a user meets it."""
    async with Runtime(data_dir, functions=FUNCTIONS) as rt:
        await rt.run(FLOW, {}, run_id="run-1")
    conn = sqlite3.connect(data_dir / "little-workflow.db")
    try:
        with conn:
            conn.execute("DELETE FROM events WHERE run_id = 'run-1' AND seq > 3")
    finally:
        conn.close()


@pytest.mark.parametrize("kind", sorted(DAMAGE))
async def test_an_event_row(tmp_path: Path, kind: str) -> None:
    data_dir = tmp_path / "data"
    await unfinished_run(data_dir)
    db = data_dir / "little-workflow.db"
    conn = sqlite3.connect(db)
    try:
        with conn:
            (text,) = conn.execute(
                "SELECT data FROM events WHERE run_id = 'run-1' AND seq = 3"
            ).fetchone()
            damaged = DAMAGE[kind](event_text(text).encode()).decode("utf-8", "replace")
            conn.execute(
                "UPDATE events SET data = ? WHERE run_id = 'run-1' AND seq = 3", (damaged,)
            )
    finally:
        conn.close()
    before = rows(db)
    async with Runtime(data_dir, functions=FUNCTIONS) as rt:
        with pytest.raises(CorruptDataError) as resumed:
            await rt.resume("run-1")
        with pytest.raises(CorruptDataError) as read:
            await rt.events.read("run-1")
    for error in (resumed.value, read.value):
        assert "run 'run-1' seq 3" in str(error)
    assert rows(db) == before


def damage_database(db: Path, kind: str) -> bytes:
    for suffix in ("-wal", "-shm"):
        assert not Path(f"{db}{suffix}").exists()  # checkpointed at close: all in the file
    # Truncated to half its pages, or its header's magic string flipped.
    return damage(db, kind)


@pytest.mark.parametrize("kind", ["truncated", "flipped"])
async def test_the_sqlite_file(tmp_path: Path, kind: str) -> None:
    data_dir = tmp_path / "data"
    await unfinished_run(data_dir)
    db = data_dir / "little-workflow.db"
    damaged = damage_database(db, kind)
    with pytest.raises(CorruptDataError) as caught:
        async with Runtime(data_dir, functions=FUNCTIONS) as rt:
            await rt.resume("run-1")
    assert str(db) in str(caught.value)
    assert db.read_bytes() == damaged
