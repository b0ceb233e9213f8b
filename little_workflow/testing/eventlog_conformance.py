"""The conformance suite every ``EventLog`` backend must pass, unchanged.

Subclass it in a test module and provide three fixtures:

* ``event_log``: a fresh, empty log;
* ``event_log_url``: a URL another process can open to reach the same log, or ``None``;
* ``write_raw_event``: an async callable ``(run_id, seq, type_name, data_json)`` that
  stores an event row bypassing validation (to check what reading bad data does), or
  ``None`` if the backend cannot.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from little_workflow.errors import (
    ConflictError,
    CorruptDataError,
    InvalidIdError,
    UnknownEventTypeError,
)
from little_workflow.events import (
    HarnessModelCalled,
    OuterLoopCycleCompleted,
    OuterLoopCycleResult,
    RecordedEvent,
    RunCompleted,
    RunFailed,
    RunStarted,
    RunStatus,
    StepAttemptStarted,
    StepCompleted,
)
from little_workflow.storage import EventLog, RunInfo, open_event_log

__all__ = ["EventLogConformance", "RawEventWriter"]

RawEventWriter = Callable[[str, int, str, str], Awaitable[None]]


def _started(workflow: str = "review", parent: str | None = None) -> RunStarted:
    return RunStarted(
        workflow_name=workflow,
        definition_hash="sha256:" + "0" * 64,
        workflow_version_id="wv_1",
        input={"query": "q"},
        parent_run_id=parent,
    )


def _step(index: int) -> StepCompleted:
    return StepCompleted(
        step_path=f"s{index}", step_id=f"s{index}", kind="execute", output={"i": index}
    )


def _output(record: RecordedEvent) -> dict[str, Any]:
    event = record.event
    assert isinstance(event, StepCompleted)
    assert isinstance(event.output, dict)
    return event.output


def _need(value: object, what: str) -> None:
    if value is None:
        pytest.skip(f"this backend has no {what}")


def _spawn_appender(url: str, run_id: str, name: str, count: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "little_workflow.testing._child",
            "log-append",
            url,
            run_id,
            name,
            str(count),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


class EventLogConformance:
    """Every behaviour an ``EventLog`` promises (see the module docstring)."""

    async def test_empty_run(self, event_log: EventLog) -> None:
        assert await event_log.read("run_none") == []
        assert await event_log.last_seq("run_none") == 0
        assert await event_log.get_run("run_none") is None

    async def test_seqs_are_1_2_3_without_gaps(self, event_log: EventLog) -> None:
        assert await event_log.append("run_a", [_started(), _step(1), _step(2)]) == [1, 2, 3]
        assert await event_log.append("run_a", [_step(3)]) == [4]
        assert await event_log.append("run_a", [_step(4), _step(5)], sync=False) == [5, 6]
        assert await event_log.last_seq("run_a") == 6
        records = await event_log.read("run_a")
        assert [record.seq for record in records] == [1, 2, 3, 4, 5, 6]
        assert all(record.run_id == "run_a" for record in records)
        assert [record.type for record in records] == ["RunStarted"] + ["StepCompleted"] * 5

    async def test_events_round_trip_equal(self, event_log: EventLog) -> None:
        events = [
            _started(),
            StepAttemptStarted(step_path="m[k1].w.visit[0]", step_id="w", kind="execute", visit=0),
            StepCompleted(
                step_path="m[k1].w.visit[0]",
                step_id="w",
                kind="decision",
                visit=0,
                output={"ünï": ["🚀", 1.5, None, {"deep": True}]},
                route="accept",
            ),
            HarnessModelCalled(
                session_id="s1", call_id="c1", slot="planner", request={"messages": []}
            ),
            OuterLoopCycleCompleted(
                outer_loop_id="ol_1",
                cycle_number=2,
                result=OuterLoopCycleResult(kind="done", final_output="answer"),
            ),
            RunCompleted(output=[1, 2, 3]),
        ]
        before = time.time()
        await event_log.append("run_rt", events)
        records = await event_log.read("run_rt")
        assert [record.event for record in records] == events
        assert all(before - 5 <= record.ts <= time.time() + 5 for record in records)

    async def test_read_after_and_limit(self, event_log: EventLog) -> None:
        await event_log.append("run_r", [_step(i) for i in range(10)])
        assert [r.seq for r in await event_log.read("run_r", after=7)] == [8, 9, 10]
        assert [r.seq for r in await event_log.read("run_r", after=2, limit=3)] == [3, 4, 5]
        assert await event_log.read("run_r", after=10) == []
        assert await event_log.read("run_r", after=99) == []
        assert [r.seq for r in await event_log.read("run_r", limit=1)] == [1]

    async def test_empty_append_writes_nothing(self, event_log: EventLog) -> None:
        assert await event_log.append("run_e", []) == []
        assert await event_log.get_run("run_e") is None
        assert await event_log.list_runs() == []

    async def test_runs_are_independent(self, event_log: EventLog) -> None:
        await event_log.append("run_1", [_step(1), _step(2)])
        await event_log.append("run_2", [_step(9)])
        await event_log.append("run_1", [_step(3)])
        assert [r.seq for r in await event_log.read("run_1")] == [1, 2, 3]
        assert [r.event for r in await event_log.read("run_2")] == [_step(9)]

    async def test_expected_seq_detects_a_race(self, event_log: EventLog) -> None:
        assert await event_log.append("run_x", [_step(1)], expected_seq=0) == [1]
        with pytest.raises(ConflictError):
            await event_log.append("run_x", [_step(2)], expected_seq=0)
        with pytest.raises(ConflictError):
            await event_log.append("run_new", [_step(2)], expected_seq=3)
        assert await event_log.append("run_x", [_step(2)], expected_seq=1) == [2]
        assert [r.event for r in await event_log.read("run_x")] == [_step(1), _step(2)]
        assert await event_log.get_run("run_new") is None

    @pytest.mark.parametrize("run_id", ["", "../escape", "a/b", "x" * 201, "a b", "a\x00"])
    async def test_invalid_run_ids_are_refused(self, event_log: EventLog, run_id: str) -> None:
        with pytest.raises(InvalidIdError):
            await event_log.append(run_id, [_step(1)])
        with pytest.raises(InvalidIdError):
            await event_log.read(run_id)
        assert await event_log.list_runs() == []

    async def test_run_index(self, event_log: EventLog) -> None:
        await event_log.append("run_p", [_started("parent")])
        await event_log.append("run_c", [_started("child", parent="run_p"), _step(1)])
        await event_log.append("run_q", [_started("parent")])
        await event_log.append("run_p", [RunCompleted(output=1)])
        await event_log.append("run_q", [RunFailed(cause_code="step_failed", message="boom")])
        await event_log.append("run_bare", [_step(1)])

        parent = await event_log.get_run("run_p")
        assert parent is not None
        assert parent.status is RunStatus.COMPLETED
        assert parent.workflow == "parent"
        assert parent.last_seq == 2
        assert parent.created_at <= parent.updated_at

        child = await event_log.get_run("run_c")
        assert child is not None
        assert (child.status, child.workflow, child.parent_run_id) == (
            RunStatus.RUNNING,
            "child",
            "run_p",
        )

        bare = await event_log.get_run("run_bare")
        assert bare is not None
        assert (bare.status, bare.workflow, bare.last_seq) == (None, None, 1)

        def ids(rows: list[RunInfo]) -> set[str]:
            return {row.run_id for row in rows}

        assert ids(await event_log.list_runs()) == {"run_p", "run_c", "run_q", "run_bare"}
        assert ids(await event_log.list_runs(status=RunStatus.COMPLETED)) == {"run_p"}
        assert ids(await event_log.list_runs(status=RunStatus.FAILED)) == {"run_q"}
        assert ids(await event_log.list_runs(workflow="parent")) == {"run_p", "run_q"}
        assert ids(await event_log.list_runs(parent_run_id="run_p")) == {"run_c"}
        assert ids(await event_log.list_runs(workflow="parent", status=RunStatus.FAILED)) == {
            "run_q"
        }

    async def test_delete_runs_removes_events_and_index_rows(self, event_log: EventLog) -> None:
        await event_log.append("run_p", [_started("parent"), _step(1), RunCompleted(output=1)])
        await event_log.append("run_c", [_started("child", parent="run_p"), _step(1)])
        await event_log.append("run_k", [_started("kept"), _step(1)])
        assert await event_log.delete_runs(["run_p", "run_c", "run_never"]) == 5
        for gone in ("run_p", "run_c"):
            assert await event_log.read(gone) == []
            assert await event_log.last_seq(gone) == 0
            assert await event_log.get_run(gone) is None
        assert [row.run_id for row in await event_log.list_runs()] == ["run_k"]
        assert [record.seq for record in await event_log.read("run_k")] == [1, 2]
        assert await event_log.list_runs(parent_run_id="run_p") == []
        assert await event_log.delete_runs(["run_p"]) == 0  # already gone: not an error
        assert await event_log.delete_runs([]) == 0
        # The id is free again: a new run under it starts at 1, with a fresh index row.
        assert await event_log.append("run_p", [_started("again")], expected_seq=0) == [1]
        again = await event_log.get_run("run_p")
        assert again is not None
        assert (again.workflow, again.status, again.last_seq) == ("again", RunStatus.RUNNING, 1)

    async def test_delete_runs_with_a_bad_id_deletes_nothing(self, event_log: EventLog) -> None:
        await event_log.append("run_a", [_started(), _step(1)])
        with pytest.raises(InvalidIdError):
            await event_log.delete_runs(["run_a", "../escape"])
        assert await event_log.last_seq("run_a") == 2
        assert await event_log.get_run("run_a") is not None

    async def test_delete_many_runs_at_once(self, event_log: EventLog) -> None:
        ids = [f"run_{index}" for index in range(1500)]
        for run_id in ids[:40]:
            await event_log.append(run_id, [_started(), _step(1)])
        # More ids than any backend binds as parameters in one statement.
        assert await event_log.delete_runs(ids) == 80
        assert await event_log.list_runs() == []

    async def test_list_runs_newest_first_with_limit(self, event_log: EventLog) -> None:
        for index in range(5):
            await event_log.append(f"run_{index}", [_started()])
            await asyncio.sleep(0.002)
        rows = await event_log.list_runs()
        assert [row.run_id for row in rows] == [f"run_{i}" for i in range(4, -1, -1)]
        assert [row.run_id for row in await event_log.list_runs(limit=2)] == ["run_4", "run_3"]

    async def test_list_runs_pages_by_keyset(self, event_log: EventLog) -> None:
        # Runs made within a clock tick share created_at: the run id breaks the tie, so
        # a page boundary inside such a group neither skips nor repeats a run.
        for index in range(40):
            parent = None if index % 4 else f"run_{index - 4:02d}" if index >= 4 else None
            status = [] if index % 3 else [RunCompleted(output=index)]
            await event_log.append(f"run_{index:02d}", [_started(parent=parent), *status])
        everything = await event_log.list_runs()
        order = [(row.created_at, row.run_id) for row in everything]
        assert order == sorted(order, reverse=True)

        async def pages(**filters: Any) -> list[str]:
            seen: list[str] = []
            before: tuple[float, str] | None = None
            while True:
                page = await event_log.list_runs(**filters, before=before, limit=7)
                seen += [row.run_id for row in page]
                if len(page) < 7:
                    return seen
                before = (page[-1].created_at, page[-1].run_id)

        assert await pages() == [row.run_id for row in everything]
        top = [row.run_id for row in everything if row.parent_run_id is None]
        assert len(top) == 31
        assert await pages(top_level=True) == top
        done = [row.run_id for row in everything if row.status is RunStatus.COMPLETED]
        assert await pages(status=RunStatus.COMPLETED) == done
        assert await pages(status=RunStatus.COMPLETED, top_level=True) == [
            run_id for run_id in done if run_id in top
        ]
        assert await event_log.list_runs(top_level=True, parent_run_id="run_00") == []
        last = everything[-1]
        assert await event_log.list_runs(before=(last.created_at, last.run_id)) == []

    async def test_a_big_batch(self, event_log: EventLog) -> None:
        seqs = await event_log.append("run_big", [_step(i) for i in range(2000)])
        assert seqs == list(range(1, 2001))
        records = await event_log.read("run_big")
        assert [record.event for record in records] == [_step(i) for i in range(2000)]

    async def test_concurrent_tasks_get_distinct_seqs(self, event_log: EventLog) -> None:
        results = await asyncio.gather(
            *(event_log.append("run_cc", [_step(i), _step(i)]) for i in range(40))
        )
        assert sorted(seq for pair in results for seq in pair) == list(range(1, 81))
        for pair in results:
            assert pair[1] == pair[0] + 1  # one append's events stay together
        records = await event_log.read("run_cc")
        for pair in results:
            first, second = records[pair[0] - 1], records[pair[1] - 1]
            assert first.event == second.event

    async def test_unknown_event_type_is_a_typed_error(
        self, event_log: EventLog, write_raw_event: RawEventWriter | None
    ) -> None:
        _need(write_raw_event, "raw event writer")
        assert write_raw_event is not None
        await event_log.append("run_u", [_step(1)])
        await write_raw_event("run_u", 2, "FromTheFuture", '{"x":1}')
        with pytest.raises(UnknownEventTypeError, match="run_u") as info:
            await event_log.read("run_u")
        assert "FromTheFuture" in str(info.value)
        assert [r.seq for r in await event_log.read("run_u", limit=1)] == [1]

    async def test_bad_event_data_is_a_typed_error(
        self, event_log: EventLog, write_raw_event: RawEventWriter | None
    ) -> None:
        _need(write_raw_event, "raw event writer")
        assert write_raw_event is not None
        await write_raw_event("run_bad", 1, "StepCompleted", '{"stepPath": 3}')
        await write_raw_event("run_trunc", 1, "StepCompleted", '{"stepPath": "a", "ste')
        with pytest.raises(CorruptDataError, match="run_bad"):
            await event_log.read("run_bad")
        with pytest.raises(CorruptDataError, match="run_trunc"):
            await event_log.read("run_trunc")

    async def test_events_survive_reopen(
        self, event_log: EventLog, event_log_url: str | None
    ) -> None:
        _need(event_log_url, "shareable URL")
        assert event_log_url is not None
        await event_log.append("run_keep", [_started(), _step(1)])
        await event_log.append("run_keep", [_step(2)], sync=False)
        reopened = await open_event_log(event_log_url)
        try:
            assert [r.event for r in await reopened.read("run_keep")] == [
                _started(),
                _step(1),
                _step(2),
            ]
            assert await reopened.append("run_keep", [_step(3)]) == [4]
        finally:
            await reopened.close()

    async def test_two_processes_append_to_one_run(
        self, event_log: EventLog, event_log_url: str | None
    ) -> None:
        _need(event_log_url, "shareable URL")
        assert event_log_url is not None
        count = 150
        writers = [_spawn_appender(event_log_url, "run_mp", name, count) for name in ("w1", "w2")]
        loop = asyncio.get_running_loop()
        outputs = await asyncio.gather(
            *(loop.run_in_executor(None, writer.communicate, None) for writer in writers)
        )
        for writer, (_out, err) in zip(writers, outputs, strict=True):
            assert writer.returncode == 0, err
        records = await event_log.read("run_mp")
        assert [record.seq for record in records] == list(range(1, 2 * count + 1))
        for name, (out, _err) in zip(("w1", "w2"), outputs, strict=True):
            mine = [r for r in records if _output(r)["writer"] == name]
            assert [_output(r)["i"] for r in mine] == list(range(count))
            acked = {int(line.split()[0]): int(line.split()[1]) for line in out.splitlines()}
            assert acked == {r.seq: _output(r)["i"] for r in mine}

    async def test_sigkill_mid_stream_keeps_every_acknowledged_event(
        self, event_log: EventLog, event_log_url: str | None
    ) -> None:
        _need(event_log_url, "shareable URL")
        assert event_log_url is not None
        await event_log.append("run_kill", [_started()])
        child = _spawn_appender(event_log_url, "run_kill", "w", 100_000)
        assert child.stdout is not None
        acked: list[tuple[int, int]] = []
        loop = asyncio.get_running_loop()
        while len(acked) < 60:
            line = await loop.run_in_executor(None, child.stdout.readline)
            assert line, "the appender died before it was killed"
            seq_text, index_text = line.split()
            acked.append((int(seq_text), int(index_text)))
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL
        child.stdout.close()
        assert child.stderr is not None
        child.stderr.close()

        reopened = await open_event_log(event_log_url)
        try:
            records = await reopened.read("run_kill")
            last = await reopened.last_seq("run_kill")
        finally:
            await reopened.close()
        assert [record.seq for record in records] == list(range(1, last + 1))
        assert last >= acked[-1][0]
        by_seq = {record.seq: record for record in records}
        for seq, index in acked:
            assert _output(by_seq[seq])["i"] == index
        # Every event that is there is whole, and they are in the order written.
        indexes = [_output(r)["i"] for r in records[1:]]
        assert indexes == list(range(len(indexes)))
        assert all(_output(r)["pad"] == "p" * 200 for r in records[1:])
