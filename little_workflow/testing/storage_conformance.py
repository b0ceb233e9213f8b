"""The conformance suite every ``StorageAdapter`` backend must pass, unchanged.

Use it by subclassing in a test module and providing two fixtures::

    class TestMyStore(StorageAdapterConformance):
        @pytest.fixture
        async def storage(self):       # a fresh, empty store
            ...
        @pytest.fixture
        def storage_url(self):         # a URL another process can open to reach the
            ...                        # same store, or None if it cannot be shared

A backend is done when the whole class passes. Tests needing ``storage_url`` skip
with a reason for a store that cannot be shared (the in-memory one).
"""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidKeyError, InvalidValueError
from little_workflow.storage import ManagedStorage, open_storage, read_many

__all__ = ["HOSTILE_KEYS", "StorageAdapterConformance"]

#: Keys that must be refused by every backend, with nothing written.
HOSTILE_KEYS: tuple[str, ...] = (
    "",
    "../x",
    "a/../../b",
    "/etc/passwd",
    "a\x00b",
    ".",
    "..",
    "a//b",
    "a/",
    "a/./b",
    "line\nbreak",
    "bad\ud800surrogate",
    "k" * 1025,
)

ODD_KEYS: tuple[str, ...] = (
    "a/b/c",
    "execution:exec_1:ledger:0000000001",
    "with space/and more spaces",
    "ünïcødé/日本語/ключ",
    "emoji 🚀:key",
    "percent%20and~tilde",
    "dots.in.names/.hidden",
    "back\\slash",
    "x" * 200,
)

VALUES: tuple[JsonValue, ...] = (
    0,
    -1,
    2**63 + 1,
    1.5,
    -0.25,
    True,
    False,
    "",
    "text",
    "ünïcødé 🚀 \\ \" '",
    [],
    {},
    [1, "two", 3.0, None, [False]],
    {"nested": {"deep": [{"k": None}], "n": 1}, "z": "last", "a": "first"},
)


def _need_url(url: str | None) -> str:
    if url is None:
        pytest.skip("this backend cannot be shared with another process")
    return url


def _spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "little_workflow.testing._child", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class StorageAdapterConformance:
    """Every behaviour a ``StorageAdapter`` promises (see the module docstring)."""

    async def test_missing_key_reads_none(self, storage: ManagedStorage) -> None:
        assert await storage.get("nothing/here") is None

    @pytest.mark.parametrize("value", VALUES, ids=repr)
    async def test_values_round_trip(self, storage: ManagedStorage, value: JsonValue) -> None:
        await storage.set("v", value)
        assert await storage.get("v") == value
        assert type(await storage.get("v")) is type(value)

    async def test_set_replaces(self, storage: ManagedStorage) -> None:
        await storage.set("k", {"version": 1})
        await storage.set("k", {"version": 2})
        assert await storage.get("k") == {"version": 2}
        assert await storage.list("k") == ["k"]

    async def test_delete(self, storage: ManagedStorage) -> None:
        await storage.set("k", 1)
        await storage.delete("k")
        assert await storage.get("k") is None
        assert await storage.list("") == []
        await storage.delete("k")  # deleting a missing key is not an error

    async def test_stored_value_is_a_copy(self, storage: ManagedStorage) -> None:
        value: dict[str, Any] = {"items": [1, 2]}
        await storage.set("k", value)
        value["items"].append(3)
        read = await storage.get("k")
        assert read == {"items": [1, 2]}
        assert isinstance(read, dict)
        read["items"] = "changed"
        assert await storage.get("k") == {"items": [1, 2]}

    async def test_tuples_come_back_as_lists(self, storage: ManagedStorage) -> None:
        await storage.set("k", (1, (2, 3)))  # type: ignore[arg-type]
        assert await storage.get("k") == [1, [2, 3]]

    @pytest.mark.parametrize(
        "value",
        [None, float("nan"), float("inf"), b"bytes", {1: "int key"}, {"s": {1, 2}}, object()],
        # An object's repr holds its address: the same in every process, or test
        # collection differs between parallel workers.
        ids=lambda value: "object()" if type(value) is object else repr(value),
    )
    async def test_non_json_values_are_refused(self, storage: ManagedStorage, value: Any) -> None:
        await storage.set("existing", "kept")
        with pytest.raises(InvalidValueError):
            await storage.set("k", value)
        with pytest.raises(InvalidValueError):
            await storage.set("existing", value)
        assert await storage.get("k") is None
        assert await storage.get("existing") == "kept"
        assert await storage.list("") == ["existing"]

    @pytest.mark.parametrize("key", ODD_KEYS)
    async def test_odd_keys_round_trip(self, storage: ManagedStorage, key: str) -> None:
        await storage.set(key, {"key": key})
        assert await storage.get(key) == {"key": key}
        assert await storage.list("") == [key]
        assert await storage.list(key) == [key]
        assert await storage.get_many([key]) == {key: {"key": key}}
        await storage.delete(key)
        assert await storage.list("") == []

    @pytest.mark.parametrize("key", HOSTILE_KEYS, ids=repr)
    async def test_hostile_keys_are_refused_and_write_nothing(
        self, storage: ManagedStorage, key: str
    ) -> None:
        with pytest.raises(InvalidKeyError):
            await storage.set(key, "x")
        with pytest.raises(InvalidKeyError):
            await storage.get(key)
        with pytest.raises(InvalidKeyError):
            await storage.delete(key)
        with pytest.raises(InvalidKeyError):
            await storage.get_many(["fine", key])
        assert await storage.list("") == []

    async def test_non_string_keys_are_refused(self, storage: ManagedStorage) -> None:
        with pytest.raises(InvalidKeyError):
            await storage.set(1, "x")  # type: ignore[arg-type]
        with pytest.raises(InvalidKeyError):
            await storage.list(None)  # type: ignore[arg-type]

    async def test_get_many_leaves_missing_keys_out(self, storage: ManagedStorage) -> None:
        await storage.set("a", 1)
        await storage.set("c", {"three": 3})
        result = await storage.get_many(["a", "b", "c", "a"])
        assert result == {"a": 1, "c": {"three": 3}}
        assert "b" not in result
        assert await storage.get_many([]) == {}
        assert await storage.get_many(["x", "y"]) == {}

    async def test_get_many_of_many_keys(self, storage: ManagedStorage) -> None:
        keys = [f"execution:e:ledger:{i:06d}" for i in range(1500)]
        for index, key in enumerate(keys[::2]):
            await storage.set(key, {"i": index})
        result = await storage.get_many(keys)
        assert sorted(result) == keys[::2]
        assert result[keys[2]] == {"i": 1}
        assert await read_many(storage, keys[:4]) == {keys[0]: {"i": 0}, keys[2]: {"i": 1}}

    async def test_list_prefix_is_exact(self, storage: ManagedStorage) -> None:
        keys = ["a", "a/b", "a/b/c", "a:b", "ab", "b", "a b", "x_1", "xa1", "50%", "5000"]
        for key in keys:
            await storage.set(key, key)
        assert await storage.list("") == sorted(keys)
        assert await storage.list("a") == sorted(["a", "a/b", "a/b/c", "a:b", "ab", "a b"])
        assert await storage.list("a/") == ["a/b", "a/b/c"]
        assert await storage.list("a/b") == ["a/b", "a/b/c"]
        assert await storage.list("a/b/") == ["a/b/c"]
        assert await storage.list("a:") == ["a:b"]
        assert await storage.list("x_") == ["x_1"]
        assert await storage.list("50%") == ["50%"]
        assert await storage.list("zz") == []
        assert await storage.list("../") == []
        assert await storage.list("/") == []
        assert await storage.list("a//") == []

    async def test_list_is_sorted_by_code_point(self, storage: ManagedStorage) -> None:
        keys = ["é", "z", "Z", "a", "日", "a b", "a/b", "a:b", "~"]
        for key in keys:
            await storage.set(key, 1)
        assert await storage.list("") == sorted(keys)

    async def test_large_value(self, storage: ManagedStorage) -> None:
        value: JsonValue = {"blob": "x" * 2_000_000, "list": list(range(10_000))}
        await storage.set("big", value)
        assert await storage.get("big") == value

    async def test_concurrent_tasks(self, storage: ManagedStorage) -> None:
        await asyncio.gather(*(storage.set(f"t/{i:03d}", i) for i in range(100)))
        values = await asyncio.gather(*(storage.get(f"t/{i:03d}") for i in range(100)))
        assert values == list(range(100))
        assert len(await storage.list("t/")) == 100

    async def test_random_operations_match_a_dict(self, storage: ManagedStorage) -> None:
        rng = random.Random(20261129)
        model: dict[str, JsonValue] = {}
        alphabet = ["a", "b", "a/b", "a/c", "b:1", "ü", "a b"]
        for step in range(400):
            key = rng.choice(alphabet) + rng.choice(["", "/x", ":1", "/y/z"])
            operation = rng.random()
            if operation < 0.5:
                value: JsonValue = {"step": step, "tags": [key] * rng.randint(0, 3)}
                await storage.set(key, value)
                model[key] = value
            elif operation < 0.7:
                await storage.delete(key)
                model.pop(key, None)
            elif operation < 0.85:
                assert await storage.get(key) == model.get(key)
            else:
                prefix = key[: rng.randint(0, len(key))]
                expected = sorted(k for k in model if k.startswith(prefix))
                assert await storage.list(prefix) == expected
        assert await storage.get_many(alphabet + list(model)) == model

    async def test_values_survive_reopen(
        self, storage: ManagedStorage, storage_url: str | None
    ) -> None:
        url = _need_url(storage_url)
        await storage.set("persist/me", {"n": 1})
        reopened = await open_storage(url)
        try:
            assert await reopened.get("persist/me") == {"n": 1}
            assert await reopened.list("persist/") == ["persist/me"]
        finally:
            await reopened.close()

    async def test_two_processes_lose_nothing(
        self, storage: ManagedStorage, storage_url: str | None
    ) -> None:
        url = _need_url(storage_url)
        count = 150
        writers = [_spawn("kv-write", url, name, str(count)) for name in ("w1", "w2")]
        loop = asyncio.get_running_loop()
        results = await asyncio.gather(
            *(loop.run_in_executor(None, writer.communicate, None) for writer in writers)
        )
        for writer, (_out, err) in zip(writers, results, strict=True):
            assert writer.returncode == 0, err
        for name in ("w1", "w2"):
            keys = await storage.list(f"{name}/")
            assert keys == [f"{name}/{i:05d}" for i in range(count)]
            values = await storage.get_many(keys)
            assert values == {f"{name}/{i:05d}": {"writer": name, "i": i} for i in range(count)}
        # Both wrote every shared key; each must hold one writer's complete value.
        shared = await storage.get_many([f"shared/{i:05d}" for i in range(count)])
        assert len(shared) == count
        for index in range(count):
            value = shared[f"shared/{index:05d}"]
            assert value in ({"writer": "w1", "i": index}, {"writer": "w2", "i": index})
