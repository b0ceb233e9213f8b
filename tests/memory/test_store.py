"""``MemoryStore`` over every KV backend it may sit on, and where a runtime puts it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from little_workflow.errors import (
    CorruptDataError,
    InvalidIdError,
    InvalidKeyError,
    InvalidValueError,
    SchemaVersionError,
)
from little_workflow.memory import MemoryStore
from little_workflow.runtime import Runtime
from little_workflow.storage import ManagedStorage, create_file_storage, open_storage


@pytest.fixture(params=["file", "sqlite", "memory"])
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ManagedStorage]:
    kind = request.param
    if kind == "file":
        opened: ManagedStorage = create_file_storage(tmp_path / "memory")
    elif kind == "sqlite":
        opened = await open_storage(f"sqlite:///{tmp_path / 'kv.db'}")
    else:
        opened = await open_storage("memory://")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=["", "memory/"])
def memory(request: pytest.FixtureRequest, storage: ManagedStorage) -> MemoryStore:
    return MemoryStore(storage, prefix=request.param, clock=lambda: 1_000.0)


async def test_put_get_delete(memory: MemoryStore) -> None:
    assert await memory.get("agent-1", "prefs") is None
    entry = await memory.put("agent-1", "prefs", {"tone": "dry", "langs": ["en", "fr"]})
    assert entry.value == {"tone": "dry", "langs": ["en", "fr"]}
    assert await memory.get("agent-1", "prefs") == {"tone": "dry", "langs": ["en", "fr"]}
    await memory.put("agent-1", "prefs", "terse")
    assert await memory.get("agent-1", "prefs") == "terse"
    assert await memory.get("agent-2", "prefs") is None  # namespaces are separate
    await memory.delete("agent-1", "prefs")
    assert await memory.get("agent-1", "prefs") is None
    await memory.delete("agent-1", "prefs")  # forgetting twice is fine


async def test_a_null_value_is_remembered_as_null(memory: MemoryStore) -> None:
    await memory.put("ns", "nothing", None)
    entry = await memory.entry("ns", "nothing")
    assert entry is not None
    assert entry.value is None
    assert await memory.entry("ns", "absent") is None


async def test_list_by_prefix_and_namespaces(memory: MemoryStore) -> None:
    for key, value in [("task/2", 2), ("task/1", 1), ("note", "n")]:
        await memory.put("agent", key, value)
    await memory.put("other", "x", True)
    assert [(e.key, e.value) for e in await memory.list("agent")] == [
        ("note", "n"),
        ("task/1", 1),
        ("task/2", 2),
    ]
    assert [e.key for e in await memory.list("agent", prefix="task/")] == ["task/1", "task/2"]
    assert await memory.list("nobody") == []
    assert await memory.namespaces() == ["agent", "other"]


async def test_bound_store_records_the_writer(memory: MemoryStore) -> None:
    await memory.bound("run_7", "review[a].worker").put("ns", "k", 1)
    entry = await memory.entry("ns", "k")
    assert entry is not None
    assert (entry.run_id, entry.step_path, entry.updated_at) == ("run_7", "review[a].worker", 1000)
    assert entry.to_json()["runId"] == "run_7"
    await memory.put("ns", "k", 2)
    unbound = await memory.entry("ns", "k")
    assert unbound is not None
    assert (unbound.value, unbound.run_id) == (2, None)


@pytest.mark.parametrize("namespace", ["", "..", "a/b", "../x", "-dash", "nul\x00", "a" * 201])
async def test_hostile_namespaces_are_refused(memory: MemoryStore, namespace: str) -> None:
    with pytest.raises(InvalidIdError):
        await memory.put(namespace, "k", 1)
    with pytest.raises(InvalidIdError):
        await memory.list(namespace)
    assert await memory.namespaces() == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "../x", "a/..", "nul\x00", "x" * 1100])
async def test_hostile_keys_are_refused(memory: MemoryStore, key: str) -> None:
    with pytest.raises(InvalidKeyError):
        await memory.put("ns", key, 1)
    assert await memory.namespaces() == []


async def test_values_that_are_not_json_are_refused(memory: MemoryStore) -> None:
    for value in [float("nan"), b"bytes", object(), {1: "int key"}]:
        with pytest.raises(InvalidValueError):
            await memory.put("ns", "k", value)
    assert await memory.get("ns", "k") is None


async def test_foreign_and_future_entries_are_reported(storage: ManagedStorage) -> None:
    memory = MemoryStore(storage)
    await storage.set("ns/raw", {"not": "an envelope"})
    with pytest.raises(CorruptDataError):
        await memory.get("ns", "raw")
    await storage.set("ns/later", {"v": 2, "value": 1})
    with pytest.raises(SchemaVersionError):
        await memory.list("ns")


async def test_the_embedded_runtime_keeps_memory_in_files_under_memory(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Runtime(data) as rt:
        await rt.memory.put("agent", "fact", {"sky": "blue"})
    files = [path for path in (data / "memory").rglob("*") if path.is_file()]
    assert len(files) == 1
    assert json.loads(files[0].read_text())["value"]["value"] == {"sky": "blue"}
    async with Runtime(data) as rt:  # another process, as after a kill
        assert await rt.memory.get("agent", "fact") == {"sky": "blue"}


async def test_a_runtime_with_a_store_url_keeps_memory_in_that_store(tmp_path: Path) -> None:
    data = tmp_path / "data"
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    async with Runtime(data, store=url) as rt:
        await rt.memory.put("agent", "fact", 42)
        assert await rt.kv.get("memory/agent/fact") is not None
    assert not [path for path in (data / "memory").rglob("*") if path.is_file()]
    kv = await open_storage(url)
    try:
        assert await MemoryStore(kv, prefix="memory/").get("agent", "fact") == 42
    finally:
        await kv.close()
