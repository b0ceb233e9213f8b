"""``restore()``: the context rebuilt from its snapshot, its options, and what it refuses.

The restored context's id is the execution id; its item log, layers and working
directory come from the snapshot, and its frontier says where to resume. An unknown
schema version (a version-1 snapshot with the old layer ids included) raises
``CHECKPOINT_SCHEMA_MISMATCH``; ``RestoreContextOptions`` takes ``parent``, ``state`` and
``context`` only, applied first, the snapshot's values overwriting them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, CorruptDataError
from little_workflow.harness import (
    AgentHarness,
    Context,
    ContextLayer,
    HistoryLayer,
    InstructionsLayer,
    RestoreContextOptions,
    ScratchpadLayer,
    default_layers,
    tool,
)
from little_workflow.harness.models import Message
from little_workflow.storage import ManagedStorage, create_in_memory_storage
from little_workflow.testing import SimulatedKill
from tests.harness.durable_support import (
    BACKENDS,
    durable_harness,
    item_log,
    make_tools,
    open_backend,
)


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ManagedStorage]:
    store = await open_backend(request, request.param, tmp_path)
    yield store
    await store.close()


class Crash(SimulatedKill):
    """Stands for the process dying inside a tool: nothing after it runs."""


def crashing_tools(calls: list[str]) -> list[Any]:
    lookup, _ = make_tools(None, calls)

    @tool
    def score(years: int) -> int:
        """Score years of experience.

        Args:
            years: Years.
        """
        calls.append(f"tool score {years}")
        raise Crash

    return [lookup, score]


def prepared_context(harness: AgentHarness, execution_id: str) -> Context:
    """A context with every snapshot-owned field set."""
    ctx = harness.create_context(
        id=execution_id, thread_id="t_1", resource_id="r_1", instructions="Be brief", cwd="/w/b"
    )
    ctx.previous_cwd = "/w/a"
    scratch = ctx.layer("scratchpad")
    assert isinstance(scratch, ScratchpadLayer)
    scratch.notes.append("remember Ada")
    history = ctx.layer("history")
    assert isinstance(history, HistoryLayer)
    history.window = 40
    return ctx


async def crashed_execution(storage: ManagedStorage, execution_id: str) -> Context:
    """An execution that died in its second tool call: model turns 0 and 1 recorded."""
    harness = durable_harness(storage, tools=crashing_tools([]))
    ctx = prepared_context(harness, execution_id)
    with pytest.raises(Crash):
        await harness.execute(ctx, "Ada")
    return ctx


async def test_restore_rebuilds_the_context(storage: ManagedStorage) -> None:
    original = await crashed_execution(storage, "exec_restore")
    restored = await durable_harness(storage).restore("exec_restore")

    assert restored is not None
    assert restored.id == "exec_restore"
    assert (restored.thread_id, restored.resource_id) == ("t_1", "r_1")
    assert item_log(restored) == item_log(original)
    assert [item["message"]["role"] for item in item_log(restored)] == [  # type: ignore[index, call-overload]
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [layer.id for layer in restored.layers] == ["instructions", "scratchpad", "history"]
    assert [layer.state() for layer in restored.layers] == [
        layer.state() for layer in original.layers
    ]
    assert restored.render() == original.render()
    assert (restored.cwd, restored.previous_cwd) == ("/w/b", "/w/a")
    assert restored.ask_user == []
    # The frontier: the root with the execution's input, down to the step that died.
    assert restored.frontier == [
        ("agent", "Ada"),
        ("agent.turns", None),
        ("agent.turns[1].tools", None),
    ]
    assert original.frontier == restored.frontier


async def test_restore_returns_none_without_a_snapshot(storage: ManagedStorage) -> None:
    assert await durable_harness(storage).restore("exec_never") is None
    assert await durable_harness(storage).resume("exec_never") is None


async def test_a_restored_context_completes_like_an_uncrashed_one(storage: ManagedStorage) -> None:
    await crashed_execution(storage, "exec_again")
    calls: list[str] = []
    harness = durable_harness(storage, tools=make_tools(None, calls))
    ctx = await harness.restore("exec_again")
    assert ctx is not None
    # execute() without input continues from the frontier; recorded steps replay.
    assert await harness.execute(ctx) == "Ada scores 70"
    assert calls == ["tool score 7"]  # only the call that died
    assert ctx.frontier == []

    reference = durable_harness(create_in_memory_storage())
    uncrashed = prepared_context(reference, "exec_again")
    await reference.execute(uncrashed, "Ada")
    assert item_log(ctx) == item_log(uncrashed)


# --- schema versions --------------------------------------------------------------------


def snapshot(**fields: JsonValue) -> dict[str, JsonValue]:
    value: dict[str, JsonValue] = {
        "schemaVersion": 2,
        "executionId": "exec_old",
        "frontier": [],
        "layers": {},
        "cwd": None,
        "askUser": [],
        "itemLog": {"items": []},
        "capturedAt": "2025-01-01T00:00:00+00:00",
    }
    value.update(fields)
    return value


V1_LAYERS: dict[str, JsonValue] = {
    "working-context": {"notes": []},
    "static-content": {"text": "Be brief"},
    "history-window": {"window": 20},
}


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(snapshot(schemaVersion=3), id="newer"),
        pytest.param(snapshot(schemaVersion="2"), id="a-string"),
        pytest.param({k: v for k, v in snapshot().items() if k != "schemaVersion"}, id="none"),
        pytest.param(snapshot(schemaVersion=1, layers=V1_LAYERS), id="version-1"),
        pytest.param(snapshot(layers=V1_LAYERS), id="version-1-layer-ids-labelled-2"),
        pytest.param(snapshot(layers={"history-window": {}}), id="one-version-1-layer"),
    ],
)
async def test_an_unknown_schema_is_refused_without_migration(
    storage: ManagedStorage, stored: dict[str, JsonValue]
) -> None:
    harness = durable_harness(storage)
    await storage.set("execution:exec_old:snapshot", stored)
    with pytest.raises(ConfigError) as raised:
        await harness.restore("exec_old")
    assert raised.value.code == "CHECKPOINT_SCHEMA_MISMATCH"
    assert "clear_checkpoint" in raised.value.message
    with pytest.raises(ConfigError):
        await harness.resume("exec_old")
    # The way out the error names: discard, start fresh.
    await harness.clear_checkpoint("exec_old")
    assert await harness.restore("exec_old") is None


# --- options ----------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["items", "thread_id", "resource_id", "cwd"])
async def test_snapshot_owned_fields_are_refused_at_the_call(field: str) -> None:
    harness = durable_harness(create_in_memory_storage())
    with pytest.raises(TypeError):
        RestoreContextOptions(**{field: None})
    with pytest.raises(TypeError):
        await harness.restore("exec_x", **{field: None})
    with pytest.raises(TypeError, match="RestoreContextOptions"):
        await harness.restore("exec_x", {field: None})  # type: ignore[arg-type]


async def test_caller_options_apply_first_and_the_snapshot_wins(storage: ManagedStorage) -> None:
    await crashed_execution(storage, "exec_wired")
    parent = Context(id="exec_parent")
    queue: list[str] = []
    caller_layers: list[ContextLayer] = [
        InstructionsLayer("caller's text"),
        ScratchpadLayer(),
        HistoryLayer(3),
    ]
    restored = await durable_harness(storage).restore(
        "exec_wired",
        RestoreContextOptions(parent=parent, state={"queue": queue}, context=caller_layers),
    )
    assert restored is not None
    # The caller's wiring is on the context...
    assert restored.parent is parent
    assert restored.state == {"queue": queue}
    assert restored.state["queue"] is queue
    assert all(a is b for a, b in zip(restored.layers, caller_layers, strict=True))
    # ...and the snapshot's values overwrote the layers' states.
    assert [layer.state() for layer in restored.layers] == [
        {"text": "Be brief"},
        {"notes": ["remember Ada"]},
        {"window": 40},
    ]
    assert restored.id == "exec_wired"
    assert (restored.thread_id, restored.resource_id, restored.cwd) == ("t_1", "r_1", "/w/b")


class Notes:
    """A layer of the host's own."""

    id = "notes"

    def __init__(self) -> None:
        self.lines: list[str] = []

    def render(self, ctx: Context) -> list[Message]:
        return [Message(role="system", content="\n".join(self.lines))] if self.lines else []

    def on_append(self, ctx: Context, items: Any) -> None:
        pass

    def state(self) -> JsonValue:
        return {"lines": list(self.lines)}

    def load_state(self, state: JsonValue) -> None:
        assert isinstance(state, dict)
        lines = state["lines"]
        assert isinstance(lines, list)
        self.lines = [str(line) for line in lines]


async def test_a_snapshot_layer_the_context_lacks_is_refused_not_dropped(
    storage: ManagedStorage,
) -> None:
    harness = durable_harness(storage)
    notes = Notes()
    notes.lines.append("customer prefers email")
    ctx = harness.create_context(id="exec_layers", layers=[notes, HistoryLayer()])
    await harness.execute(ctx, "Ada")

    with pytest.raises(ConfigError) as raised:
        await harness.restore("exec_layers")
    assert raised.value.code == "CHECKPOINT_LAYERS_MISSING"
    assert "'notes'" in raised.value.message
    with pytest.raises(ConfigError, match="'notes'"):
        await harness.restore(
            "exec_layers", RestoreContextOptions(context=[InstructionsLayer(), HistoryLayer()])
        )

    restored = await harness.restore(
        "exec_layers", RestoreContextOptions(context=[Notes(), HistoryLayer()])
    )
    assert restored is not None
    assert restored.render() == ctx.render()
    assert restored.layers[0].state() == {"lines": ["customer prefers email"]}


async def test_without_context_the_snapshot_layers_are_rebuilt_as_they_were(
    storage: ManagedStorage,
) -> None:
    harness = durable_harness(storage)
    ctx = harness.create_context(
        id="exec_two_layers", layers=[HistoryLayer(window=40), InstructionsLayer("Last")]
    )
    await harness.execute(ctx, "Ada")
    restored = await harness.restore("exec_two_layers")
    assert restored is not None
    assert [layer.id for layer in restored.layers] == ["history", "instructions"]
    assert restored.render() == ctx.render()


async def test_a_snapshot_item_that_is_not_an_item_is_corrupt() -> None:
    storage = create_in_memory_storage()
    await storage.set(
        "execution:exec_bad:snapshot", snapshot(executionId="exec_bad", itemLog={"items": [1]})
    )
    with pytest.raises(CorruptDataError, match="exec_bad"):
        await durable_harness(storage).restore("exec_bad")


async def test_a_zero_config_harness_restores_nothing() -> None:
    harness = AgentHarness(
        name="plain",
        agent_graph=durable_harness(create_in_memory_storage()).agent_graph,
        model_slots={},
    )
    assert await harness.restore("exec_any") is None
    assert await harness.restore("exec_any", RestoreContextOptions(state=1)) is None


@pytest.mark.parametrize("layer_id", ["history-window", "working-context", "static-content"])
async def test_a_layer_with_a_version_1_id_is_refused_where_it_is_registered(
    storage: ManagedStorage, layer_id: str
) -> None:
    """Its snapshot would be refused on every restore (the ids mark version-1 snapshots),
    so the layer is refused before anything is saved."""
    harness = durable_harness(storage)

    def reserved() -> Notes:
        layer = Notes()
        layer.id = layer_id  # type: ignore[misc]
        return layer

    with pytest.raises(ConfigError, match=f"layer '{layer_id}' \\(Notes\\)") as refused:
        harness.create_context(id="exec_reserved", layers=[reserved(), HistoryLayer()])
    assert refused.value.code == "reserved_layer_id"
    with pytest.raises(ConfigError, match=layer_id):
        Context(id="exec_reserved", layers=[reserved()])
    # Added after construction: the execution refuses it before running or saving.
    ctx = harness.create_context(id="exec_reserved")
    ctx.layers.append(reserved())
    with pytest.raises(ConfigError, match=layer_id) as refused:
        await harness.execute(ctx, "Ada")
    assert refused.value.code == "reserved_layer_id"
    assert await storage.list("execution:exec_reserved") == []
    await harness.checkpoint(ctx)
    assert await storage.list("execution:exec_reserved") == []
    # Nor can a restore be handed one.
    ctx.layers.pop()
    await harness.execute(ctx, "Ada")
    with pytest.raises(ConfigError, match=layer_id):
        await harness.restore(
            "exec_reserved", RestoreContextOptions(context=[*default_layers(), reserved()])
        )
