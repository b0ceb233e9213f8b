"""The step-completion ledger: what it records, how a resume replays it, and clearing it.

One entry per successfully completed step, one key each (``execution:<id>:ledger:<seq>``).
A resumed run replays recorded outputs; a step that threw runs again; an edited step runs
fresh and its recorded subtree is discarded; a completed composite step replays whole,
without descending. ``clear_checkpoint`` removes the snapshot and every entry.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from little_workflow.durable import StepLedger
from little_workflow.harness import (
    AgentHarness,
    GraphStep,
    branch,
    loop,
    run_code,
    sequence,
    spawn,
)
from little_workflow.storage import ManagedStorage, create_in_memory_storage
from tests.harness.durable_support import (
    BACKENDS,
    CountingStorage,
    Crash,
    FailingSaves,
    Steps,
    durable_harness,
    ledger_entries,
    open_backend,
)


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ManagedStorage]:
    store = await open_backend(request, request.param, tmp_path)
    yield store
    await store.close()


def flow(steps: Steps, *, inner_b: str = "b") -> GraphStep:
    """``flow``: ``inner`` (``a``, ``b``), then ``c``."""
    second = run_code(getattr(steps, inner_b), id="b")
    return sequence(
        [sequence([run_code(steps.a, id="a"), second], id="inner"), run_code(steps.c, id="c")],
        id="flow",
    )


# --- what is recorded -------------------------------------------------------------------


async def test_one_entry_per_completed_step_one_key_each(storage: ManagedStorage) -> None:
    harness = durable_harness(storage)
    ctx = harness.create_context(id="exec_l")
    assert await harness.execute(ctx, "Ada") == "Ada scores 70"

    keys = await storage.list("execution:exec_l:ledger:")
    assert all(re.fullmatch(r"execution:exec_l:ledger:\d{10}", key) for key in keys)
    assert [int(key.rsplit(":", 1)[1]) for key in keys] == list(range(1, 9))
    entries = await ledger_entries(storage, "exec_l")
    assert [(entry["kind"], entry["path"]) for entry in entries] == [
        ("model", "agent.turns[0].model"),
        ("tool", "agent.turns[0].tools[c1_Ada]"),
        ("model", "agent.turns[1].model"),
        ("tool", "agent.turns[1].tools[c2_Ada]"),
        ("model", "agent.turns[2].model"),
        ("composite", "agent.turns"),
        ("code", "agent.answer"),
        ("composite", "agent"),
    ]
    assert entries[1]["output"] == {"name": "Ada", "years": 7}
    assert entries[4]["output"]["message"]["content"] == "Ada scores 70"
    assert entries[-1]["output"] == "Ada scores 70"
    assert all(entry["identity"].startswith("sha256:") for entry in entries)


async def test_an_append_is_one_write_whatever_the_run_length() -> None:
    for count in (5, 200):
        counting = CountingStorage(create_in_memory_storage())
        steps = Steps()
        graph = loop([run_code(steps.d, id="d")], max_iterations=count, id="many")
        harness = durable_harness(counting, graph=graph)
        await harness.execute(harness.create_context(id=f"exec_n{count}"))
        calls = counting.calls
        # The load (one list, nothing to read), then one set per entry: nothing else.
        assert calls[0] == ("list", f"execution:exec_n{count}:ledger:")
        assert [name for name, _ in calls[1:]] == ["set"] * (count + 1)
        assert len({key for _, key in calls[1:]}) == count + 1


# --- replay -----------------------------------------------------------------------------


async def test_a_resumed_run_replays_recorded_outputs(storage: ManagedStorage) -> None:
    steps = Steps(crash="c")
    harness = durable_harness(storage, graph=flow(steps))
    ctx = harness.create_context(id="exec_r")
    with pytest.raises(Crash):
        await harness.execute(ctx, "go")
    assert steps.runs == ["a", "b", "c"]

    resumed = durable_harness(storage, graph=flow(steps))
    outcome = await resumed.resume("exec_r")
    assert outcome is not None
    assert outcome[1] == "c"
    assert steps.runs == ["a", "b", "c", "c"]  # only the step that died ran again
    [a_entry] = [e for e in await ledger_entries(storage, "exec_r") if e["path"] == "flow.inner.a"]
    assert a_entry["output"] == {"a": 0}


async def test_a_step_that_threw_runs_again(storage: ManagedStorage) -> None:
    steps = Steps(fail="b")
    harness = durable_harness(storage, graph=flow(steps))
    with pytest.raises(ValueError, match="b failed"):
        await harness.execute(harness.create_context(id="exec_t"), "go")
    assert [e["path"] for e in await ledger_entries(storage, "exec_t")] == ["flow.inner.a"]

    outcome = await durable_harness(storage, graph=flow(steps)).resume("exec_t")
    assert outcome is not None
    assert outcome[1] == "c"
    assert steps.runs == ["a", "b", "b", "c"]


async def test_an_edited_step_runs_fresh_and_its_recorded_subtree_is_discarded(
    storage: ManagedStorage,
) -> None:
    steps = Steps(crash="c")
    with pytest.raises(Crash):
        await durable_harness(storage, graph=flow(steps)).execute(
            durable_harness(storage).create_context(id="exec_e"), "go"
        )
    before = {e["path"]: e for e in await ledger_entries(storage, "exec_e")}
    assert list(before) == ["flow.inner.a", "flow.inner.b", "flow.inner"]

    # ``b`` now runs another function: ``inner`` (whose identity holds its children's)
    # changed too. It runs fresh, ``a`` with it: its recorded subtree is gone.
    edited = durable_harness(storage, graph=flow(steps, inner_b="b2"))
    outcome = await edited.resume("exec_e")
    assert outcome is not None
    assert steps.runs == ["a", "b", "c", "a", "b2", "c"]
    after = await ledger_entries(storage, "exec_e")
    paths = [entry["path"] for entry in after]
    assert sorted(paths) == sorted(set(paths))  # the discarded entries were deleted
    assert set(paths) == {"flow.inner.a", "flow.inner.b", "flow.inner", "flow.c", "flow"}
    new = {entry["path"]: entry for entry in after}
    assert new["flow.inner.b"]["output"] == "b2"
    assert new["flow.inner"]["identity"] != before["flow.inner"]["identity"]
    assert new["flow.inner.a"]["output"] == {"a": 3}  # ran again, not replayed


async def test_a_completed_composite_replays_whole_without_descending(
    storage: ManagedStorage,
) -> None:
    def graph(steps: Steps) -> GraphStep:
        child = sequence([run_code(steps.b, id="b")], id="child")
        return sequence(
            [
                loop([run_code(steps.a, id="a")], until=steps.enough, id="rounds"),
                branch(steps.choose, run_code(steps.d, id="d"), id="pick"),
                spawn(child, "hello", id="helper"),
                run_code(steps.c, id="c"),
            ],
            id="flow",
        )

    steps = Steps(crash="c")
    harness = durable_harness(storage, graph=graph(steps))
    with pytest.raises(Crash):
        await harness.execute(harness.create_context(id="exec_w"), "go")
    assert steps.runs == ["a", "until", "a", "until", "choose", "d", "b", "c"]
    kinds = {e["path"]: e["kind"] for e in await ledger_entries(storage, "exec_w")}
    assert kinds["flow.rounds"] == kinds["flow.pick"] == "composite"
    assert kinds["flow.helper"] == "spawn"

    # Nothing under the loop, the branch or the spawned agent runs again: not the
    # children, not the loop's stop condition, not the branch's condition.
    steps.runs.clear()
    outcome = await durable_harness(storage, graph=graph(steps)).resume("exec_w")
    assert outcome is not None
    assert steps.runs == ["c"]


async def test_a_later_turn_does_not_replay_an_earlier_one(storage: ManagedStorage) -> None:
    harness = durable_harness(storage)
    ctx = harness.create_context(id="exec_turns")
    assert await harness.execute(ctx, "Ada") == "Ada scores 70"
    assert await harness.execute(ctx, "Bo") == "Bo scores 60"
    roots = [e["path"] for e in await ledger_entries(storage, "exec_turns")]
    assert "agent" in roots
    assert "agent@6" in roots  # the second turn began with 6 items in the log
    # A resume of the finished execution replays its latest turn; nothing runs.
    outcome = await durable_harness(storage, tools=[]).resume("exec_turns")
    assert outcome is not None
    assert outcome[1] == "Bo scores 60"


# --- failures and clearing --------------------------------------------------------------


async def test_a_ledger_write_that_fails_is_logged_and_the_step_reruns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = FailingSaves(create_in_memory_storage(), fragment=":ledger:")
    steps = Steps(crash="c")
    with caplog.at_level(logging.WARNING, logger="little_workflow.durable"), pytest.raises(Crash):
        await durable_harness(storage, graph=flow(steps)).execute(
            durable_harness(storage).create_context(id="exec_f"), "go"
        )
    warnings = [r for r in caplog.records if "was not recorded" in r.getMessage()]
    assert len(warnings) == 1  # once, however many writes failed
    assert storage.count("set-failed") == 3
    outcome = await durable_harness(storage, graph=flow(steps)).resume("exec_f")
    assert outcome is not None
    assert steps.runs == ["a", "b", "c", "a", "b", "c"]


async def test_clear_checkpoint_removes_the_snapshot_and_every_shard(
    storage: ManagedStorage,
) -> None:
    harness = durable_harness(storage)
    for execution_id in ("exec_gone", "exec_gone:ledger:0000000001", "exec_kept"):
        await harness.execute(harness.create_context(id=execution_id), "Ada")
    await harness.answer("exec_gone", "agent.ask", "yes")
    kept_before = await storage.list("execution:exec_kept:")
    neighbour = await storage.list("execution:exec_gone:ledger:0000000001:")
    assert len(await storage.list("execution:exec_gone:ledger:")) > 8  # the neighbour's too

    await harness.clear_checkpoint("exec_gone")
    remaining = await storage.list("execution:exec_gone:")
    assert remaining == neighbour  # an execution whose id only begins the same is kept
    assert await storage.list("execution:exec_kept:") == kept_before
    assert await harness.restore("exec_gone") is None
    assert await harness.find_answer("exec_gone", "agent.ask") is None
    # Started again under the same id, it runs: nothing stale replays.
    steps = Steps()
    fresh = durable_harness(storage, graph=sequence([run_code(steps.a, id="a")], id="agent"))
    await fresh.execute(fresh.create_context(id="exec_gone"), "again")
    assert steps.runs == ["a"]


async def test_checkpoint_store_clear_alone_strands_the_ledger() -> None:
    storage = create_in_memory_storage()
    harness = durable_harness(storage)
    await harness.execute(harness.create_context(id="exec_strand"), "Ada")
    assert harness.checkpoint_store is not None
    await harness.checkpoint_store.clear("exec_strand")
    assert await harness.restore("exec_strand") is None
    assert len(await storage.list("execution:exec_strand:ledger:")) == 8
    await harness.clear_checkpoint("exec_strand")
    assert await storage.list("execution:exec_strand:") == []


async def test_without_a_checkpoint_store_no_ledger_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def refuse(*args: object, **kwargs: object) -> StepLedger:
        raise AssertionError("ledger built")

    monkeypatch.setattr(StepLedger, "load", refuse)
    steps = Steps()
    harness = AgentHarness(name="plain", agent_graph=flow(steps))
    assert await harness.execute(harness.create_context(), "go") == "c"
