"""A run of thousands of events is folded a page at a time: what is held is bounded."""

from __future__ import annotations

from typing import Any

from little_workflow.events import RecordedEvent, RunStarted, StepCompleted
from little_workflow.storage._memory import MemoryEventLog
from little_workflow.views import RunReader
from little_workflow.views._read import FOLD_PAGE


class _Reads(MemoryEventLog):
    """Remembers how many events each read handed out."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[int] = []

    async def read(self, run_id: str, **page: Any) -> list[RecordedEvent]:
        found = await super().read(run_id, **page)
        self.reads.append(len(found))
        return found


def _step(index: int) -> StepCompleted:
    return StepCompleted(
        step_path=f"m[{index}].s", step_id="s", kind="execute", output={"i": index}
    )


async def test_a_view_of_a_long_run_reads_a_page_at_a_time() -> None:
    log = _Reads()
    started = RunStarted(
        workflow_name="wide",
        definition_hash="sha256:" + "0" * 64,
        workflow_version_id="wv_1",
        input=None,
    )
    events = 2 * FOLD_PAGE + 500
    await log.append("run_big", [started, *(_step(i) for i in range(events - 1))])
    reader = RunReader(log)
    view = await reader.view("run_big")
    assert view is not None
    assert len(view.steps) == events - 1
    assert view.summary.events == events
    # Every event was read once, and never more than a page of them at once.
    assert sum(log.reads) == events
    assert max(log.reads) == FOLD_PAGE
    log.reads.clear()
    await log.append("run_big", [_step(events)])
    assert len((await reader.view("run_big") or view).steps) == events
    assert sum(log.reads) == 1  # the cached fold goes on from where it was
