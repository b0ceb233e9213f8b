"""A fold runs with the cyclic collector paused, and leaves it as it found it."""

from __future__ import annotations

import gc
from typing import Any

import pytest

from little_workflow.errors import CorruptDataError
from little_workflow.events import RecordedEvent, RunStarted, StepCompleted
from little_workflow.storage._memory import MemoryEventLog
from little_workflow.views import RunReader
from little_workflow.views._collector import collector_paused

STARTED = RunStarted(
    workflow_name="w", definition_hash="sha256:" + "0" * 64, workflow_version_id="wv_1"
)


class _Watched(MemoryEventLog):
    """Remembers whether the collector was on at each read."""

    def __init__(self) -> None:
        super().__init__()
        self.collecting: list[bool] = []

    async def read(self, run_id: str, **page: Any) -> list[RecordedEvent]:
        self.collecting.append(gc.isenabled())
        return await super().read(run_id, **page)


def _done(path: str) -> StepCompleted:
    return StepCompleted(step_path=path, step_id=path, kind="execute")


async def test_a_view_folds_with_the_collector_off_and_turns_it_on_again() -> None:
    assert gc.isenabled()
    log = _Watched()
    await log.append("run_a", [STARTED, _done("a")])
    view = await RunReader(log).view("run_a")
    assert view is not None
    assert [row.path for row in view.steps] == ["a"]
    assert log.collecting
    assert not any(log.collecting)
    assert gc.isenabled()


async def test_a_log_that_does_not_fold_leaves_the_collector_on() -> None:
    log = _Watched()
    # The same step completed twice: the fold raises half-way.
    await log.append("run_b", [STARTED, _done("a"), _done("a")])
    with pytest.raises(CorruptDataError, match="completed twice"):
        await RunReader(log).view("run_b")
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_and_nesting_turns_it_on_once() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner use did not turn it off, so it leaves it
    assert gc.isenabled()
