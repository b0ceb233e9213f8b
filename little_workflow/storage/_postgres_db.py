"""One PostgreSQL database connection for the Postgres backends: pool, schema, migrations.

``PostgresDatabase`` owns a small ``psycopg_pool.AsyncConnectionPool`` whose connections
are in autocommit mode with ``search_path`` set to the store's schema, so the backends
write unqualified table names and open an explicit transaction only where they need
one. Opening it creates the schema if missing and applies ``MIGRATIONS``.

Migrations are an append-only sequence of SQL scripts; script ``i`` is version ``i + 1``
and is recorded in ``lw_schema_migrations`` when applied. Never edit or reorder a
script that has shipped: add a new one. They run in one transaction under a
transaction-scoped advisory lock keyed by the schema name, so two processes opening a
fresh schema at once do not both migrate: the second waits, then finds nothing to do.
A database that records a version newer than this program knows is refused with
``SchemaVersionError`` rather than half-understood.

Rejected designs: ``CREATE ... IF NOT EXISTS`` on every open without a lock (two
concurrent ``CREATE SCHEMA IF NOT EXISTS`` can still collide on the catalog's unique
index, and it gives no place to record or refuse versions); opening the pool first and
migrating through it (an unreachable server then surfaces as a bare pool timeout after
the full wait instead of libpq's reason, so the first connection is made directly).

After a server restart every pooled connection is dead, though the server is back. The
pool checks each connection it hands out with ``_check_idle``: a ``poll`` of its socket
(no round trip), and only if the server has written to the idle connection (a
``FATAL`` "terminating connection", or the end of the stream) an empty query; a dead
one is dropped and the pool gives another, connecting anew, waiting up to its timeout
while the server comes back. So a restart between two statements is not seen at all,
and one during a statement fails that statement only (``StorageUnavailableError``).
Rejected: ``AsyncConnectionPool.check_connection`` on every checkout (an empty query:
~130 µs more per append here, against ~4 µs for the ``poll``).

Driver errors are translated here, once: a failure to reach the server (and any other
``psycopg.OperationalError``) becomes ``StorageUnavailableError``, any other driver
error ``StorageError``, both ``raise ... from exc``. Messages name host, port, database
and schema, never the password.
"""

from __future__ import annotations

import contextlib
import hashlib
import select
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Final, LiteralString

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from little_workflow.errors import (
    ConfigError,
    InvalidStoreUrlError,
    InvalidValueError,
    SchemaVersionError,
    StorageError,
    StorageUnavailableError,
)
from little_workflow.storage._checksum import FOLD_SQL
from little_workflow.storage._url import StoreSpec

__all__ = ["MIGRATIONS", "MIGRATIONS_TABLE", "PostgresDatabase"]

#: Where applied migration versions are recorded, inside the store's schema.
MIGRATIONS_TABLE: Final = "lw_schema_migrations"

#: The schema's migrations, append-only: script ``i`` is version ``i + 1``.
MIGRATIONS: Final[Sequence[LiteralString]] = (
    # 1: the key-value table, the event log and the run index.
    #
    # Text columns use the "C" collation so that ORDER BY and range scans follow code
    # point order, which is what every backend promises and what makes
    # ``key >= prefix AND key < prefix_upper_bound(prefix)`` an exact prefix match on
    # the primary-key index. Values and event data are ``text`` holding the JSON exactly
    # as encoded, not ``jsonb``, which would reorder keys and drop duplicate ones.
    # ``events`` has no foreign key to ``runs``: the append transaction keeps them
    # consistent, and a per-row trigger check would slow large batches for nothing.
    """
    CREATE TABLE kv (
        key text COLLATE "C" PRIMARY KEY,
        value text NOT NULL
    );
    CREATE TABLE runs (
        run_id text COLLATE "C" PRIMARY KEY,
        status text,
        workflow text,
        parent_run_id text COLLATE "C",
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        last_seq bigint NOT NULL
    );
    CREATE INDEX runs_created_idx ON runs (created_at DESC, run_id DESC);
    CREATE INDEX runs_status_created_idx ON runs (status, created_at DESC, run_id DESC);
    CREATE INDEX runs_workflow_created_idx ON runs (workflow, created_at DESC, run_id DESC);
    CREATE INDEX runs_parent_created_idx ON runs (parent_run_id, created_at DESC, run_id DESC)
        WHERE parent_run_id IS NOT NULL;
    CREATE TABLE events (
        run_id text COLLATE "C" NOT NULL,
        seq bigint NOT NULL,
        type text NOT NULL,
        ts double precision NOT NULL,
        data text NOT NULL,
        PRIMARY KEY (run_id, seq)
    );
    """,
    # 2: the blob store (``_blobs_postgres``): payloads stored once, by SHA-256.
    """
    CREATE TABLE blobs (
        digest text COLLATE "C" PRIMARY KEY,
        size bigint NOT NULL,
        data bytea NOT NULL,
        created_at double precision NOT NULL
    );
    """,
    # 3: the append as one server-side function, so a durable step is one round trip
    # (``PostgresEventLog.append``), and the run queue with leases (``runtime/_queue.py``).
    #
    # ``lw_append``'s body is what the append used to send as BEGIN, reserve, insert,
    # COMMIT; as one statement in autocommit mode it is one implicit transaction, which
    # any exception it raises rolls back whole. ``set_config(..., true)`` lasts until
    # that transaction's commit, so ``p_sync = false`` relaxes ``synchronous_commit``
    # for this append alone. With ``p_lease_token``, the append is fenced: it commits
    # only while ``p_lease_run_id``'s queue row is leased under that very token and the
    # lease has not expired; the row is read FOR SHARE, so a worker taking the run over
    # (FOR UPDATE SKIP LOCKED) cannot slip in between the check and the commit.
    #
    # ``run_queue``: one row per submitted run. ``lease_token`` comes from one sequence,
    # so every claim of any run gets a larger token than any before it: a token names
    # one holding of one run, never reused.
    """
    CREATE SEQUENCE lease_tokens;
    CREATE TABLE run_queue (
        run_id text COLLATE "C" PRIMARY KEY,
        state text NOT NULL CHECK (state IN ('queued', 'leased', 'done')),
        submitted_at double precision NOT NULL,
        -- Set for a sub-run a worker's run handed to the queue: claimed before the
        -- backlog, since a parent is waiting for it.
        parent_run_id text COLLATE "C",
        worker_id text,
        lease_token bigint,
        lease_expires_at double precision,
        attempts integer NOT NULL DEFAULT 0,
        finished_at double precision,
        outcome text
    );
    CREATE INDEX run_queue_queued_idx ON run_queue ((parent_run_id IS NULL), submitted_at)
        WHERE state = 'queued';
    CREATE INDEX run_queue_leased_idx ON run_queue (lease_expires_at) WHERE state = 'leased';
    CREATE TABLE workers (
        worker_id text COLLATE "C" PRIMARY KEY,
        host text NOT NULL,
        pid integer NOT NULL,
        concurrency integer NOT NULL,
        started_at double precision NOT NULL,
        heartbeat_at double precision NOT NULL,
        stopped_at double precision
    );
    CREATE FUNCTION lw_append(
        p_run_id text, p_status text, p_workflow text, p_parent_run_id text,
        p_expected bigint, p_types text[], p_data text[], p_sync boolean,
        p_lease_run_id text, p_lease_token bigint,
        OUT out_last_seq bigint, OUT out_ts double precision
    ) LANGUAGE plpgsql AS $$
    DECLARE
        n bigint := cardinality(p_types);
    BEGIN
        IF p_lease_token IS NOT NULL THEN
            PERFORM 1 FROM run_queue
            WHERE run_id = p_lease_run_id AND state = 'leased'
                AND lease_token = p_lease_token
                AND lease_expires_at >= extract(epoch FROM clock_timestamp())
            FOR SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the lease % on run % is no longer held',
                    p_lease_token, p_lease_run_id USING ERRCODE = 'LW410';
            END IF;
        END IF;
        IF NOT p_sync THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        INSERT INTO runs AS r (run_id, status, workflow, parent_run_id, created_at,
                               updated_at, last_seq)
        VALUES (p_run_id, p_status, p_workflow, p_parent_run_id,
                extract(epoch FROM statement_timestamp())::double precision,
                extract(epoch FROM statement_timestamp())::double precision, n)
        ON CONFLICT (run_id) DO UPDATE SET
            last_seq = r.last_seq + EXCLUDED.last_seq,
            updated_at = GREATEST(r.updated_at, EXCLUDED.updated_at),
            status = COALESCE(EXCLUDED.status, r.status),
            workflow = COALESCE(EXCLUDED.workflow, r.workflow),
            parent_run_id = COALESCE(EXCLUDED.parent_run_id, r.parent_run_id)
        RETURNING r.last_seq, r.updated_at INTO out_last_seq, out_ts;
        IF p_expected IS NOT NULL AND out_last_seq - n <> p_expected THEN
            RAISE EXCEPTION 'expected last seq %, found %', p_expected, out_last_seq - n
                USING ERRCODE = 'LW409', DETAIL = (out_last_seq - n)::text;
        END IF;
        INSERT INTO events (run_id, seq, type, ts, data)
        SELECT p_run_id, out_last_seq - n + e.ord, e.type, out_ts, e.data
        FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    END
    $$;
    """,
    # 4: queues and limits (``storage/_limits.py``): each submitted run names its queue;
    # a queue's or a model slot's limit is a row of ``lw_limits`` (locked FOR UPDATE by
    # whoever claims or takes a permit under it, so two workers cannot both take the
    # last place); ``lw_limit_starts`` holds the starts of the last rate period;
    # ``lw_permits`` the permits of limited model slots held now, under leases.
    """
    ALTER TABLE run_queue ADD COLUMN queue text COLLATE "C" NOT NULL DEFAULT 'default';
    CREATE INDEX run_queue_leased_by_queue_idx ON run_queue (queue) WHERE state = 'leased';
    CREATE INDEX run_queue_queued_by_queue_idx ON run_queue (queue, submitted_at)
        WHERE state = 'queued' AND parent_run_id IS NULL;
    CREATE TABLE lw_limits (
        kind text COLLATE "C" NOT NULL CHECK (kind IN ('queue', 'model')),
        name text COLLATE "C" NOT NULL,
        concurrency integer,
        rate_count integer,
        rate_period double precision,
        updated_at double precision NOT NULL,
        PRIMARY KEY (kind, name)
    );
    CREATE TABLE lw_limit_starts (
        kind text COLLATE "C" NOT NULL,
        name text COLLATE "C" NOT NULL,
        at double precision NOT NULL
    );
    CREATE INDEX lw_limit_starts_idx ON lw_limit_starts (kind, name, at);
    CREATE TABLE lw_permits (
        permit_id text COLLATE "C" PRIMARY KEY,
        kind text COLLATE "C" NOT NULL,
        name text COLLATE "C" NOT NULL,
        expires_at double precision NOT NULL
    );
    CREATE INDEX lw_permits_idx ON lw_permits (kind, name, expires_at);
    """,
    # 5: a queued run claimable only from ``not_before`` (a run waiting for a timer or an
    # event, docs/waits.md); NULL: at once.
    """
    ALTER TABLE run_queue ADD COLUMN not_before double precision;
    """,
    # 6: event checksums (``_checksum.py``). ``checksum`` is NULL in the rows written
    # before, which are read unverified. ``lw_append`` takes each event's CRC part
    # (``p_crcs``, computed by the writer) and folds in the seq and timestamp it gives
    # the row. The old signature is dropped, not kept beside: a process still running an
    # older little-workflow then fails its next append instead of writing rows without
    # checksums. The body is migration 3's but for ``p_crcs`` and the checksum column.
    """
    ALTER TABLE events ADD COLUMN checksum bigint;
    DROP FUNCTION lw_append(text, text, text, text, bigint, text[], text[], boolean, text, bigint);
    CREATE FUNCTION lw_append(
        p_run_id text, p_status text, p_workflow text, p_parent_run_id text,
        p_expected bigint, p_types text[], p_data text[], p_crcs bigint[], p_sync boolean,
        p_lease_run_id text, p_lease_token bigint,
        OUT out_last_seq bigint, OUT out_ts double precision
    ) LANGUAGE plpgsql AS $$
    DECLARE
        n bigint := cardinality(p_types);
    BEGIN
        IF p_lease_token IS NOT NULL THEN
            PERFORM 1 FROM run_queue
            WHERE run_id = p_lease_run_id AND state = 'leased'
                AND lease_token = p_lease_token
                AND lease_expires_at >= extract(epoch FROM clock_timestamp())
            FOR SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'the lease % on run % is no longer held',
                    p_lease_token, p_lease_run_id USING ERRCODE = 'LW410';
            END IF;
        END IF;
        IF NOT p_sync THEN
            PERFORM set_config('synchronous_commit', 'off', true);
        END IF;
        INSERT INTO runs AS r (run_id, status, workflow, parent_run_id, created_at,
                               updated_at, last_seq)
        VALUES (p_run_id, p_status, p_workflow, p_parent_run_id,
                extract(epoch FROM statement_timestamp())::double precision,
                extract(epoch FROM statement_timestamp())::double precision, n)
        ON CONFLICT (run_id) DO UPDATE SET
            last_seq = r.last_seq + EXCLUDED.last_seq,
            updated_at = GREATEST(r.updated_at, EXCLUDED.updated_at),
            status = COALESCE(EXCLUDED.status, r.status),
            workflow = COALESCE(EXCLUDED.workflow, r.workflow),
            parent_run_id = COALESCE(EXCLUDED.parent_run_id, r.parent_run_id)
        RETURNING r.last_seq, r.updated_at INTO out_last_seq, out_ts;
        IF p_expected IS NOT NULL AND out_last_seq - n <> p_expected THEN
            RAISE EXCEPTION 'expected last seq %, found %', p_expected, out_last_seq - n
                USING ERRCODE = 'LW409', DETAIL = (out_last_seq - n)::text;
        END IF;
        INSERT INTO events (run_id, seq, type, ts, data, checksum)
        SELECT p_run_id, e.seq, e.type, out_ts, e.data,
            e.crc # """
    + FOLD_SQL.format(ts="out_ts", seq="e.seq")
    + """
        FROM (
            SELECT out_last_seq - n + u.ord AS seq, u.type, u.data, u.crc
            FROM unnest(p_types, p_data, p_crcs) WITH ORDINALITY AS u(type, data, crc, ord)
        ) AS e;
    END
    $$;
    """,
    # 7: the default runs list (top-level runs, newest first) read in index order: the
    # other filters have had their index since migration 1.
    """
    CREATE INDEX runs_top_created_idx ON runs (created_at DESC, run_id DESC)
        WHERE parent_run_id IS NULL;
    """,
)

DEFAULT_MAX_CONNECTIONS: Final = 8
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
#: libpq TCP settings for every connection, unless the URL sets its own. Without them a
#: connection whose peer vanished (a network partition, a host gone) is noticed only by
#: the OS defaults: a query waiting for its reply, after two hours of keepalive idle plus
#: nine probes 75 s apart; a request never acknowledged, after ~15 minutes of
#: retransmissions. With them: keepalive probes after 10 s of silence, 5 s apart, and
#: the connection closed once data or probes go unacknowledged for 30 s, so a dead peer
#: surfaces as StorageUnavailableError within about 30 s. A live server answers the
#: probes, so a long query is not cut short. libpq ignores them on Unix-domain sockets
#: and where the OS lacks the socket option.
DEFAULT_TCP_SETTINGS: Final[Mapping[str, int]] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,  # milliseconds
}
_APPLICATION_NAME: Final = "little-workflow"


def _lock_key(schema: str) -> int:
    """A stable 64-bit advisory-lock key for migrating ``schema``.

    Computed here rather than with PostgreSQL's ``hashtext`` because that function is
    internal and its values are not promised to stay the same across server versions.
    """
    digest = hashlib.sha256(f"little-workflow:migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def _check_idle(conn: AsyncConnection[TupleRow]) -> None:
    """Raise if a pooled connection is dead; cheap when nothing says so (see above).

    An idle connection's socket is readable only if the server wrote to it unasked,
    which in practice means it is closing it; a readable one is then tried for real.
    """
    if conn.closed:
        raise psycopg.OperationalError("the connection is closed")
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        if not poller.poll(0):
            return
    await AsyncConnectionPool.check_connection(conn)


def _describe(params: dict[str, Any], schema: str) -> str:
    """``PostgreSQL database 'db' at host:port, schema 's'``: never the password."""
    host = params.get("host") or params.get("hostaddr") or "the default host"
    port = params.get("port")
    where = f"{host}:{port}" if port else str(host)
    dbname = params.get("dbname") or params.get("user") or "the default database"
    return f"PostgreSQL database {dbname!r} at {where}, schema {schema!r}"


def _driver_message(exc: BaseException, password: str | None) -> str:
    """The driver's message on one line, with the password masked should libpq echo it.

    libpq does not put passwords in its messages; masking is a second line of defence,
    skipped for a password so short that masking it would garble the message instead.
    """
    text = " ".join(part.strip() for part in str(exc).splitlines() if part.strip())
    if password and len(password) >= 4:
        text = text.replace(password, "***")
    return text or type(exc).__name__


class PostgresDatabase:
    """A pooled connection to one schema of one PostgreSQL database, migrated on open.

    Create it with ``await PostgresDatabase.open(spec)``; hand it to ``PostgresStorage``
    and ``PostgresEventLog`` to share one pool between them, and ``await close()`` it
    when both are done. Pool connections are in autocommit mode: a lone statement
    commits on its own, and ``transaction()`` groups several.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[AsyncConnection[TupleRow]],
        *,
        schema: str,
        description: str,
        password: str | None,
        schema_version: int,
    ) -> None:
        """Wrap an open pool; use ``PostgresDatabase.open`` rather than calling this."""
        self._pool = pool
        self._password = password
        self._closed = False
        #: The schema holding the tables.
        self.schema = schema
        #: Names the database in messages (host, port, database, schema; no password).
        self.description = description
        #: The migration version the schema was at once opened.
        self.schema_version = schema_version

    @classmethod
    async def open(
        cls,
        spec: StoreSpec,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> PostgresDatabase:
        """Connect to the database ``spec`` names, migrate its schema, open the pool.

        Raises ``StorageUnavailableError`` if the server cannot be reached (within
        ``connect_timeout`` seconds, unless the URL sets its own ``connect_timeout``),
        ``SchemaVersionError`` if the schema was migrated by a newer version.
        """
        if spec.kind != "postgres" or spec.conninfo is None:
            raise ConfigError(f"PostgresDatabase needs a postgresql: store, not {spec.kind!r}")
        if max_connections < 1:
            raise ConfigError(f"max_connections must be at least 1, not {max_connections}")
        try:
            params = conninfo_to_dict(spec.conninfo)
        except psycopg.Error as exc:
            # The message may quote the URL, password and all: leave it out.
            raise InvalidStoreUrlError(
                "the postgresql: store URL is not a valid libpq connection string"
            ) from exc
        raw_password = params.get("password")
        password = None if raw_password is None else str(raw_password)
        description = _describe(params, spec.schema)
        connect_kwargs: dict[str, Any] = {"autocommit": True}
        # Without a connect_timeout libpq can wait for minutes on a host that drops
        # packets; an explicit one in the URL wins.
        if "connect_timeout" not in params:
            connect_kwargs["connect_timeout"] = max(2, round(connect_timeout))
        if "application_name" not in params:
            connect_kwargs["application_name"] = _APPLICATION_NAME
        # So that a worker cut off from the server does not wait on a dead connection
        # for minutes or hours; settings in the URL win.
        for name, value in DEFAULT_TCP_SETTINGS.items():
            if name not in params:
                connect_kwargs[name] = value
        schema = spec.schema

        async def configure(conn: AsyncConnection[TupleRow]) -> None:
            # Session-level, on every pooled connection: the backends write unqualified
            # table names. pg_catalog stays implicitly first.
            await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))

        def translate(exc: Exception, doing: str) -> StorageError:
            return _translate(exc, doing, description=description, password=password)

        # A direct first connection reports libpq's own reason (refused, unknown host,
        # authentication) at once; the pool would retry until its timeout.
        try:
            conn = await psycopg.AsyncConnection.connect(spec.conninfo, **connect_kwargs)
        except psycopg.Error as exc:
            raise translate(exc, "connect") from exc
        try:
            await configure(conn)
            version = await _migrate(conn, schema, description)
        except psycopg.Error as exc:
            raise translate(exc, "prepare the schema") from exc
        finally:
            await conn.close()

        pool: AsyncConnectionPool[AsyncConnection[TupleRow]] = AsyncConnectionPool(
            spec.conninfo,
            kwargs=connect_kwargs,
            min_size=1,
            max_size=max_connections,
            open=False,
            configure=configure,
            check=_check_idle,
            name=f"little-workflow:{schema}",
        )
        try:
            await pool.open(wait=True, timeout=connect_timeout)
        except psycopg.Error as exc:
            await pool.close()
            raise translate(exc, "open a connection pool") from exc
        return cls(
            pool,
            schema=schema,
            description=description,
            password=password,
            schema_version=version,
        )

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called."""
        return self._closed

    @contextlib.asynccontextmanager
    async def connection(self, doing: str) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A pooled connection (autocommit), returned to the pool on exit.

        ``doing`` says what the caller is doing ("read run 'r1'") for error messages.
        Driver errors raised inside become ``StorageError``/``StorageUnavailableError``.
        """
        if self._closed:
            raise StorageError(f"cannot {doing}: the connection to {self.description} was closed")
        try:
            async with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as exc:
            raise _translate(
                exc, doing, description=self.description, password=self._password
            ) from exc
        except UnicodeEncodeError as exc:
            # Only text headed for the server is encoded, and keys are validated first,
            # so this is a value or event holding a lone surrogate.
            bad = exc.object[exc.start : exc.end]
            raise InvalidValueError(
                f"cannot {doing}: the text holds a lone surrogate ({bad!r} at position "
                f"{exc.start}), which PostgreSQL cannot store; nothing was written"
            ) from exc

    @contextlib.asynccontextmanager
    async def transaction(self, doing: str) -> AsyncIterator[AsyncConnection[TupleRow]]:
        """A pooled connection inside one transaction: committed on a normal exit,
        rolled back if anything (a driver error, ``ConflictError``, ...) escapes.
        """
        async with self.connection(doing) as conn, conn.transaction():
            yield conn

    async def close(self) -> None:
        """Close the pool and its connections; later use raises ``StorageError``."""
        if not self._closed:
            self._closed = True
            await self._pool.close()


def _translate(
    exc: Exception, doing: str, *, description: str, password: str | None
) -> StorageError:
    """The library error for a driver error met while doing ``doing`` ("read key 'k'")."""
    message = f"cannot {doing} ({description}): {_driver_message(exc, password)}"
    if isinstance(exc, psycopg.OperationalError):
        # Connection failures, and the server refusing work (shutting down, out of
        # resources, statement cancelled): the store is not usable right now.
        end = "" if message.endswith((".", "?", "!")) else "."
        return StorageUnavailableError(
            f"{message}{end} Check that the server is running and reachable, and that the "
            "store URL is right."
        )
    return StorageError(message)


async def _recorded_versions(conn: AsyncConnection[TupleRow], schema: str) -> set[int] | None:
    """The versions recorded in the schema, or ``None`` if it has no migrations table."""
    cursor = await conn.execute(
        "SELECT 1 FROM pg_catalog.pg_class c"
        " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = %s",
        [schema, MIGRATIONS_TABLE],
    )
    if await cursor.fetchone() is None:
        return None
    cursor = await conn.execute(
        sql.SQL("SELECT version FROM {}.{}").format(
            sql.Identifier(schema), sql.Identifier(MIGRATIONS_TABLE)
        )
    )
    return {int(row[0]) for row in await cursor.fetchall()}


def _refuse_unknown(versions: set[int], description: str) -> None:
    unknown = sorted(version for version in versions if not 1 <= version <= len(MIGRATIONS))
    if unknown:
        shown = ", ".join(str(version) for version in unknown)
        raise SchemaVersionError(
            f"{MIGRATIONS_TABLE} in {description} records schema version(s) {shown}, but "
            f"this little-workflow knows versions 1 to {len(MIGRATIONS)}: the schema was "
            "migrated by a newer little-workflow. Upgrade little-workflow, or use another "
            "schema (?schema=NAME in the store URL)."
        )


async def _migrate(conn: AsyncConnection[TupleRow], schema: str, description: str) -> int:
    """Bring ``schema`` up to the latest version; return that version."""
    latest = len(MIGRATIONS)
    # Fast path without the lock: an up-to-date schema is the common case, and taking
    # an exclusive lock on every open would serialize every process's start-up.
    versions = await _recorded_versions(conn, schema)
    if versions is not None:
        _refuse_unknown(versions, description)
        if len(versions) == latest:
            return latest

    schema_id = sql.Identifier(schema)
    async with conn.transaction():
        # Held until commit: a concurrent opener waits here, then sees our versions.
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", [_lock_key(schema)])
        cursor = await conn.execute(
            "SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s", [schema]
        )
        if await cursor.fetchone() is None:
            # Only when missing: CREATE SCHEMA IF NOT EXISTS still needs the CREATE
            # privilege on the database, which a least-privileged role may lack.
            await conn.execute(sql.SQL("CREATE SCHEMA {}").format(schema_id))
        # Re-set now that the schema surely exists, so the scripts' unqualified names
        # land in it.
        await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema_id))
        await conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.{} ("
                " version integer PRIMARY KEY,"
                " applied_at timestamptz NOT NULL DEFAULT now())"
            ).format(schema_id, sql.Identifier(MIGRATIONS_TABLE))
        )
        versions = await _recorded_versions(conn, schema) or set()
        _refuse_unknown(versions, description)
        for version, script in enumerate(MIGRATIONS, start=1):
            if version in versions:
                continue
            # A script is several statements and takes no parameters, so it goes as one
            # simple query.
            await conn.execute(script)
            await conn.execute(
                sql.SQL("INSERT INTO {}.{} (version, applied_at) VALUES (%s, now())").format(
                    schema_id, sql.Identifier(MIGRATIONS_TABLE)
                ),
                [version],
            )
    return latest
