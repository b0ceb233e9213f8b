"""Every EventLog backend through the one conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from little_workflow.storage import (
    EventLog,
    MemoryEventLog,
    PayloadLog,
    open_event_log,
    open_store,
)
from little_workflow.testing import EventLogConformance
from little_workflow.testing.eventlog_conformance import RawEventWriter
from tests.storage import raw

# "payload": a PayloadLog over SQLite, which must pass everything through unchanged.
BACKENDS = [
    "memory",
    "sqlite",
    "payload",
    pytest.param("postgres", marks=pytest.mark.postgres),
]


class TestEventLogConformance(EventLogConformance):
    @pytest.fixture(params=BACKENDS)
    def event_log_url(self, request: pytest.FixtureRequest) -> str | None:
        if request.param == "memory":
            return None
        backend = "sqlite" if request.param == "payload" else request.param
        url: str = request.getfixturevalue(f"{backend}_url")
        return url

    @pytest.fixture
    async def event_log(
        self, request: pytest.FixtureRequest, event_log_url: str | None
    ) -> AsyncIterator[EventLog]:
        if "payload" in request.node.callspec.id:
            store = await open_store(event_log_url or "memory:")
            yield PayloadLog(store.events, store.blobs)
            await store.close()
            return
        log = await open_event_log(event_log_url or "memory:")
        yield log
        await log.close()

    @pytest.fixture
    def write_raw_event(self, event_log: EventLog, event_log_url: str | None) -> RawEventWriter:
        if isinstance(event_log, MemoryEventLog):
            return raw.memory_writer(event_log)
        assert event_log_url is not None
        return raw.writer_for_url(event_log_url)
