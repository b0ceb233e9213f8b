"""detached_spawn: returns at once with a handle; the parent is checkpointed when it settles."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from little_workflow.durable import create_checkpoint_store, snapshot_key
from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness import (
    AgentHarness,
    HarnessEnvironment,
    HarnessStorage,
    ModelSlot,
    agent,
)
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.platform import create_local_subprocess_adapter, manifest_key
from little_workflow.storage import create_file_storage, create_in_memory_storage
from tests.harness.durable_support import CountingStorage


def _harness(script: Any, storage: Any | None) -> AgentHarness:
    environment = (
        None
        if storage is None
        else HarnessEnvironment(
            storage=HarnessStorage(checkpoint_store=create_checkpoint_store(storage=storage))
        )
    )
    return AgentHarness(
        name="parent",
        agent_graph=agent(slot="m"),
        model_slots={"m": ModelSlot(provider=scripted(script), model="m")},
        environment=environment,
    )


async def test_it_returns_at_once_and_the_parent_is_checkpointed_when_it_settles() -> None:
    released = asyncio.Event()

    async def script(request: ModelRequest) -> str:
        await released.wait()
        return f"done: {request.messages[-1].content}"

    storage = CountingStorage(create_in_memory_storage())
    harness = _harness(script, storage)
    parent = harness.create_context(id="exec_parent")
    handle = harness.detached_spawn(
        agent(slot="m"), "research RL papers", parent, cwd_init="/tmp/w"
    )
    await asyncio.sleep(0)
    assert not handle.done()
    assert handle.context.parent is parent
    assert handle.context.cwd == "/tmp/w"
    assert handle.execution_id != parent.id
    parent_key = snapshot_key(parent.id)
    assert ("set", parent_key) not in storage.calls

    released.set()
    assert await handle.wait() == "done: research RL papers"
    assert handle.done()
    # The parent's snapshot was saved once the child settled; the child has its own.
    assert storage.calls.count(("set", parent_key)) == 1
    assert ("set", snapshot_key(handle.execution_id)) in storage.calls
    snapshot = await create_checkpoint_store(storage=storage).load(parent.id)
    assert snapshot is not None
    assert snapshot.execution_id == parent.id


async def test_a_failed_child_still_checkpoints_the_parent() -> None:
    def script(request: ModelRequest) -> Any:
        return ModelProviderError("overloaded", provider="scripted", status=529)

    storage = CountingStorage(create_in_memory_storage())
    harness = _harness(script, storage)
    parent = harness.create_context(id="exec_parent")
    handle = harness.detached_spawn(agent(slot="m"), "go", parent)
    with pytest.raises(ModelProviderError, match="overloaded"):
        await handle.wait()
    assert storage.calls.count(("set", snapshot_key(parent.id))) == 1


async def test_a_zero_config_harness_spawns_and_persists_nothing() -> None:
    harness = _harness(lambda request: "fine", None)
    parent = harness.create_context()
    handle = harness.detached_spawn(agent(slot="m"), "go", parent)
    assert await handle.wait() == "fine"
    assert harness.checkpoint_store is None


async def test_an_agent_object_is_refused_when_the_adapter_is_durable(tmp_path: Path) -> None:
    """Every detached spawn on a durable adapter lands a manifest; an object cannot (no
    process could import it), so it is refused rather than silently dying with the host."""
    manifests = create_file_storage(root=tmp_path / "subprocess")
    checkpoints = CountingStorage(create_in_memory_storage())
    harness = AgentHarness(
        name="parent",
        agent_graph=agent(slot="m"),
        model_slots={"m": ModelSlot(provider=scripted(lambda request: "fine"), model="m")},
        environment=HarnessEnvironment(
            subprocess=create_local_subprocess_adapter(storage=manifests),
            storage=HarnessStorage(checkpoint_store=create_checkpoint_store(storage=checkpoints)),
        ),
    )
    parent = harness.create_context(id="exec_parent")
    with pytest.raises(ConfigError, match=r"'package\.module:attr'") as refused:
        harness.detached_spawn(agent(slot="m"), "go", parent)
    assert refused.value.code == "detached_spawn_needs_reference"
    assert "parent" in refused.value.message
    assert await manifests.list("") == []
    assert checkpoints.calls == []
    # A reference through the same adapter lands its manifest.
    handle = harness.detached_spawn("tests.harness.spawn_targets:echo_harness", "hi", parent)
    assert await handle.wait() == "echo: hi"
    child = await handle.started()
    assert child is not None
    assert await manifests.get(manifest_key(child.handle_id)) is not None
