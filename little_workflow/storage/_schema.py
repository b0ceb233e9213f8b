"""The schema version of a store, read without changing it, and an explicit upgrade.

Opening a store migrates it (``_sqlite_db``, ``_postgres_db``), so a program never runs
on an old schema. ``little-workflow db status`` and ``db upgrade`` make that visible and
let an operator migrate at a time of their choosing (before rolling out workers, say):
``schema_status`` reads the recorded version without creating or touching anything,
``upgrade_schema`` opens the store (which migrates it) and says what changed.

Event rows written before event checksums existed (``_checksum.py``) keep ``NULL``:
``upgrade_schema`` counts them and leaves them as they are, read unverified. Computing
checksums for them now was rejected: it would seal whatever they hold today as good,
while nothing can tell whether they changed since they were written; a row without a
checksum says so honestly.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, replace

from little_workflow.errors import StorageError
from little_workflow.storage._url import StoreSpec, parse_store_url

__all__ = ["SchemaStatus", "schema_status", "upgrade_schema"]


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """A store's schema version and the latest this program knows."""

    #: ``sqlite`` or ``postgres``.
    backend: str
    #: The database file, or the server and schema (never a password).
    where: str
    #: The version recorded in the store; 0 for a store not created yet.
    version: int
    latest: int
    #: Event rows without a checksum (written before checksums), read unverified;
    #: counted by ``upgrade_schema`` only (a scan of the events), else ``None``.
    unverified_events: int | None = None

    @property
    def current(self) -> bool:
        """Whether the store is at the latest version."""
        return self.version == self.latest


async def schema_status(store: str | StoreSpec) -> SchemaStatus:
    """The recorded schema version of ``store``; creates and migrates nothing."""
    spec = store if isinstance(store, StoreSpec) else parse_store_url(store)
    if spec.kind == "sqlite":
        from little_workflow.storage._sqlite_db import MIGRATIONS as SQLITE_MIGRATIONS

        assert spec.path is not None
        return SchemaStatus(
            backend="sqlite",
            where=str(spec.path),
            version=_sqlite_version(spec),
            latest=len(SQLITE_MIGRATIONS),
        )
    if spec.kind == "postgres":
        return await _postgres_status(spec)
    raise StorageError(f"a {spec.kind}: store has no schema; use sqlite: or postgresql:")


async def upgrade_schema(store: str | StoreSpec) -> tuple[SchemaStatus, SchemaStatus]:
    """Migrate ``store`` to the latest version; its status before and after."""
    from little_workflow.storage._open import open_store

    spec = store if isinstance(store, StoreSpec) else parse_store_url(store)
    before = await schema_status(spec)
    opened = await open_store(spec)  # opening migrates, under the backends' own locks
    await opened.close()
    after = await schema_status(spec)
    return before, replace(after, unverified_events=await _unverified_events(spec))


async def _unverified_events(spec: StoreSpec) -> int:
    """How many event rows have no checksum (the store is at the latest version)."""
    query = "SELECT count(*) FROM events WHERE checksum IS NULL"
    if spec.kind == "sqlite":
        assert spec.path is not None
        conn = sqlite3.connect(f"file:{spec.path}?mode=ro", uri=True, timeout=5)
        try:
            (count,) = conn.execute(query).fetchone()
        except sqlite3.Error as exc:
            raise StorageError(f"cannot count the events of {str(spec.path)!r}: {exc}") from exc
        finally:
            conn.close()
        return int(count)
    from little_workflow.storage._postgres_db import PostgresDatabase

    database = await PostgresDatabase.open(spec, max_connections=1)
    try:
        async with database.connection("count the events without a checksum") as pg:
            cursor = await pg.execute(query)
            row = await cursor.fetchone()
    finally:
        await database.close()
    assert row is not None
    return int(row[0])


def _sqlite_version(spec: StoreSpec) -> int:
    assert spec.path is not None
    if not spec.path.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{spec.path}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open the SQLite database {str(spec.path)!r}: {exc}") from exc
    try:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lw_schema_migrations'"
        ).fetchone()
        if exists is None:
            return 0
        (version,) = conn.execute("SELECT MAX(version) FROM lw_schema_migrations").fetchone()
        return int(version or 0)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the schema version of {str(spec.path)!r}: {exc}") from exc
    finally:
        conn.close()


async def _postgres_status(spec: StoreSpec) -> SchemaStatus:
    from little_workflow._extras import require

    require("postgres", "a postgresql:// store")
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    from little_workflow.storage._postgres_db import (
        MIGRATIONS,
        _describe,
        _recorded_versions,
        _translate,
    )

    assert spec.conninfo is not None
    params = conninfo_to_dict(spec.conninfo)
    where = _describe(params, spec.schema)
    password = params.get("password")
    try:
        async with await psycopg.AsyncConnection.connect(
            spec.conninfo, autocommit=True, connect_timeout=10
        ) as conn:
            versions = await _recorded_versions(conn, spec.schema)
    except psycopg.Error as exc:
        raise _translate(
            exc,
            "read the schema version",
            description=where,
            password=None if password is None else str(password),
        ) from exc
    return SchemaStatus(
        backend="postgres",
        where=where,
        version=max(versions or {0}),
        latest=len(MIGRATIONS),
    )
