"""Agents and code named by reference, run through a ``SubprocessAdapter`` (in process here).

The out-of-process runs of the same surfaces are in ``tests/platform``.
"""

from __future__ import annotations

from typing import Any

import pytest

from little_workflow.durable import create_checkpoint_store, snapshot_key
from little_workflow.errors import ConfigError, SubprocessError
from little_workflow.harness import (
    AgentHarness,
    HarnessEnvironment,
    HarnessStorage,
    reattach_live_children,
    run_code,
    sequence,
    spawn,
)
from little_workflow.platform import InProcessAdapter, SpawnSpec
from little_workflow.storage import create_in_memory_storage
from tests.harness import spawn_targets
from tests.harness.durable_support import CountingStorage


def _durable(storage: Any, adapter: Any = None) -> AgentHarness:
    return AgentHarness(
        name="host",
        agent_graph=sequence([], id="idle"),
        environment=HarnessEnvironment(
            storage=HarnessStorage(checkpoint_store=create_checkpoint_store(storage=storage)),
            subprocess=adapter,
        ),
    )


async def test_a_referenced_agent_runs_through_the_adapter_and_streams_its_items() -> None:
    storage = CountingStorage(create_in_memory_storage())
    harness = _durable(storage, InProcessAdapter())
    parent = harness.create_context(id="exec_parent", thread_id="t1")
    handle = harness.detached_spawn(
        "tests.harness.spawn_targets:echo_harness", "hello", parent, cwd_init="/tmp/w"
    )
    assert handle.context is None
    frames = [frame async for _, frame in handle.frames()]
    assert await handle.wait() == "echo: hello"
    texts = [
        item["message"]["content"]
        for frame in frames
        for item in frame["items"]  # type: ignore[index,union-attr]
    ]
    assert texts == ["hello", "echo: hello"]
    # Checkpointed before the child started (its manifest names this execution) and
    # again once it settled.
    assert storage.calls.count(("set", snapshot_key(parent.id))) == 2


async def test_a_referenced_graph_runs_in_a_harness_of_its_own() -> None:
    harness = _durable(create_in_memory_storage())
    parent = harness.create_context()
    handle = harness.detached_spawn("tests.harness.spawn_targets:code_graph", "quiet", parent)
    assert await handle.wait() == "QUIET"


async def test_bad_references_fail_the_caller_at_once() -> None:
    harness = _durable(create_in_memory_storage())
    parent = harness.create_context()
    with pytest.raises(ConfigError, match="no_such_module"):
        harness.detached_spawn("tests.harness.no_such_module:agent", None, parent)
    with pytest.raises(ConfigError, match=r"package\.module:attr"):
        harness.detached_spawn("tests.harness.spawn_targets:_reply", None, parent)
    with pytest.raises(ConfigError, match="by reference"):
        harness.detached_spawn(
            spawn_targets.code_graph, None, parent, subprocess=InProcessAdapter()
        )


async def test_a_referenced_function_is_a_background_worker() -> None:
    harness = _durable(create_in_memory_storage())
    handle = harness.detached_spawn(
        "tests.harness.spawn_targets:double", 21, harness.create_context()
    )
    assert [frame async for _, frame in handle.frames()] == [{"seen": 21}]
    assert await handle.wait() == 42


async def test_a_reference_to_something_else_fails_the_child() -> None:
    harness = _durable(create_in_memory_storage())
    handle = harness.detached_spawn(
        "tests.harness.spawn_targets:not_an_agent", 1, harness.create_context()
    )
    with pytest.raises(SubprocessError, match="AgentHarness, GraphStep or function") as caught:
        await handle.wait()
    assert caught.value.error_type == "ConfigError"


async def test_a_run_code_override_dispatches_every_run_through_the_adapter() -> None:
    adapter = InProcessAdapter()
    spawned: list[SpawnSpec] = []
    original = adapter.spawn

    async def spy(spec: SpawnSpec) -> Any:
        spawned.append(spec)
        return await original(spec)

    adapter.spawn = spy  # type: ignore[method-assign]
    harness = AgentHarness(
        name="host",
        agent_graph=run_code(spawn_targets.describe, id="describe", subprocess=adapter),
    )
    ctx = harness.create_context(id="exec_1", cwd="/srv")
    output = await harness.execute(ctx, "payload")
    assert output == {
        "input": "payload",
        "step": "describe",
        "execution": "exec_1",
        "cwd": "/srv",
        "metadata": {"path": "describe"},
    }
    assert await harness.execute(harness.create_context(id="exec_2"), "again")
    assert [spec.target for spec in spawned] == ["tests.harness.spawn_targets:describe"] * 2
    assert spawned[0].handle_id != spawned[1].handle_id


def test_a_run_code_override_needs_an_importable_function() -> None:
    with pytest.raises(ConfigError, match="no importable name"):
        run_code(lambda ctx, input: input, id="anon", subprocess=InProcessAdapter())

    def nested(ctx: Any, input: Any) -> Any:
        return input

    with pytest.raises(ConfigError, match="module level"):
        run_code(nested, subprocess=InProcessAdapter())
    with pytest.raises(ConfigError, match="by reference"):
        spawn(spawn_targets.code_graph, subprocess=InProcessAdapter())
    with pytest.raises(ConfigError, match="nowhere"):
        spawn("tests.harness.nowhere:agent")


async def test_a_spawn_step_runs_a_referenced_agent_through_its_override() -> None:
    harness = AgentHarness(
        name="host",
        agent_graph=spawn(
            "tests.harness.spawn_targets:code_graph",
            lambda ctx: "loud",
            id="child",
            subprocess=InProcessAdapter(),
        ),
    )
    assert await harness.execute(harness.create_context(), None) == "LOUD"


async def test_a_failing_target_fails_the_step() -> None:
    harness = AgentHarness(
        name="host",
        agent_graph=run_code(spawn_targets.explode, subprocess=InProcessAdapter()),
    )
    with pytest.raises(SubprocessError, match="ValueError: cannot handle 3") as caught:
        await harness.execute(harness.create_context(), 3)
    assert caught.value.code == "child_failed"
    assert isinstance(caught.value.__cause__, ValueError)


async def test_reattach_live_children_is_a_no_op_without_an_adapter() -> None:
    harness = _durable(create_in_memory_storage())
    found = await reattach_live_children(harness)
    assert found.handles == []
    assert found.contexts == {}
