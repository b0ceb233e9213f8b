"""What the PostgreSQL backends promise beyond the conformance suites.

One statement per ``get_many``, migrations (recorded, idempotent, race-free, refusing a
newer schema), connection errors, ``sync=False`` appends, a shared database.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from little_workflow.errors import (
    CorruptDataError,
    InvalidValueError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from little_workflow.events import Event, RunStarted, StepCompleted
from little_workflow.storage import StoreSpec, open_event_log, open_storage, parse_store_url
from little_workflow.storage._postgres import (
    _LIST_RANGE,
    PostgresEventLog,
    PostgresStorage,
    open_postgres_storage,
)
from little_workflow.storage._postgres_db import MIGRATIONS, MIGRATIONS_TABLE, PostgresDatabase

pytestmark = pytest.mark.postgres

REPO_ROOT = Path(__file__).resolve().parents[2]


def _step(index: int) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id="s", kind="execute", output={"i": index})


async def _query(spec: StoreSpec, query: sql.Composed, params: Iterable[Any] = ()) -> list[Any]:
    """Run one statement on a fresh connection, outside the backend; its rows if any."""
    assert spec.conninfo is not None
    async with await psycopg.AsyncConnection.connect(spec.conninfo, autocommit=True) as conn:
        cursor = await conn.execute(query, list(params))
        return await cursor.fetchall() if cursor.description is not None else []


def _table(spec: StoreSpec, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(spec.schema), sql.Identifier(name))


@pytest.fixture
def spec(postgres_url: str) -> StoreSpec:
    return parse_store_url(postgres_url)


@pytest.fixture
async def database(spec: StoreSpec) -> AsyncIterator[PostgresDatabase]:
    # One connection, so that "the pooled connection" in a test is a single one.
    db = await PostgresDatabase.open(spec, max_connections=1)
    yield db
    await db.close()


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every SQL statement sent through any psycopg async cursor while the test runs.

    Counted at the cursor class, which ``AsyncConnection.execute`` also goes through,
    so it sees the backends' statements whatever connection or helper they use;
    ``executemany`` counts once per parameter set, because that is what the server runs.
    """
    seen: list[str] = []
    cursor_class = psycopg.AsyncCursor
    original_execute = cursor_class.execute
    original_executemany = cursor_class.executemany
    original_stream = cursor_class.stream

    def text(cursor: Any, query: Any) -> str:
        if isinstance(query, sql.Composable):
            return query.as_string(cursor.connection)
        return query.decode() if isinstance(query, bytes) else str(query)

    async def execute(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append(text(self, query))
        return await original_execute(self, query, params, **kwargs)

    async def executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        params_seq = list(params_seq)
        seen.extend(text(self, query) for _ in params_seq)
        return await original_executemany(self, query, params_seq, **kwargs)

    def stream(self: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
        seen.append(text(self, query))
        return original_stream(self, query, params, **kwargs)

    monkeypatch.setattr(cursor_class, "execute", execute)
    monkeypatch.setattr(cursor_class, "executemany", executemany)
    monkeypatch.setattr(cursor_class, "stream", stream)
    return seen


# --- the key-value store -------------------------------------------------------------


async def test_get_many_of_1000_keys_is_one_statement(
    database: PostgresDatabase, statements: list[str]
) -> None:
    storage = PostgresStorage(database)
    keys = [f"execution:e:ledger:{index:06d}" for index in range(1000)]
    for index, key in enumerate(keys[::2]):
        await storage.set(key, {"i": index})
    await storage.get(keys[0])  # the pool's connection is made and configured by now
    statements.clear()
    result = await storage.get_many(keys)
    assert len(statements) == 1, statements
    assert sorted(result) == keys[::2]
    assert result[keys[998]] == {"i": 499}


async def test_list_is_a_range_scan_on_the_primary_key(database: PostgresDatabase) -> None:
    storage = PostgresStorage(database)
    for index in range(50):
        await storage.set(f"runs/{index:03d}", index)
    async with database.transaction("explain") as conn:
        # The table is tiny, so the planner would rightly scan it; forbidding that shows
        # the range condition can use the index, i.e. the collations agree.
        await conn.execute("SET LOCAL enable_seqscan TO off")
        cursor = await conn.execute(b"EXPLAIN " + _LIST_RANGE.encode(), ["runs/", "runs0"])
        plan = " ".join(row[0] for row in await cursor.fetchall())
    assert "Index" in plan, plan
    assert "kv_pkey" in plan, plan


async def test_corrupt_stored_value_names_the_key(spec: StoreSpec) -> None:
    storage = await open_postgres_storage(spec)
    try:
        await _query(
            spec,
            sql.SQL("INSERT INTO {} (key, value) VALUES (%s, %s)").format(_table(spec, "kv")),
            ["bad/one", '{"truncated": '],
        )
        with pytest.raises(CorruptDataError, match="bad/one"):
            await storage.get("bad/one")
        with pytest.raises(CorruptDataError, match="bad/one"):
            await storage.get_many(["bad/one"])
    finally:
        await storage.close()


async def test_a_value_postgres_cannot_hold_is_refused_and_writes_nothing(
    database: PostgresDatabase,
) -> None:
    storage = PostgresStorage(database)
    with pytest.raises(InvalidValueError, match="surrogate"):
        await storage.set("k", {"text": "lone \ud800"})
    assert await storage.list("") == []


# --- migrations ----------------------------------------------------------------------


async def test_migrations_are_recorded_and_idempotent_on_reopen(spec: StoreSpec) -> None:
    migrations = _table(spec, MIGRATIONS_TABLE)
    select = sql.SQL("SELECT version, applied_at FROM {} ORDER BY version").format(migrations)
    first = await PostgresDatabase.open(spec)
    assert first.schema_version == len(MIGRATIONS)
    await first.close()
    recorded = await _query(spec, select)
    assert [version for version, _ in recorded] == list(range(1, len(MIGRATIONS) + 1))
    assert all(applied_at is not None for _, applied_at in recorded)

    for _ in range(2):
        again = await PostgresDatabase.open(spec)
        assert again.schema_version == len(MIGRATIONS)
        await again.close()
    assert await _query(spec, select) == recorded  # nothing re-applied, nothing re-recorded


_OPEN_IN_A_CHILD = """
import asyncio, sys
from little_workflow.storage import parse_store_url
from little_workflow.storage._postgres_db import PostgresDatabase

async def main(url):
    spec = parse_store_url(url)
    print("ready", flush=True)
    sys.stdin.readline()
    db = await PostgresDatabase.open(spec)
    print(db.schema_version, flush=True)
    await db.close()

asyncio.run(main(sys.argv[1]))
"""


async def test_processes_opening_a_fresh_schema_at_once_migrate_it_once(
    postgres_url: str, spec: StoreSpec
) -> None:
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _OPEN_IN_A_CHILD,
            postgres_url,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=REPO_ROOT,
        )
        for _ in range(4)
    ]
    try:
        # Start them together, once every interpreter has finished importing.
        for child in children:
            assert child.stdout is not None
            assert await child.stdout.readline() == b"ready\n"
        for child in children:
            assert child.stdin is not None
            child.stdin.write(b"go\n")
        outputs = await asyncio.gather(*(child.communicate() for child in children))
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
                await child.wait()
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err.decode()
        assert out.decode().strip() == str(len(MIGRATIONS))
    counts = await _query(
        spec,
        sql.SQL("SELECT version, count(*) FROM {} GROUP BY version ORDER BY version").format(
            _table(spec, MIGRATIONS_TABLE)
        ),
    )
    assert counts == [(version, 1) for version in range(1, len(MIGRATIONS) + 1)]


async def test_a_newer_recorded_version_is_refused(spec: StoreSpec) -> None:
    await (await PostgresDatabase.open(spec)).close()
    newer = [len(MIGRATIONS) + 1, len(MIGRATIONS) + 2]
    for version in newer:
        await _query(
            spec,
            sql.SQL("INSERT INTO {} (version, applied_at) VALUES (%s, now())").format(
                _table(spec, MIGRATIONS_TABLE)
            ),
            [version],
        )
    with pytest.raises(SchemaVersionError) as info:
        await PostgresDatabase.open(spec)
    message = str(info.value)
    assert f"{newer[0]}, {newer[1]}" in message
    assert f"1 to {len(MIGRATIONS)}" in message
    assert spec.schema in message
    with pytest.raises(SchemaVersionError):
        await open_storage(spec)


# --- connecting ----------------------------------------------------------------------


async def test_an_unreachable_server_is_unavailable_without_the_password() -> None:
    url = "postgresql://someone:hunter2-secret@127.0.0.1:1/nowhere?schema=lwt_unreachable"
    # A bound on the wait, not a benchmark: the first connection is made directly, so a
    # refused connection must not sit out the pool's retry loop.
    async with asyncio.timeout(30):
        with pytest.raises(StorageUnavailableError) as info:
            await open_event_log(url)
    message = str(info.value)
    assert "hunter2-secret" not in message
    assert "hunter2-secret" not in repr(info.value)
    assert "127.0.0.1:1" in message
    assert "nowhere" in message
    assert info.value.code == "storage_unavailable"
    assert isinstance(info.value.__cause__, psycopg.OperationalError)


# --- the event log -------------------------------------------------------------------


async def test_unsynced_appends_are_readable_and_the_setting_stays_local(
    database: PostgresDatabase, statements: list[str]
) -> None:
    log = PostgresEventLog(database)
    events: list[Event] = [
        RunStarted(workflow_name="w", definition_hash="h", workflow_version_id="v")
    ]
    events += [_step(index) for index in range(5)]
    assert await log.append("run_async", events[:1], sync=False) == [1]
    assert await log.append("run_async", events[1:], sync=False) == [2, 3, 4, 5, 6]
    assert [record.event for record in await log.read("run_async")] == events
    # Every append is the one call to lw_append, whatever ``sync`` says.
    assert len(statements) == 3
    assert all("lw_append" in statement for statement in statements[:2])
    async with database.connection("show the setting") as conn:
        cursor = await conn.execute("SHOW synchronous_commit")
        assert await cursor.fetchone() == ("on",)
    # What the function does with p_sync, seen from inside one explicit transaction:
    # the setting is off until that transaction ends, and only with p_sync false.
    call = (
        "SELECT * FROM lw_append('run_probe', NULL, NULL, NULL, NULL, %s, %s, %s, %s, NULL, NULL)"
    )
    for sync, inside in ((False, "off"), (True, "on")):
        async with database.transaction("probe the setting") as conn:
            await conn.execute(call, [["t"], ["{}"], [0], sync])
            cursor = await conn.execute("SHOW synchronous_commit")
            assert await cursor.fetchone() == (inside,)
        async with database.connection("show the setting") as conn:
            cursor = await conn.execute("SHOW synchronous_commit")
            assert await cursor.fetchone() == ("on",)


async def test_a_big_append_is_a_fixed_number_of_statements(
    database: PostgresDatabase, statements: list[str]
) -> None:
    log = PostgresEventLog(database)
    await log.append("run_one", [_step(0)])
    statements.clear()
    await log.append("run_one", [_step(1)])
    for_one = len(statements)
    assert for_one == 1  # lw_append: the reservation, the inserts and the commit at once
    statements.clear()
    assert await log.append("run_many", [_step(i) for i in range(2000)]) == list(range(1, 2001))
    assert len(statements) == for_one


async def test_storage_and_log_share_one_database(spec: StoreSpec) -> None:
    database = await PostgresDatabase.open(spec)
    storage = PostgresStorage(database)
    log = PostgresEventLog(database)
    await storage.set("k", 1)
    await log.append("run_shared", [_step(1)])
    await storage.close()  # does not own the database: the log goes on working
    assert await log.last_seq("run_shared") == 1
    with pytest.raises(StorageError, match="closed"):
        await storage.get("k")
    await log.close()
    assert not database.closed
    reader = PostgresStorage(database)
    assert await reader.get("k") == 1
    await database.close()
    with pytest.raises(StorageError, match="closed"):
        await reader.get("k")
