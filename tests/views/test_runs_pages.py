"""The runs list reads a page of the log, not the log: rows read per page, pages by keyset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from little_workflow.events import RunCompleted, RunStarted, RunStatus
from little_workflow.storage import RunInfo
from little_workflow.storage._memory import MemoryEventLog
from little_workflow.views import RunReader


class _Counting(MemoryEventLog):
    """Counts the index rows ``list_runs`` hands out: what a page cost the store."""

    rows = 0

    async def list_runs(self, **filters: Any) -> list[RunInfo]:
        found = await super().list_runs(**filters)
        self.rows += len(found)
        return found


def _started(parent: str | None = None) -> RunStarted:
    return RunStarted(
        workflow_name="wide",
        definition_hash="sha256:" + "0" * 64,
        workflow_version_id="wv_1",
        input=None,
        parent_run_id=parent,
    )


async def _log(runs: int) -> _Counting:
    log = _Counting()
    for index in range(runs):
        # Every third run a sub-run of the one before; every other top-level run finished.
        parent = f"run_{index - 1:04d}" if index % 3 == 2 else None
        ended = [RunCompleted(output=None)] if index % 2 == 0 and parent is None else []
        await log.append(f"run_{index:04d}", [_started(parent), *ended])
    log.rows = 0
    return log


async def test_a_page_reads_its_rows_only() -> None:
    log = await _log(600)
    reader = RunReader(log)
    page = await reader.summaries(limit=20)
    assert len(page) == 20
    assert all(summary.parent_run_id is None for summary in page)
    assert log.rows == 20  # the sub-runs were left out by the store, not here


async def test_pages_by_before_list_every_top_level_run_once() -> None:
    log = await _log(600)
    reader = RunReader(log)
    seen: list[str] = []
    before: tuple[float, str] | None = None
    while page := await reader.summaries(before=before, limit=32):
        seen += [summary.run_id for summary in page]
        before = (page[-1].created_at, page[-1].run_id)
    top = [info.run_id for info in await log.list_runs(top_level=True)]
    assert len(top) == 400
    assert seen == top


async def test_interrupted_runs_are_found_past_the_first_batch() -> None:
    log = await _log(600)
    # The newest batch of running runs holds no interrupted one; the second holds 15.
    running = [info.run_id for info in await log.list_runs(status=RunStatus.RUNNING)]
    assert len(running) == 400
    gone = set(running[150:165])
    looked: list[int] = []

    async def interrupted(runs: Sequence[RunInfo]) -> Mapping[str, str]:
        looked.append(len(runs))
        return {info.run_id: "its process died" for info in runs if info.run_id in gone}

    reader = RunReader(log, interrupted=interrupted)
    page = await reader.summaries(status="interrupted", sub_runs=True, limit=10)
    assert [summary.run_id for summary in page] == running[150:160]
    assert all(summary.reported_status == "interrupted" for summary in page)
    # Batches of the running runs, newest first, until ten were found: not the other 200.
    assert looked == [100, 100]
