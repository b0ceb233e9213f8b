"""Code-first workflows: paths, replay, failure as a value, non-determinism, input.

The bodies below read a module-level ``MODE`` to stand for a code change between two
passes of one run (the same qualified name, other code), and ``Crash`` (a
``SimulatedKill``: nothing is recorded for it) stands for a kill in the middle of a run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from little_workflow import (
    InvalidValueError,
    NonDeterminismError,
    RetryPolicy,
    RunFailedError,
    Runtime,
    StepFailedError,
    WorkflowContext,
    current_step,
    step,
    workflow,
)
from little_workflow.events import StepCompleted, StepFailed
from tests.runtime.support import Crash, FakeSleep

CALLS: list[str] = []
MODE: dict[str, Any] = {}


def make_runtime(tmp_path: Path) -> Runtime:
    return Runtime(tmp_path / "data", sleep=FakeSleep())


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    MODE.clear()


@step
async def fetch(query: str) -> list[dict[str, Any]]:
    CALLS.append(f"fetch {query}")
    return [{"id": "c1", "n": 1}, {"id": "c2", "n": 2}, {"id": "c3", "n": 3}]


@step
def score(candidate: dict[str, Any]) -> int:
    CALLS.append(f"score {candidate['id']}")
    return int(candidate["n"]) * 10


@step(name="bump")
def add_one(value: int) -> int:
    CALLS.append(f"bump {value}")
    if MODE.get("crash_at_bump") == value:
        raise Crash()
    return value + 1


@step
async def sleepy(delay: float, label: str) -> str:
    await asyncio.sleep(delay)
    CALLS.append(f"sleepy {label}")
    if MODE.get("crash_at_label") == label:
        raise Crash()
    return f"{label}@{current_step().step_path}"


@workflow
async def review(ctx: WorkflowContext, query: str) -> dict[str, Any]:
    candidates = await ctx.step(fetch, query)
    scores = await ctx.map(score, candidates, key=lambda c: c["id"], concurrency=2)
    total = sum(scores)
    for _ in range(3):
        total = await ctx.step(add_one, total)
    return {"scores": scores, "total": total}


async def test_a_run_gives_the_output_and_lwir_paths(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        result = await rt.run(review, {"query": "q"})
        assert result.output == {"scores": [10, 20, 30], "total": 63}
        records = await rt.events.read(result.run_id)
    completed = [r.event for r in records if isinstance(r.event, StepCompleted)]
    paths = sorted(event.step_path for event in completed)
    assert paths == sorted(
        [
            "fetch",
            "score[c1]",
            "score[c2]",
            "score[c3]",
            "score",
            "bump",
            "bump.visit[1]",
            "bump.visit[2]",
        ]
    )
    identities = {event.step_path: event.identity for event in completed}
    assert identities["fetch"] == f"{__name__}:fetch@0"
    # Positions count the calls of their scope: a map's branches are scopes of their own.
    assert identities["bump.visit[2]"] == f"{__name__}:add_one@4"
    assert identities["score[c2]"] == f"{__name__}:score@0"
    assert records[0].event.workflow_version_id == f"code:{__name__}:review"  # type: ignore[attr-defined]


async def test_a_resume_replays_every_committed_step_and_runs_the_rest(tmp_path: Path) -> None:
    MODE["crash_at_bump"] = 61
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(Crash):
            await rt.run(review, {"query": "q"}, run_id="run_resume")
        assert CALLS.count("fetch q") == 1
        before = list(CALLS)
        MODE.clear()
        result = await rt.resume("run_resume")
    assert result.output == {"scores": [10, 20, 30], "total": 63}
    after = CALLS[len(before) :]
    # fetch, the map and the first bump were committed: only the cut bump and the rest run.
    assert after == ["bump 61", "bump 62"]
    # A completed map replays whole: fetch, score and bump.
    assert result.replayed_steps == 3
    assert result.executed_steps == 2


@workflow
async def racing(ctx: WorkflowContext) -> list[str]:
    # The first call is slow, the second fast: the paths follow the order of the calls.
    first, second = await asyncio.gather(
        ctx.step(sleepy, 0.3, "slow"), ctx.step(sleepy, 0.0, "fast")
    )
    return [first, second]


async def test_gather_gets_paths_in_call_order_whatever_finishes_first(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        result = await rt.run(racing, None)
        records = await rt.events.read(result.run_id)
    assert result.output == ["slow@sleepy", "fast@sleepy.visit[1]"]
    order = [r.event.step_path for r in records if isinstance(r.event, StepCompleted)]
    assert order == ["sleepy.visit[1]", "sleepy"]  # committed as they finished
    assert CALLS == ["sleepy fast", "sleepy slow"]


@step
def withdraw(amount: int) -> str:
    CALLS.append("withdraw")
    return f"withdrew {amount}"


@step(retry=RetryPolicy(attempts=2))
def deposit(amount: int) -> str:
    CALLS.append("deposit")
    if MODE.get("bank_open"):
        return f"deposited {amount}"
    raise RuntimeError("the bank is closed")


@step
def refund(amount: int) -> str:
    CALLS.append("refund")
    if MODE.get("crash_at_refund"):
        raise Crash()
    return f"refunded {amount}"


@workflow
async def transfer(ctx: WorkflowContext, amount: int) -> dict[str, str]:
    taken = await ctx.step(withdraw, amount)
    try:
        done = await ctx.step(deposit, amount)
    except StepFailedError as error:
        return {"withdraw": taken, "failed": error.path, "refund": await ctx.step(refund, amount)}
    return {"withdraw": taken, "deposit": done}


async def test_a_failed_step_is_a_value_and_replays_as_the_same_error(tmp_path: Path) -> None:
    MODE["crash_at_refund"] = True
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(Crash):
            await rt.run(transfer, {"amount": 5}, run_id="run_saga")
        assert CALLS == ["withdraw", "deposit", "deposit", "refund"]
        MODE.clear()
        result = await rt.resume("run_saga")
        records = await rt.events.read("run_saga")
    assert result.output == {"withdraw": "withdrew 5", "failed": "deposit", "refund": "refunded 5"}
    # The recorded failure was raised again without calling deposit; only refund ran.
    assert CALLS == ["withdraw", "deposit", "deposit", "refund", "refund"]
    failed = [r.event for r in records if isinstance(r.event, StepFailed)]
    assert [(f.step_path, f.cause_code) for f in failed] == [("deposit", "step_failed")]
    assert "RuntimeError: the bank is closed" in failed[0].message


@workflow
async def careless(ctx: WorkflowContext, amount: int) -> str:
    await ctx.step(withdraw, amount)
    return await ctx.step(deposit, amount)


async def test_an_uncaught_step_failure_fails_the_run(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(careless, {"amount": 1}, run_id="run_careless")
        state = await rt.get_state("run_careless")
    assert caught.value.cause_code == "step_failed"
    assert state.status.value == "failed"
    assert state.failure_step == "deposit"
    # retry runs the failed step again (withdraw replays).
    MODE["bank_open"] = True
    CALLS.clear()
    async with make_runtime(tmp_path) as rt:
        result = await rt.retry("run_careless")
    assert result.output == "deposited 1"
    assert CALLS == ["deposit"]


@step
def a() -> str:
    CALLS.append("a")
    return "a"


@step
def b() -> str:
    CALLS.append("b")
    return "b"


@step
def c() -> str:
    CALLS.append("c")
    if MODE.get("crash_at_c"):
        raise Crash()
    return "c"


@step
def d() -> str:
    CALLS.append("d")
    return "d"


@workflow
async def changing(ctx: WorkflowContext) -> list[str]:
    order = MODE.get("order", "abc")
    functions = {"a": a, "b": b, "c": c, "d": d}
    return [await ctx.step(functions[name]) for name in order]


async def _crashed_at_c(rt: Runtime, run_id: str) -> int:
    MODE["crash_at_c"] = True
    with pytest.raises(Crash):
        await rt.run(changing, None, run_id=run_id)
    del MODE["crash_at_c"]
    return len(await rt.events.read(run_id))


@pytest.mark.parametrize(
    ("order", "path", "recorded"),
    [
        ("bac", "a", "a@0"),  # two steps swapped: call 0 is b now
        ("xbc", "a", "a@0"),  # a renamed (another function): call 0 is at another path
        ("bc", "a", "a@0"),  # a removed
    ],
)
async def test_a_changed_body_stops_with_non_determinism_and_writes_nothing(
    tmp_path: Path, order: str, path: str, recorded: str
) -> None:
    async with make_runtime(tmp_path) as rt:
        count = await _crashed_at_c(rt, "run_nd")
        MODE["order"] = order.replace("x", "d")
        CALLS.clear()
        with pytest.raises(NonDeterminismError) as caught:
            await rt.resume("run_nd")
        records = await rt.events.read("run_nd")
    error = caught.value
    assert error.code == "non_determinism"
    assert error.path == path
    assert error.recorded == f"{__name__}:{recorded}"
    assert error.fork == "little-workflow fork run_nd --at 'a'"
    assert CALLS == []
    # Nothing but the resume's own RunResumed (if its write-behind flushed).
    assert [r.type for r in records[count:]] in ([], ["RunResumed"])
    state = await rt.get_state("run_nd")
    assert state.status.value == "running"


async def test_removing_the_last_recorded_step_is_reported_at_the_end(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        await _crashed_at_c(rt, "run_end")
        MODE["order"] = "a"
        with pytest.raises(NonDeterminismError) as caught:
            await rt.resume("run_end")
    assert caught.value.path == "b"
    assert "ended without reaching step 'b'" in str(caught.value)


async def test_adding_a_step_after_the_last_recorded_one_continues(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        await _crashed_at_c(rt, "run_add")
        MODE["order"] = "abcd"
        CALLS.clear()
        result = await rt.resume("run_add")
    assert result.output == ["a", "b", "c", "d"]
    assert CALLS == ["c", "d"]


async def test_input_that_does_not_fit_the_body_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(InvalidValueError, match=r"input\.extra: names no parameter"):
            await rt.run(review, {"query": "q", "extra": 1}, run_id="run_bad")
        with pytest.raises(InvalidValueError, match="JSON object of its keyword arguments"):
            await rt.run(review, ["q"], run_id="run_bad")
        assert await rt.events.read("run_bad") == []


@workflow
async def child(ctx: WorkflowContext, n: int) -> int:
    return await ctx.step(add_one, n)


@workflow
async def parent(ctx: WorkflowContext) -> dict[str, Any]:
    first = await ctx.workflow(child, {"n": 1})
    second = await ctx.workflow(child, {"n": first})
    stamp = await ctx.now()
    token = await ctx.uuid4()
    return {"sum": first + second, "stamp": stamp, "uuid": str(token), "run": ctx.run_id}


async def test_sub_workflows_have_their_own_runs_and_values_are_recorded(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        result = await rt.run(parent, None, run_id="run_parent")
        state = result.state
        again = await rt.resume("run_parent")
    assert result.output["sum"] == 5  # type: ignore[index,call-overload]
    assert again.output == result.output
    sub_runs = [state.steps[p].sub_run_id for p in ("child", "child.visit[1]")]
    assert all(sub_runs)
    assert len(set(sub_runs)) == 2
    assert CALLS == ["bump 1", "bump 2"]


async def reviewed(ctx: WorkflowContext, doc: dict[str, Any]) -> str:
    # Two steps per branch; the first one's duration differs by branch, so the branches'
    # second calls come in another order than their first ones.
    first = await ctx.step(sleepy, doc["delay"], doc["id"])
    return await ctx.step(sleepy, 0.0, first)


@workflow
async def fan_out(ctx: WorkflowContext) -> list[str]:
    docs = [{"id": "a", "delay": 0.2}, {"id": "b", "delay": 0.0}, {"id": "c", "delay": 0.1}]
    results = await ctx.branches(reviewed, docs, key=lambda d: str(d["id"]), concurrency=3)
    if MODE.get("crash_after_branches"):
        raise Crash()
    return [*results, await ctx.step(add_one, len(results))]  # type: ignore[list-item]


async def test_branches_have_scopes_of_their_own_and_replay_in_any_order(
    tmp_path: Path,
) -> None:
    MODE["crash_after_branches"] = True
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(Crash):
            await rt.run(fan_out, None, run_id="run_fan")
        state = await rt.get_state("run_fan")
        assert sorted(p for p, r in state.steps.items() if r.status == "completed") == [
            "reviewed",
            "reviewed[a].sleepy",
            "reviewed[a].sleepy.visit[1]",
            "reviewed[b].sleepy",
            "reviewed[b].sleepy.visit[1]",
            "reviewed[c].sleepy",
            "reviewed[c].sleepy.visit[1]",
        ]
        del MODE["crash_after_branches"]
        CALLS.clear()
        result = await rt.resume("run_fan")
    assert result.output == [
        "a@reviewed[a].sleepy@reviewed[a].sleepy.visit[1]",
        "b@reviewed[b].sleepy@reviewed[b].sleepy.visit[1]",
        "c@reviewed[c].sleepy@reviewed[c].sleepy.visit[1]",
        4,
    ]
    assert CALLS == ["bump 3"]


async def test_a_map_of_branches_cut_midway_replays_its_finished_steps(tmp_path: Path) -> None:
    # Killed inside branch b: no map commit yet, so the resume runs every branch body
    # again, and the steps the branches had committed replay, whatever order they come in.
    MODE["crash_at_label"] = "b@reviewed[b].sleepy"
    async with make_runtime(tmp_path) as rt:
        with pytest.raises(Crash):
            await rt.run(fan_out, None, run_id="run_fan2")
        state = await rt.get_state("run_fan2")
        committed = {p for p, r in state.steps.items() if r.status == "completed"}
        assert "reviewed[b].sleepy" in committed
        assert "reviewed" not in committed
        MODE.clear()
        CALLS.clear()
        result = await rt.resume("run_fan2")
        final = await rt.get_state("run_fan2")
    assert result.output[-1] == 4  # type: ignore[index]
    # Each call says which step it was (sleepy's label holds its path).
    again = {
        f"reviewed[{call.split()[1][0]}].sleepy" + (".visit[1]" if "@" in call else "")
        for call in CALLS
        if call.startswith("sleepy")
    }
    assert not again & committed, (again, committed)
    # One call per step not committed before (the map itself calls nothing).
    assert len(CALLS) == len([p for p in final.steps if p not in committed | {"reviewed"}])


@step
async def forever() -> str:
    CALLS.append("forever")
    MODE["started"].set()
    await asyncio.Event().wait()
    return "never"


@workflow
async def stuck(ctx: WorkflowContext) -> str:
    await ctx.step(a)
    return await ctx.step(forever)


async def test_cancel_and_gc_work_on_a_code_first_run(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        MODE["started"] = started = asyncio.Event()
        task = asyncio.create_task(rt.run(stuck, None, run_id="run_stuck"))
        await started.wait()
        outcome = await rt.cancel("run_stuck", reason="not needed")
        with pytest.raises(RunFailedError) as caught:
            await task
        assert caught.value.cause_code == "cancelled"
        state = await rt.get_state("run_stuck")
        assert state.status.value == "cancelled"
        assert outcome is not None
        report = await rt.gc(keep_last=0)
        assert "run_stuck" in report.runs_deleted
        assert await rt.events.read("run_stuck") == []


async def test_a_resume_with_changed_source_says_so_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with make_runtime(tmp_path) as rt:
        await _crashed_at_c(rt, "run_drift")
        # As if the code changed: the run's recorded source hash is another one.
        state = await rt.get_state("run_drift")
        assert state.definition_hash.startswith("py-")
        records = await rt.events.read("run_drift")
        edited = [records[0].event.model_copy(update={"definition_hash": "py-0000"})]
        edited += [record.event for record in records[1:]]
        await rt.events.append("run_drift_copy", edited, sync=True, expected_seq=0)
        with caplog.at_level("WARNING", logger="little_workflow.code"):
            result = await rt.resume("run_drift_copy")
        drifted = [
            r.event for r in await rt.events.read("run_drift_copy") if r.type == "code.drifted"
        ]
    assert result.output == ["a", "b", "c"]
    changed = f'workflow {changing.__module__}:changing: "py-0000" → "{state.definition_hash}"'
    assert changed in caplog.text
    assert [(c.kind, c.old, c.new) for d in drifted for c in d.changes] == [
        ("workflow", "py-0000", state.definition_hash)
    ]


@step(name="loop", max_visits=2)
def looped(n: int) -> int:
    CALLS.append(f"loop {n}")
    return n + 1


@workflow
async def bounded(ctx: WorkflowContext) -> dict[str, Any]:
    n = 0
    try:
        for _ in range(3):
            n = await ctx.step(looped, n)
    except StepFailedError as error:
        return {"n": n, "stopped": error.path, "cause": error.cause_code}
    return {"n": n}


async def test_max_visits_numbers_every_visit_and_bounds_them(tmp_path: Path) -> None:
    async with make_runtime(tmp_path) as rt:
        result = await rt.run(bounded, None, run_id="run_bounded")
    assert result.output == {"n": 2, "stopped": "loop.visit[2]", "cause": "max_visits_exceeded"}
    assert sorted(p for p, r in result.state.steps.items() if r.status == "completed") == [
        "loop.visit[0]",
        "loop.visit[1]",
    ]
    assert CALLS == ["loop 0", "loop 1"]
