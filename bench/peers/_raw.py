"""The baselines: what a careful hand-written log does with ``sqlite3`` or ``psycopg``.

A step is one row (``run_id, seq, type, ts, data``, the step's JSON) inserted and
committed: on SQLite in WAL mode with ``synchronous=FULL`` or ``NORMAL``, or 100 rows per
commit (``batch100``, the ceiling a grouped ``map`` can approach); on Postgres one
``INSERT`` + ``COMMIT`` over one connection. The kill workload resumes from the highest
committed ``seq``.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.peers._common import Calls, History, Job, message, pg_bytes, sqlite_bytes

BATCH = 100
_TABLE = (
    "CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
    "type TEXT NOT NULL, ts DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, seq))"
)


class _Log:
    """One connection, one table; ``append`` commits rows, ``last`` finds where to resume."""

    def __init__(self, job: Job) -> None:
        self.pg = job.backend == "pg"
        self.path = Path(job.dir) / "raw.db"
        self.conn: Any
        if self.pg:
            import psycopg

            self.conn = psycopg.connect(job.pg_url, options=f"-c search_path={job.schema}")
            self.conn.execute(f"CREATE SCHEMA IF NOT EXISTS {job.schema}")
            self.sql = (
                "INSERT INTO events (run_id, seq, type, ts, data) VALUES (%s, %s, %s, %s, %s)"
            )
        else:
            self.conn = sqlite3.connect(self.path)
            self.conn.execute("PRAGMA journal_mode = WAL")
            synchronous = "NORMAL" if job.backend == "sqlite-normal" else "FULL"
            self.conn.execute(f"PRAGMA synchronous = {synchronous}")
            self.sql = "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)"
        self.conn.execute(_TABLE)
        self.conn.commit()

    def append(self, run_id: str, first_seq: int, outputs: list[Any]) -> None:
        now = time.time()
        rows = [
            (run_id, first_seq + offset, "StepCompleted", now, json.dumps({"output": output}))
            for offset, output in enumerate(outputs)
        ]
        if len(rows) == 1:
            self.conn.execute(self.sql, rows[0])
        else:
            self.conn.cursor().executemany(self.sql, rows)
        self.conn.commit()

    def last(self, run_id: str) -> int:
        placeholder = "%s" if self.pg else "?"
        row = self.conn.execute(
            f"SELECT COALESCE(MAX(seq), -1) FROM events WHERE run_id = {placeholder}", (run_id,)
        ).fetchone()
        return int(row[0])


def _steps(log: _Log, run_id: str, start: int, steps: int, batch: int) -> None:
    for index in range(start, steps, batch):
        log.append(run_id, index, [{"index": i} for i in range(index, min(index + batch, steps))])


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` against a raw connection."""
    log = _Log(job)
    batch = BATCH if job.backend == "sqlite-batch100" else 1
    if job.workload == "steps":
        _steps(log, "warm", 0, job.warmup, batch)
        wall, cpu = time.perf_counter(), time.process_time()
        _steps(log, "run", 0, job.steps, batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        return {"us_per_step": wall / job.steps * 1e6, "cpu_us_per_step": cpu / job.steps * 1e6}
    if job.workload == "kill":
        calls = Calls(job.counter_path)
        start = log.last("killed") + 1
        for index in range(start, job.steps):
            calls.record(index)
            if job.phase == "first" and index == job.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            log.append("killed", index, [{"index": index}])
        return {"done_wall": time.time()}
    if job.workload == "history":
        size: Callable[[], int] = (
            (lambda: pg_bytes(job.pg_url, job.schema))
            if log.pg
            else (lambda: sqlite_bytes(log.path))
        )
        history = History(job.steps, size)
        history.bytes_start = size()
        for index in range(job.steps):
            history.mark(index)
            log.append("history", index, [message(index)])
        return history.result(size())
    raise ValueError(f"unknown workload {job.workload!r}")
