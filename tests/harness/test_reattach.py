"""``reattach_live_children`` with real OS children: each parent context on its own.

Two parent executions each start a long-lived child through the local adapter (real
processes, held until the test releases them); a second harness over the same stores
finds both children and restores both parents.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.durable import create_checkpoint_store, snapshot_key
from little_workflow.errors import ConfigError
from little_workflow.harness import (
    AgentHarness,
    Context,
    HarnessEnvironment,
    HarnessStorage,
    HistoryLayer,
    InstructionsLayer,
    ScratchpadLayer,
    SpawnHandle,
    reattach_live_children,
    sequence,
)
from little_workflow.harness.models import Message
from little_workflow.platform import create_local_subprocess_adapter
from little_workflow.storage import StorageAdapter, create_file_storage

HOLD = "little_workflow.testing.subprocess_targets:hold"


class MoodLayer:
    """A host's own layer: restoring it needs ``context=``."""

    id = "mood"

    def __init__(self) -> None:
        self.mood = "neutral"

    def render(self, ctx: Context) -> list[Message]:
        return [Message(role="system", content=f"Mood: {self.mood}")]

    def on_append(self, ctx: Context, items: Any) -> None:
        pass

    def state(self) -> JsonValue:
        return {"mood": self.mood}

    def load_state(self, state: JsonValue) -> None:
        if isinstance(state, dict) and isinstance(state.get("mood"), str):
            self.mood = str(state["mood"])


def layers() -> list[Any]:
    return [InstructionsLayer(), ScratchpadLayer(), HistoryLayer(), MoodLayer()]


@dataclass
class Host:
    root: Path
    checkpoints: StorageAdapter

    def harness(self) -> AgentHarness:
        """The same construction on every boot."""
        return AgentHarness(
            name="host",
            agent_graph=sequence([], id="idle"),
            environment=HarnessEnvironment(
                subprocess=create_local_subprocess_adapter(
                    storage=create_file_storage(root=self.root / "subprocess")
                ),
                storage=HarnessStorage(
                    checkpoint_store=create_checkpoint_store(storage=self.checkpoints)
                ),
            ),
        )


@pytest.fixture
async def spawned(tmp_path: Path) -> AsyncIterator[tuple[Host, dict[str, SpawnHandle]]]:
    """Two parents, ``exec_a`` and ``exec_b``, each with a live child (released at the end)."""
    host = Host(tmp_path, create_file_storage(root=tmp_path / "checkpoints"))
    first = host.harness()
    job = {"release": str(tmp_path / "release"), "starts": str(tmp_path / "starts")}
    handles: dict[str, SpawnHandle] = {}
    try:
        for name in ("a", "b"):
            parent = first.create_context(id=f"exec_{name}", layers=layers())
            parent.layers[0] = InstructionsLayer(f"Review {name}")
            scratchpad = parent.layer("scratchpad")
            assert isinstance(scratchpad, ScratchpadLayer)
            scratchpad.notes = [f"note {name}"]
            mood = parent.layer("mood")
            assert isinstance(mood, MoodLayer)
            mood.mood = f"mood {name}"
            handles[name] = first.detached_spawn(HOLD, job, parent)
            assert await handles[name].started() is not None
        yield host, handles
    finally:
        (tmp_path / "release").touch()
        for handle in handles.values():
            await handle.wait()


def described(ctx: Context) -> tuple[Any, ...]:
    instructions, scratchpad, _, mood = ctx.layers
    assert isinstance(instructions, InstructionsLayer)
    assert isinstance(scratchpad, ScratchpadLayer)
    assert isinstance(mood, MoodLayer)
    return ctx.id, instructions.text, scratchpad.notes, mood.mood


def child_of(spawned: dict[str, SpawnHandle], name: str) -> str:
    handle = spawned[name].subprocess
    assert handle is not None
    return handle.handle_id


@pytest.mark.parametrize("form", ["layers", "factory"])
async def test_each_execution_is_restored_with_layers_of_its_own(
    spawned: tuple[Host, dict[str, SpawnHandle]], form: str
) -> None:
    host, handles = spawned
    template = layers()
    found = await reattach_live_children(
        host.harness(), context=template if form == "layers" else layers
    )
    a, b = found.contexts[child_of(handles, "a")], found.contexts[child_of(handles, "b")]
    assert described(a) == ("exec_a", "Review a", ["note a"], "mood a")
    assert described(b) == ("exec_b", "Review b", ["note b"], "mood b")
    assert found.failed == {}
    assert not {id(layer) for layer in a.layers} & {id(layer) for layer in b.layers}
    # The layers passed are templates: nothing was loaded into them.
    assert described(Context(id="t", layers=template))[1:] == (None, [], "neutral")


async def test_a_snapshot_that_is_refused_is_reported_and_the_others_restored(
    spawned: tuple[Host, dict[str, SpawnHandle]],
) -> None:
    host, handles = spawned
    await host.checkpoints.set(
        snapshot_key("exec_b"), {"schemaVersion": 1, "executionId": "exec_b"}
    )
    found = await reattach_live_children(host.harness(), context=layers)
    a, b = child_of(handles, "a"), child_of(handles, "b")
    assert sorted(handle.handle_id for handle in found.handles) == sorted([a, b])
    assert list(found.contexts) == [a]
    assert described(found.contexts[a]) == ("exec_a", "Review a", ["note a"], "mood a")
    assert list(found.failed) == [b]
    error = found.failed[b]
    assert isinstance(error, ConfigError)
    assert error.code == "CHECKPOINT_SCHEMA_MISMATCH"
    assert "exec_b" in error.message


async def test_layers_that_cannot_be_copied_are_refused_before_any_restore(
    spawned: tuple[Host, dict[str, SpawnHandle]],
) -> None:
    host, _ = spawned
    uncopyable = MoodLayer()
    uncopyable.lock = __import__("threading").Lock()  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="pass context=a function"):
        await reattach_live_children(host.harness(), context=[*layers()[:3], uncopyable])
