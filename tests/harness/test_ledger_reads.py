"""Reading the ledger on restore: one ``get_many`` query, or concurrent ``get``s without it.

On SQLite and PostgreSQL the entries of an execution are read with one statement
whatever their number (plus the one that lists their keys); an adapter without
``get_many`` gets one ``get`` per key, all in flight at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import sql

from little_workflow.codec import JsonValue
from little_workflow.durable import DEFAULT_STEP_LEDGER_RETENTION, StepLedger, Unit
from little_workflow.harness import loop, run_code
from little_workflow.storage import (
    ManagedStorage,
    StorageAdapter,
    SupportsGetMany,
    create_in_memory_storage,
    open_storage,
)
from little_workflow.storage._sqlite import SqliteStorage
from tests.harness.durable_support import CountingStorage, Crash, durable_harness

ENTRIES = 300


async def record(storage: StorageAdapter, execution_id: str, count: int) -> None:
    ledger = await StepLedger.load(storage, execution_id, DEFAULT_STEP_LEDGER_RETENTION)
    for index in range(count):
        unit = Unit(path=f"flow[{index}].d", kind="code", step_id="d", identity="sha256:d")
        await ledger.succeeded(unit, {"index": index})


class Counter:
    """Counts ``d`` runs; crashes on run ``stop`` (1-based), once."""

    def __init__(self, stop: int) -> None:
        self.stop = stop
        self.runs = 0

    def d(self, ctx: Any, _input: Any) -> JsonValue:
        self.runs += 1
        if self.runs == self.stop:
            raise Crash
        return self.runs


async def interrupted(storage: StorageAdapter, execution_id: str, count: int) -> Counter:
    """An execution of ``count`` code steps, its snapshot, cut short at the last one."""
    counter = Counter(stop=count)
    graph = loop([run_code(counter.d, id="d")], max_iterations=count, id="flow")
    harness = durable_harness(storage, graph=graph)
    ctx = harness.create_context(id=execution_id)
    with pytest.raises(Crash):
        await harness.execute(ctx, "go")  # the input makes a snapshot
    return counter


async def resume(storage: StorageAdapter, execution_id: str, counter: Counter) -> JsonValue:
    graph = loop([run_code(counter.d, id="d")], max_iterations=counter.stop, id="flow")
    outcome = await durable_harness(storage, graph=graph).resume(execution_id)
    assert outcome is not None
    return outcome[1]


# --- SQLite -----------------------------------------------------------------------------


async def test_sqlite_reads_the_ledger_in_one_query(sqlite_url: str) -> None:
    storage = await open_storage(f"{sqlite_url}?synchronous=NORMAL")
    assert isinstance(storage, SqliteStorage)
    try:
        counter = await interrupted(storage, "exec_sq", ENTRIES)
        assert len(await storage.list("execution:exec_sq:ledger:")) == ENTRIES - 1
        conn = storage.db._conn
        assert conn is not None
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            ledger = await StepLedger.load(storage, "exec_sq", DEFAULT_STEP_LEDGER_RETENTION)
            loaded = list(statements)
            statements.clear()
            assert await resume(storage, "exec_sq", counter) == ENTRIES + 1
        finally:
            conn.set_trace_callback(None)
        assert len(ledger) == ENTRIES - 1
        selects = [s for s in loaded if s.lstrip().upper().startswith("SELECT")]
        assert len(selects) == 2, selects  # the key list, then every value
        assert sum("json_each" in s for s in selects) == 1
        # The whole resume: one snapshot read, one list, one batch read; then writes.
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
        assert sum("json_each" in s for s in reads) == 1
        assert sum("WHERE key = " in s for s in reads) == 1  # the snapshot
        assert len(reads) == 3, reads
        assert counter.runs == ENTRIES + 1  # only the step that died ran again
    finally:
        await storage.close()


# --- PostgreSQL -------------------------------------------------------------------------


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement sent through a psycopg async cursor (as in the backend's tests)."""
    seen: list[str] = []
    cursor_class = psycopg.AsyncCursor
    original_execute = cursor_class.execute

    def text(cursor: Any, query: Any) -> str:
        if isinstance(query, sql.Composable):
            return query.as_string(cursor.connection)
        return query.decode() if isinstance(query, bytes) else str(query)

    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append(text(self, query))
        return await original_execute(self, query, params, **kwargs)

    monkeypatch.setattr(cursor_class, "execute", execute)
    return seen


@pytest.mark.postgres
async def test_postgres_reads_the_ledger_in_one_query(
    postgres_url: str, statements: list[str]
) -> None:
    storage = await open_storage(postgres_url)
    try:
        counter = await interrupted(storage, "exec_pg", ENTRIES)
        statements.clear()
        ledger = await StepLedger.load(storage, "exec_pg", DEFAULT_STEP_LEDGER_RETENTION)
        loaded = list(statements)
        statements.clear()
        assert await resume(storage, "exec_pg", counter) == ENTRIES + 1
        assert len(ledger) == ENTRIES - 1
        kv_reads = [s for s in loaded if "FROM kv" in s]
        assert len(kv_reads) == 2, kv_reads  # the key list, then every value
        assert sum("ANY(" in s for s in kv_reads) == 1
        reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "kv" in s]
        assert sum("ANY(" in s for s in reads) == 1
        assert sum("WHERE key = %s" in s for s in reads) == 1  # the snapshot
        assert len(reads) == 3, reads
    finally:
        await storage.close()


# --- without get_many -------------------------------------------------------------------


class Gate(CountingStorage):
    """No ``get_many``; each ``get`` waits until ``expected`` of them are in flight at once."""

    def __init__(self, inner: StorageAdapter, expected: int) -> None:
        super().__init__(inner)
        self.expected = expected
        self.in_flight = 0
        self.most = 0
        self.all_in = asyncio.Event()

    async def get(self, key: str) -> JsonValue | None:
        if ":ledger:" in key:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            if self.in_flight >= self.expected:
                self.all_in.set()
            # Sequential reads would stop here forever: fail fast instead.
            await asyncio.wait_for(self.all_in.wait(), timeout=5)
            self.in_flight -= 1
        return await super().get(key)


async def test_an_adapter_without_get_many_gets_concurrent_gets() -> None:
    inner: ManagedStorage = create_in_memory_storage()
    await record(inner, "exec_plain", 50)
    gate = Gate(inner, expected=50)
    assert not isinstance(gate, SupportsGetMany)
    ledger = await StepLedger.load(gate, "exec_plain", DEFAULT_STEP_LEDGER_RETENTION)
    assert len(ledger) == 50
    assert gate.most == 50  # every get was in flight at once
    assert gate.count("get") == 50
    assert gate.count("list") == 1


async def test_a_resume_through_an_adapter_without_get_many() -> None:
    inner = create_in_memory_storage()
    counter = await interrupted(inner, "exec_nobatch", 40)
    gate = Gate(inner, expected=39)
    assert await resume(gate, "exec_nobatch", counter) == 41
    assert counter.runs == 41
    assert gate.most == 39
    assert gate.count("get") == 39 + 1  # the entries, and the snapshot


async def test_missing_keys_are_absent_not_none() -> None:
    """A key deleted between the list and the read is skipped, on either path."""

    class Vanishing(CountingStorage):
        async def list(self, prefix: str = "") -> list[str]:
            keys = await super().list(prefix)
            await self.inner.delete(keys[0])
            return keys

    inner = create_in_memory_storage()
    await record(inner, "exec_gone", 3)
    ledger = await StepLedger.load(Vanishing(inner), "exec_gone", DEFAULT_STEP_LEDGER_RETENTION)
    assert len(ledger) == 2
