"""Write event rows behind a backend's back, to test what reading bad data does."""

from __future__ import annotations

import time

from little_workflow.storage import MemoryEventLog, parse_store_url
from little_workflow.storage._memory import _MemoryRun
from little_workflow.testing.eventlog_conformance import RawEventWriter


def memory_writer(log: MemoryEventLog) -> RawEventWriter:
    async def write(run_id: str, seq: int, type_name: str, data: str) -> None:
        run = log._runs.setdefault(run_id, _MemoryRun(time.time()))
        assert len(run.events) == seq - 1
        run.events.append((time.time(), type_name, data))

    return write


def writer_for_url(url: str) -> RawEventWriter:
    spec = parse_store_url(url)
    if spec.kind == "sqlite":
        from tests.storage.raw_sqlite import sqlite_writer

        return sqlite_writer(spec)
    from tests.storage.raw_postgres import postgres_writer

    return postgres_writer(spec)
