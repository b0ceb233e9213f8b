"""The run queue on every backend that has one, through the one conformance suite.

Everything runs against the real thing (a SQLite file, the PostgreSQL server); times are
the backend's, so the tests that need a lease to expire use short leases and wait them out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from little_workflow.events import StepCompleted
from little_workflow.storage import Store, open_store
from little_workflow.storage._fence import Fence, fenced
from little_workflow.testing import RunQueueConformance

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class TestRunQueueConformance(RunQueueConformance):
    @pytest.fixture(params=BACKENDS)
    async def queue_store(self, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
        url: str = request.getfixturevalue(f"{request.param}_url")
        store = await open_store(url)
        yield store
        await store.close()


async def test_the_memory_backend_refuses_a_fenced_append() -> None:
    from little_workflow.errors import ConfigError
    from little_workflow.storage import create_in_memory_event_log

    log = create_in_memory_event_log()
    step = StepCompleted(step_path="s1", step_id="s", kind="execute", output={"i": 1})
    with fenced(Fence(run_id="run_m", token=1)), pytest.raises(ConfigError, match="leases"):
        await log.append("run_m", [step])
    assert await log.read("run_m") == []
