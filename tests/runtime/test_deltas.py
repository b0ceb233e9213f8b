"""``Runtime.deltas``: model answers as they stream in, to whoever watches a run.

What a watcher sees must join to exactly what the run committed, the log must hold
nothing of the stream, and a run nobody watches must make its calls whole.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from little_workflow import RunDelta
from little_workflow._deltas import DeltaHub, DeltaRoute
from little_workflow.events import HarnessModelResponded
from little_workflow.harness.models import ModelDelta, ModelRequest, ModelResponse, ScriptedProvider
from little_workflow.runtime import Runtime
from tests.runtime.agent_flows import ORCHESTRATE, script
from tests.runtime.session_support import ADA, make


class CountingProvider(ScriptedProvider):
    """The scripted model, counting the calls made as streams."""

    def __init__(self) -> None:
        super().__init__(script)
        self.streams = 0

    async def stream(
        self, request: ModelRequest, on_delta: Callable[[ModelDelta], Awaitable[None]]
    ) -> ModelResponse:
        self.streams += 1
        return await super().stream(request, on_delta)


async def _watched(rt: Runtime, run_id: str, workflow: object = ORCHESTRATE) -> list[RunDelta]:
    deltas = rt.deltas(run_id)
    task = asyncio.create_task(rt.run(workflow, ADA, run_id=run_id))  # type: ignore[arg-type]
    seen = [delta async for delta in deltas]  # ends with the run, by itself
    await task
    return seen


async def _answers(rt: Runtime, run_id: str) -> dict[str, str]:
    """Each committed model answer's text, by its call's id (the call's step path)."""
    return {
        r.event.call_id: ModelResponse.model_validate(r.event.response).message.text or ""
        for r in await rt.events.read(run_id)
        if isinstance(r.event, HarnessModelResponded)
    }


async def test_a_watched_run_streams_each_answer_and_commits_only_the_whole(
    tmp_path: Path,
) -> None:
    provider = CountingProvider()
    rt, _, _ = make(tmp_path / "watched", provider=provider)
    async with rt:
        seen = await _watched(rt, "run_w")
        records = await rt.events.read("run_w")
        answers = await _answers(rt, "run_w")
        sub_runs = sorted({d.run_id for d in seen} - {"run_w"})
        sub_answers = {run: await _answers(rt, run) for run in sub_runs}
    assert provider.streams == provider.calls > 0

    # The orchestrator's sub-run streams to the root's watcher, under its own run id.
    assert len(sub_runs) == 1
    assert {d.lineage for d in seen} == {("run_w",), ("run_w", sub_runs[0])}
    texts: dict[tuple[str, str], str] = defaultdict(str)
    for delta in seen:
        assert delta.attempt == 1
        if delta.delta.kind == "text":
            texts[delta.run_id, delta.path] += delta.delta.text
    committed = {("run_w", path): text for path, text in answers.items() if text}
    committed |= {
        (run, path): text
        for run, by_path in sub_answers.items()
        for path, text in by_path.items()
        if text
    }
    assert dict(texts) == committed
    # A tool call names its tool on its first delta.
    calls = [d.delta for d in seen if d.delta.kind == "tool_call" and d.delta.name]
    assert [c.name for c in calls] == ["start_workflow", "lookup", "score"]
    # Nothing of the stream is in the log: the same events as a run nobody watched.
    rt2, _, _ = make(tmp_path / "unwatched")
    async with rt2:
        await rt2.run(ORCHESTRATE, ADA, run_id="run_w")
        plain = await rt2.events.read("run_w")
    assert [r.type for r in records] == [r.type for r in plain]


async def test_a_run_nobody_watches_makes_its_calls_whole(tmp_path: Path) -> None:
    provider = CountingProvider()
    rt, _, _ = make(tmp_path, provider=provider)
    other = rt.deltas("run_other")  # watching another run does not count
    async with rt:
        result = await rt.run(ORCHESTRATE, ADA, run_id="run_u")
    other.close()
    assert result.output is not None
    assert provider.calls > 0
    assert provider.streams == 0
    assert [d async for d in other] == []


async def test_a_watcher_of_every_run_sees_each_and_outlives_them(tmp_path: Path) -> None:
    rt, _, _ = make(tmp_path)
    async with rt:
        every = rt.deltas()
        await rt.run(ORCHESTRATE, ADA, run_id="run_a")
        await rt.run(ORCHESTRATE, ADA, run_id="run_b")
        # Both runs are over, and the watcher still takes what comes.
        rt.delta_hub.publish(_delta(DeltaRoute(rt.delta_hub, ("run_c",)), "later"))
        every.close()
        received = [delta async for delta in every]
    assert received[-1].delta.text == "later"
    roots = [d.lineage[0] for d in received[:-1]]
    assert roots == ["run_a"] * roots.count("run_a") + ["run_b"] * roots.count("run_b")
    assert roots.count("run_a") == roots.count("run_b") > 0


def _delta(route: DeltaRoute, text: str) -> RunDelta:
    return RunDelta(
        run_id=route.run_id,
        lineage=route.lineage,
        path="agent.turns[0].model",
        slot="worker",
        attempt=1,
        delta=ModelDelta(kind="text", text=text),
    )


async def test_a_slow_watcher_loses_new_deltas_and_counts_them() -> None:
    hub = DeltaHub()
    stream = hub.subscribe("run_1", buffer=2)
    route = DeltaRoute(hub, ("run_1",))
    for text in "abcde":
        hub.publish(_delta(route, text))
    hub.ended("run_1")
    assert [d.delta.text async for d in stream] == ["a", "b"]
    assert stream.dropped == 3


async def test_a_call_made_again_streams_under_a_higher_attempt() -> None:
    hub = DeltaHub()
    stream = hub.subscribe("run_1")
    route = DeltaRoute(hub, ("run_1",))
    for text in ("cut", "whole"):
        sink = route.sink("agent.turns[0].model", "worker")
        assert sink is not None
        await sink(ModelDelta(kind="text", text=text))
    hub.ended("run_1")
    assert [(d.attempt, d.delta.text) async for d in stream] == [(1, "cut"), (2, "whole")]
    # A later pass of the run (a resume in this process) counts from 1 again.
    again = hub.subscribe("run_1")
    sink = route.sink("agent.turns[0].model", "worker")
    assert sink is not None
    await sink(ModelDelta(kind="text", text="resumed"))
    again.close()
    assert [(d.attempt, d.delta.text) async for d in again] == [(1, "resumed")]


async def test_nobody_watching_means_no_sink() -> None:
    hub = DeltaHub()
    route = DeltaRoute(hub, ("run_1", "run_2"))
    assert route.sink("p", "s") is None
    parent = hub.subscribe("run_1")
    assert route.sink("p", "s") is not None
    parent.close()
    assert route.sink("p", "s") is None
    with pytest.raises(ValueError, match="buffer"):
        hub.subscribe("run_1", buffer=0)
