"""Write PostgreSQL event rows behind the backend's back."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql

from little_workflow.storage import StoreSpec
from little_workflow.storage._checksum import event_checksum
from little_workflow.testing.eventlog_conformance import RawEventWriter


def postgres_writer(spec: StoreSpec) -> RawEventWriter:
    """Insert one event row as given, keeping the run's ``last_seq`` in step with it."""
    assert spec.conninfo is not None
    conninfo = spec.conninfo
    schema = sql.Identifier(spec.schema)

    async def write(run_id: str, seq: int, type_name: str, data: str) -> None:
        now = time.time()
        # A well-formed row, checksum and all: what is tested is what is in it.
        checksum = event_checksum(run_id, seq, type_name, now, data)
        async with await psycopg.AsyncConnection.connect(conninfo) as conn:
            # One transaction: the connection commits when the block exits cleanly.
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.runs (run_id, created_at, updated_at, last_seq)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (run_id) DO UPDATE SET"
                    " last_seq = GREATEST(runs.last_seq, EXCLUDED.last_seq),"
                    " updated_at = EXCLUDED.updated_at"
                ).format(schema),
                [run_id, now, now, seq],
            )
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.events (run_id, seq, type, ts, data, checksum)"
                    " VALUES (%s, %s, %s, %s, %s, %s)"
                ).format(schema),
                [run_id, seq, type_name, now, data, checksum],
            )

    return write
