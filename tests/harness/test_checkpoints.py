"""Checkpoints: opt-in, the schema-v2 snapshot, when snapshots fire, failing saves.

A zero-config harness writes nothing anywhere; a harness with a checkpoint store keeps
one snapshot per execution (overwritten), taken after an ``execute()`` that changed the
item log, when an ask-user prompt is queued, after ``run_append_pipeline()`` and on an
explicit ``checkpoint()``. The seed's fourth trigger, ``detached_spawn()`` settling (and,
for a child named by reference, starting), is tested in ``test_detached_spawn`` and
``test_spawn_references``.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.durable import (
    CHECKPOINT_SCHEMA_VERSION,
    CheckpointSnapshot,
    CheckpointStore,
    StepLedger,
    create_checkpoint_store,
)
from little_workflow.errors import AwaitingAnswerError, CorruptDataError
from little_workflow.harness import (
    AgentHarness,
    Context,
    HistoryLayer,
    Item,
    ModelSlot,
    ScratchpadLayer,
    agent,
    ask_user,
    run_code,
    sequence,
    spawn,
)
from little_workflow.harness.models import Message
from little_workflow.storage import ManagedStorage, create_in_memory_storage
from tests.harness.durable_support import (
    BACKENDS,
    CountingStorage,
    FailingSaves,
    LoggedProvider,
    durable_harness,
    item_log,
    make_tools,
    open_backend,
)

SEED_FIELDS = {
    "schemaVersion",
    "executionId",
    "threadId",
    "resourceId",
    "frontier",
    "layers",
    "cwd",
    "askUser",
    "itemLog",
    "capturedAt",
}


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ManagedStorage]:
    store = await open_backend(request, request.param, tmp_path)
    yield store
    await store.close()


def snapshot_saves(counting: CountingStorage, execution_id: str) -> int:
    return sum(1 for name, key in counting.calls if name == "set" and key.endswith(":snapshot"))


# --- opt-in -----------------------------------------------------------------------------


async def test_a_zero_config_harness_writes_nothing_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No store is opened or called, no file appears, every durability hook is a no-op."""
    from little_workflow.storage import _file, _memory, _postgres, _sqlite

    touched: list[str] = []
    for module, name in [
        (_memory, "MemoryStorage"),
        (_file, "FileStorage"),
        (_sqlite, "SqliteStorage"),
        (_postgres, "PostgresStorage"),
    ]:
        cls = getattr(module, name)
        for method in ("get", "get_many", "set", "delete", "list"):
            original = getattr(cls, method)

            def spy(*args: Any, _original: Any = original, _at: str = f"{name}.{method}") -> Any:
                touched.append(_at)
                return _original(*args)

            monkeypatch.setattr(cls, method, spy)

    async def no_ledger(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a zero-config harness built a step ledger")

    monkeypatch.setattr(StepLedger, "load", no_ledger)
    workdir, home = tmp_path / "cwd", tmp_path / "home"
    workdir.mkdir()
    home.mkdir()
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("HOME", str(home))

    async def answer_later(harness: AgentHarness, ctx_id: str) -> None:
        await harness.answer(ctx_id, "flow.ask", "Ada")

    async def note(ctx: Any, _input: Any) -> str:
        scratch = ctx.layer("scratchpad")
        assert isinstance(scratch, ScratchpadLayer)
        scratch.notes.append("asked")
        return "noted"

    harness = AgentHarness(
        name="plain",
        agent_graph=sequence(
            [ask_user("Who?", id="ask"), run_code(note, id="note"), agent(slot="main")],
            id="flow",
        ),
        model_slots={"main": ModelSlot(provider=LoggedProvider(None), model="m1")},
        tools=make_tools(None),
    )
    assert harness.checkpoint_store is None
    ctx = harness.create_context(instructions="Be brief")
    await answer_later(harness, ctx.id)
    assert await harness.execute(ctx, "go") == "Ada scores 70"

    # Every hook, called by hand: nothing happens, nothing is found.
    await harness.checkpoint(ctx)
    added = await harness.run_append_pipeline(
        ctx, [Item(message=Message(role="user", content="more"))]
    )
    assert len(added) == 1
    assert await harness.restore(ctx.id) is None
    assert await harness.resume(ctx.id) is None
    await harness.clear_checkpoint(ctx.id)
    with pytest.raises(AwaitingAnswerError):
        await harness.wait_for_answer(ctx, "never", suspend=True)

    assert touched == []
    assert list(workdir.iterdir()) == []
    assert list(home.iterdir()) == []
    assert not (Path(os.getcwd()) / ".little-workflow").exists()


def test_create_checkpoint_store_wraps_the_storage() -> None:
    storage = create_in_memory_storage()
    store = create_checkpoint_store(storage=storage)
    assert isinstance(store, CheckpointStore)
    assert store.storage is storage


# --- the snapshot -----------------------------------------------------------------------


async def test_the_snapshot_has_the_seed_fields_by_name(storage: ManagedStorage) -> None:
    harness = durable_harness(storage)
    ctx = harness.create_context(
        id="exec_fields", thread_id="thread_1", resource_id="res_1", instructions="Be brief"
    )
    ctx.cwd, ctx.previous_cwd = "/work/b", "/work/a"
    assert await harness.execute(ctx, "Ada") == "Ada scores 70"

    raw = await storage.get("execution:exec_fields:snapshot")
    assert isinstance(raw, dict)
    assert set(raw) == SEED_FIELDS
    assert raw["schemaVersion"] == CHECKPOINT_SCHEMA_VERSION == 2
    assert raw["executionId"] == "exec_fields"
    assert (raw["threadId"], raw["resourceId"]) == ("thread_1", "res_1")
    assert raw["frontier"] == []  # it completed: nothing in flight
    assert raw["layers"] == {
        "instructions": {"text": "Be brief"},
        "scratchpad": {"notes": []},
        "history": {"window": None},
    }
    assert raw["cwd"] == {"current": "/work/b", "previous": "/work/a"}
    assert raw["askUser"] == []
    assert raw["itemLog"] == {"items": item_log(ctx)}
    assert len(item_log(ctx)) == 6
    captured = datetime.datetime.fromisoformat(str(raw["capturedAt"]))
    assert captured.tzinfo is not None
    # And it loads back through the schema.
    loaded = await harness.checkpoint_store.load("exec_fields")  # type: ignore[union-attr]
    assert isinstance(loaded, CheckpointSnapshot)
    assert loaded.item_log.items == item_log(ctx)


@pytest.mark.parametrize(
    "corrupt",
    [
        pytest.param({"executionId": 3}, id="wrong-type"),
        pytest.param({"surprise": True}, id="unknown-field"),
        pytest.param({"capturedAt": None}, id="missing-captured-at"),
        pytest.param({"askUser": [{"id": "p"}]}, id="prompt-without-created-at"),
    ],
)
async def test_a_snapshot_is_validated_on_load(corrupt: dict[str, JsonValue]) -> None:
    storage = create_in_memory_storage()
    value: dict[str, JsonValue] = {
        "schemaVersion": 2,
        "executionId": "exec_v",
        "capturedAt": "2025-01-01T00:00:00+00:00",
    }
    store = create_checkpoint_store(storage=storage)
    await storage.set("execution:exec_v:snapshot", value)
    assert await store.load("exec_v") is not None
    await storage.set("execution:exec_v:snapshot", {**value, **corrupt})
    with pytest.raises(CorruptDataError, match="does not validate"):
        await store.load("exec_v")
    await storage.set("execution:exec_v:snapshot", ["not", "an", "object"])
    with pytest.raises(CorruptDataError, match="not an object"):
        await store.load("exec_v")


async def test_successive_snapshots_overwrite_one_key(storage: ManagedStorage) -> None:
    harness = durable_harness(storage)
    ctx = harness.create_context(id="exec_over")
    await harness.execute(ctx, "Ada")
    await harness.run_append_pipeline(ctx, [Item(message=Message(role="user", content="more"))])
    keys = [key for key in await storage.list("execution:exec_over:") if ":ledger:" not in key]
    assert keys == ["execution:exec_over:snapshot"]
    raw = await storage.get("execution:exec_over:snapshot")
    assert isinstance(raw, dict)
    assert raw["itemLog"] == {"items": item_log(ctx)}  # the latest state, 7 items
    assert len(item_log(ctx)) == 7


# --- failures ---------------------------------------------------------------------------


async def test_a_failing_save_is_logged_and_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    storage = FailingSaves(create_in_memory_storage(), fragment=":snapshot")
    harness = durable_harness(storage)
    ctx = harness.create_context(id="exec_full_disk")
    with caplog.at_level(logging.WARNING, logger="little_workflow.harness"):
        assert await harness.execute(ctx, "Ada") == "Ada scores 70"
        await harness.checkpoint(ctx)
    failed = [r for r in caplog.records if "was not saved" in r.getMessage()]
    assert failed
    assert "No space left on device" in failed[0].getMessage()
    assert storage.count("set-failed") >= 5  # every append tried, every one failed
    # The ledger, in the same store, was written all the same.
    assert len(await storage.list("execution:exec_full_disk:ledger:")) == 8


async def test_a_layer_that_cannot_be_snapshotted_does_not_fail_the_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Opaque:
        id = "opaque"

        def render(self, ctx: Any) -> list[Message]:
            return []

        def on_append(self, ctx: Any, items: Any) -> None:
            pass

        def state(self) -> Any:
            return {"handle": object()}  # not JSON

        def load_state(self, state: Any) -> None:
            pass

    harness = durable_harness(create_in_memory_storage())
    ctx = harness.create_context(id="exec_opaque", layers=[Opaque(), HistoryLayer()])
    with caplog.at_level(logging.WARNING, logger="little_workflow.harness"):
        assert await harness.execute(ctx, "Ada") == "Ada scores 70"
    assert any("was not saved" in r.getMessage() for r in caplog.records)


# --- when snapshots fire ----------------------------------------------------------------


async def test_an_execute_that_changed_the_item_log_ends_with_a_snapshot() -> None:
    counting = CountingStorage(create_in_memory_storage())
    harness = durable_harness(counting)
    ctx = harness.create_context(id="exec_fire")
    await harness.execute(ctx, "Ada")
    # One per append (input, 3 answers, 2 tool results), one at the end.
    assert snapshot_saves(counting, "exec_fire") == 7
    last_set = [key for name, key in counting.calls if name == "set"][-1]
    assert last_set == "execution:exec_fire:snapshot"


async def test_an_execute_that_changed_nothing_takes_no_snapshot() -> None:
    counting = CountingStorage(create_in_memory_storage())
    harness = durable_harness(
        counting, graph=sequence([run_code(lambda ctx, _: 1, id="one")], id="quiet")
    )
    ctx = harness.create_context(id="exec_quiet")
    assert await harness.execute(ctx) == 1
    assert snapshot_saves(counting, "exec_quiet") == 0
    assert await counting.get("execution:exec_quiet:snapshot") is None


async def test_queueing_an_ask_user_prompt_takes_a_snapshot() -> None:
    counting = CountingStorage(create_in_memory_storage())
    harness = durable_harness(
        counting, graph=sequence([ask_user("Which name?", id="ask", suspend=True)], id="flow")
    )
    ctx = harness.create_context(id="exec_ask")
    with pytest.raises(AwaitingAnswerError) as raised:
        await harness.execute(ctx)
    assert raised.value.prompt_id == "flow.ask"
    assert raised.value.question == "Which name?"
    assert snapshot_saves(counting, "exec_ask") >= 1
    raw: Any = await counting.get("execution:exec_ask:snapshot")
    [prompt] = raw["askUser"]
    assert prompt["id"] == "flow.ask"
    assert prompt["input"] == "Which name?"
    assert isinstance(prompt["createdAt"], float)
    # The frontier says where it waits.
    assert [entry["stepId"] for entry in raw["frontier"]] == ["flow", "flow.ask"]


async def test_run_append_pipeline_and_an_explicit_checkpoint_take_snapshots() -> None:
    counting = CountingStorage(create_in_memory_storage())
    harness = durable_harness(counting)
    ctx = harness.create_context(id="exec_append")
    answer = Item(message=Message(role="assistant", content="hi"), response_id="resp_1")
    assert await harness.run_append_pipeline(ctx, [answer]) == [answer]
    assert snapshot_saves(counting, "exec_append") == 1
    # Already in the log (same response id): nothing appended, no snapshot.
    assert await harness.run_append_pipeline(ctx, [answer]) == []
    assert snapshot_saves(counting, "exec_append") == 1
    ctx.cwd = "/elsewhere"
    await harness.checkpoint(ctx)
    assert snapshot_saves(counting, "exec_append") == 2
    raw = await counting.get("execution:exec_append:snapshot")
    assert isinstance(raw, dict)
    assert raw["cwd"] == {"current": "/elsewhere", "previous": None}
    assert raw["itemLog"] == {"items": [answer.to_json()]}


async def test_ctx_checkpoint_saves_a_snapshot_now() -> None:
    storage = create_in_memory_storage()
    store = create_checkpoint_store(storage=storage)
    seen: list[Any] = []

    async def note_then_checkpoint(ctx: Context, _input: Any) -> Any:
        scratchpad = ctx.layer("scratchpad")
        assert isinstance(scratchpad, ScratchpadLayer)
        scratchpad.notes.append("halfway")
        saved = await ctx.checkpoint()
        snapshot = await store.load("exec_manual")  # the execution's, also from a child
        assert snapshot is not None
        seen.append(
            (saved, snapshot.layers.get("scratchpad"), [e.step_id for e in snapshot.frontier])
        )
        return "done"

    step = run_code(note_then_checkpoint, id="note")
    graph = sequence([step, spawn(sequence([step], id="inner"), id="child")], id="flow")
    harness = durable_harness(storage, graph=graph, store=store)
    ctx = harness.create_context(id="exec_manual")
    assert await store.load("exec_manual") is None
    assert await harness.execute(ctx) == "done"
    assert seen == [
        (True, {"notes": ["halfway"]}, ["flow", "flow.note"]),
        # In the spawned agent: the execution's snapshot, its frontier down to the child.
        (
            True,
            {"notes": ["halfway"]},
            ["flow", "flow.child", "flow.child.inner", "flow.child.inner.note"],
        ),
    ]
    # Between runs too, and on a restored context.
    ctx.cwd = "/between"
    assert await ctx.checkpoint() is True
    snapshot = await store.load("exec_manual")
    assert snapshot is not None
    assert snapshot.cwd is not None
    assert snapshot.cwd.current == "/between"
    restored = await harness.restore("exec_manual")
    assert restored is not None
    restored.cwd = "/restored"
    assert await restored.checkpoint() is True
    snapshot = await store.load("exec_manual")
    assert snapshot is not None
    assert snapshot.cwd is not None
    assert snapshot.cwd.current == "/restored"


async def test_ctx_checkpoint_is_a_no_op_without_a_checkpoint_store() -> None:
    harness = AgentHarness(name="plain", agent_graph=sequence([], id="idle"))
    assert await harness.create_context(id="exec_plain").checkpoint() is False
    assert await Context(id="exec_loose").checkpoint() is False
