"""Waits in one process: the log, the checks of ``send``, LWIR and code-first forms.

The crash and worker proofs are in ``test_wait_processes.py``; here a ``Runtime`` drives the
run and ``send`` answers it, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from little_workflow.errors import (
    ConfigError,
    EventPayloadError,
    EventRefusedError,
    InvalidInputError,
    LwirValidationError,
    RunWaitingError,
)
from little_workflow.events import EventReceived, StepCompleted, WaitCompleted, WaitStarted
from little_workflow.lwir import parse_workflow
from little_workflow.runtime import Runtime

HERE = Path(__file__).parent


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """``None``: the data directory's SQLite file."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


async def _until(moment: float) -> None:
    """Sleep until the wall clock reaches ``moment``."""
    await asyncio.sleep(max(0.0, moment - time.time()) + 0.01)


async def _types(rt: Runtime, run_id: str) -> list[str]:
    return [record.type for record in await rt.events.read(run_id)]


async def test_a_wait_parks_the_run_and_a_send_continues_it(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError) as waiting:
            await rt.run(HERE / "approve.yaml", {"n": 2}, run_id="r1")
        assert waiting.value.code == "run_waiting"
        assert waiting.value.waits[0]["event"] == "approval"
        assert "little-workflow send r1 approval" in waiting.value.message
        assert (await _types(rt, "r1"))[-1] == "WaitStarted"
        infos = await rt.events.list_runs()
        assert (await rt.waiting_runs(infos))["r1"]["event"] == "approval"
        assert await rt.interrupted_runs(infos) == {}  # waiting is not interrupted

        before = await _types(rt, "r1")
        with pytest.raises(EventPayloadError) as bad:
            await rt.send("r1", "approval", {"ok": "yes"})
        assert bad.value.code == "invalid_event_payload"
        assert "boolean" in bad.value.message
        assert await _types(rt, "r1") == before  # nothing written

        sent = await rt.send("r1", "approval", {"ok": True}, key="k1")
        assert sent.outcome == "delivered"
        assert (await rt.send("r1", "approval", {"ok": False}, key="k1")).outcome == "duplicate"
        result = await rt.resume("r1")
        assert result.output == {"n": 4, "answer": {"ok": True}}
        events = [record.event for record in await rt.events.read("r1")]
        assert [e.key for e in events if isinstance(e, EventReceived)] == ["k1"]
        ended = [e for e in events if isinstance(e, WaitCompleted)]
        assert [(e.step_path, e.outcome, e.key) for e in ended] == [("approval", "event", "k1")]
        assert sum(isinstance(e, WaitStarted) for e in events) == 1
        assert await rt.waiting_runs(await rt.events.list_runs()) == {}

        with pytest.raises(EventRefusedError) as late:
            await rt.send("r1", "approval", {"ok": True})
        assert late.value.code == "not_waiting"
        with pytest.raises(ConfigError) as unknown:
            await rt.send("nobody", "approval", {"ok": True})
        assert unknown.value.code == "run_not_found"


async def test_an_event_sent_before_the_wait_is_kept_and_delivered_there(
    tmp_path: Path, store: str | None
) -> None:
    until = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(HERE / "early.yaml", {"until": until}, run_id="r2")
        # Parked at its timer: the event goes into its log now, for the wait further on.
        assert (await rt.send("r2", "approval", "early", key="e1")).outcome == "delivered"
        await asyncio.sleep(1.1)
        assert (await rt.resume("r2")).output == "early"
        events = [record.event for record in await rt.events.read("r2")]
        started = [e for e in events if isinstance(e, WaitStarted)]
        assert [(e.step_path, e.event) for e in started] == [
            ("nap", None),
            ("approval", "approval"),
        ]


async def test_a_timeout_routes_to_its_branch_and_a_later_send_is_refused(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError) as waiting:
            await rt.run(HERE / "deadline.yaml", {"n": 1}, run_id="r3")
        wake_at = waiting.value.waits[0]["wakeAt"]
        assert isinstance(wake_at, float)
        await _until(wake_at + 1.05)  # the timeout, and its grace
        with pytest.raises(EventRefusedError):
            await rt.send("r3", "approval", "too late")  # refused from the deadline on
        result = await rt.resume("r3")
        assert result.output == {"answer": {"n": 0, "answer": "timed out"}, "route": "timeout"}
        with pytest.raises(EventRefusedError) as refused:
            await rt.send("r3", "approval", "still too late")
        assert refused.value.code == "not_waiting"


async def test_a_sleep_records_its_wake_up_time_once(tmp_path: Path, store: str | None) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(HERE / "nap.yaml", {"n": 1}, run_id="r4")
        first = [e.event for e in await rt.events.read("r4") if isinstance(e.event, WaitStarted)]
        with pytest.raises(RunWaitingError):
            await rt.resume("r4")  # not due: it parks again, the time unchanged
        records = await rt.events.read("r4")
        started = [e.event for e in records if isinstance(e.event, WaitStarted)]
        assert started == first
        wake_at = started[0].wake_at
        assert wake_at is not None
        await _until(wake_at)
        await rt.resume("r4")
        records = await rt.events.read("r4")
        done = [r for r in records if isinstance(r.event, WaitCompleted)]
        assert len(done) == 1
        assert done[0].ts >= wake_at
        finish = [
            r
            for r in records
            if isinstance(r.event, StepCompleted) and r.event.step_path == "finish"
        ]
        assert finish[0].ts >= wake_at


async def test_code_first_wait_for_gives_the_model_and_sleep_waits(
    tmp_path: Path, store: str | None
) -> None:
    from tests.waits.flows import approve, short_fuse

    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError) as waiting:
            await rt.run(approve, {"n": 3}, run_id="c1")
        assert waiting.value.waits[0]["path"] == "approval"
        schema = waiting.value.waits[0]["schema"]
        assert isinstance(schema, dict)
        assert "by" in schema["required"]
        with pytest.raises(EventPayloadError):
            await rt.send("c1", "approval", {"ok": True})  # no "by"
        await rt.send("c1", "approval", {"ok": True, "by": "ann"})
        with pytest.raises(RunWaitingError) as sleeping:
            await rt.resume("c1")  # the approval is taken; now it sleeps a second
        assert sleeping.value.waits[0]["event"] is None
        await asyncio.sleep(1.05)
        assert (await rt.resume("c1")).output == {"n": 6, "by": "ann", "ok": True}
        with pytest.raises(RunWaitingError):
            await rt.run(short_fuse, {}, run_id="c2")  # a timeout of 0 s, ended by the driver
        await asyncio.sleep(1.05)  # ... once the grace for a send just before it has passed
        assert (await rt.resume("c2")).output is None


def test_lwir_wait_and_sleep_are_validated() -> None:
    def doc(step: dict[str, object]) -> dict[str, object]:
        return {"lwir": 1, "name": "w", "steps": [step, {"id": "o", "kind": "output", "value": 1}]}

    parse_workflow(doc({"id": "s", "kind": "sleep", "duration": "1h30m"}))
    with pytest.raises(LwirValidationError):
        parse_workflow(doc({"id": "s", "kind": "sleep", "duration": "soon"}))
    with pytest.raises(LwirValidationError):
        parse_workflow(doc({"id": "s", "kind": "sleep"}))  # neither duration nor until
    with pytest.raises(LwirValidationError):
        parse_workflow(doc({"id": "w", "kind": "wait", "event": "a", "onTimeout": "o"}))
    with pytest.raises(LwirValidationError, match="JSON Schema"):
        parse_workflow(doc({"id": "w", "kind": "wait", "event": "a", "schema": {"type": 3}}))
    with pytest.raises(LwirValidationError):
        parse_workflow(
            doc({"id": "w", "kind": "wait", "event": "a", "timeout": "1s", "onTimeout": "x"})
        )


async def test_send_refuses_bad_input_with_nothing_written(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "d") as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(HERE / "approve.yaml", {"n": 2}, run_id="r5")
        before = await _types(rt, "r5")
        with pytest.raises(InvalidInputError):
            await rt.send("r5", "not an event name", {"ok": True})
        with pytest.raises(InvalidInputError):
            await rt.send("r5", "approval", {1, 2})  # type: ignore[arg-type]
        assert await _types(rt, "r5") == before


async def test_a_worker_frees_the_slot_of_a_run_that_waits_and_a_send_requeues_it(
    tmp_path: Path, store: str | None
) -> None:
    from little_workflow.runtime import Worker

    async with Runtime(tmp_path / "d", store=store) as rt:
        await rt.submit(HERE / "approve.yaml", {"n": 1}, run_id="q1")
        worker = Worker(rt, concurrency=1, lease_seconds=10, poll_interval=0.02)
        task = asyncio.create_task(worker.run())
        try:

            async def parked() -> bool:
                entry = await rt.queue.get("q1")
                return worker.report.parked == 1 and entry is not None and entry.state == "queued"

            deadline = time.monotonic() + 60
            while not await parked():
                assert time.monotonic() < deadline, "timed out"
                await asyncio.sleep(0.05)
            infos = await rt.events.list_runs()
            assert "q1" in await rt.waiting_runs(infos)  # queued for later, yet waiting
            # The queue row is not claimable: no worker takes it again by itself.
            await asyncio.sleep(0.3)
            assert worker.report.parked == 1
            sent = await rt.send("q1", "approval", {"ok": False}, key="q")
            assert sent.outcome == "delivered"  # under a claim of the queue row
            while not (await rt.get_state("q1")).finished:
                assert time.monotonic() < deadline, "timed out"
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            report = await task
        assert report.finished == {"completed": 1}
        assert (await rt.get_state("q1")).output == {"n": 2, "answer": {"ok": False}}
        entry = await rt.queue.get("q1")
        assert entry is not None
        assert entry.state == "done"


async def test_a_waiting_run_can_be_cancelled_and_then_refuses_events(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(HERE / "approve.yaml", {"n": 1}, run_id="x1")
        await rt.cancel("x1", reason="not needed", wait=10)
        assert (await rt.get_state("x1")).status.value == "cancelled"
        assert await rt.waiting_runs(await rt.events.list_runs()) == {}
        with pytest.raises(EventRefusedError):
            await rt.send("x1", "approval", {"ok": True})


async def test_waits_in_map_branches_take_one_event_each(tmp_path: Path, store: str | None) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(HERE / "branches.yaml", {}, run_id="b1")
        await rt.send("b1", "go", "first")
        await rt.send("b1", "go", "second")
        for _ in range(3):
            try:
                result = await rt.resume("b1")
                break
            except RunWaitingError:
                continue
        assert isinstance(result.output, list)
        assert sorted(str(value) for value in result.output) == ["first", "second"]
        ended = [
            r.event.key for r in await rt.events.read("b1") if isinstance(r.event, WaitCompleted)
        ]
        assert len(ended) == len(set(ended)) == 2


async def test_before_its_wait_an_lwir_run_checks_sends_against_its_declared_waits(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        await rt.submit(HERE / "approve.yaml", {"n": 1}, run_id="p1")  # not driven yet
        before = await _types(rt, "p1")
        with pytest.raises(EventPayloadError):
            await rt.send("p1", "approval", {"ok": "yes"})  # the pinned wait's schema
        with pytest.raises(EventRefusedError) as never:
            await rt.send("p1", "payment", {"ok": True})
        assert never.value.code == "not_waiting"
        assert "no wait step" in never.value.message
        assert await _types(rt, "p1") == before
        assert (await rt.send("p1", "approval", {"ok": True})).outcome == "delivered"


async def test_a_root_waits_with_its_sub_run_and_a_worker_wakes_it(
    tmp_path: Path, store: str | None
) -> None:
    from little_workflow.runtime import Worker

    async with Runtime(tmp_path / "d", store=store) as rt:
        with pytest.raises(RunWaitingError) as waiting:
            await rt.run(HERE / "parent.yaml", {}, run_id="root1")
        child = waiting.value.waits[0]["runId"]
        assert isinstance(child, str)
        assert child != "root1"
        assert f"send {child} go" in waiting.value.message
        infos = await rt.events.list_runs()
        assert await rt.interrupted_runs(infos) == {}  # so recovery leaves it alone
        assert (await rt.waiting_runs(infos))["root1"]["runId"] == child
        await rt.send(child, "go", 5)
        worker = Worker(rt, concurrency=1, lease_seconds=10, poll_interval=0.02)
        task = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 60
            while not (await rt.get_state("root1")).finished:
                assert time.monotonic() < deadline, "timed out"
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            report = await task
        assert report.woken == 1
        assert (await rt.get_state("root1")).output == {"got": 5}
