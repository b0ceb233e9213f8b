"""DBOS Transact: a workflow calling a ``@DBOS.step()`` function once per step.

Backends: ``sqlite`` (DBOS's SQLite system database in WAL mode, set on the file before
DBOS opens it: WAL is a property of the file, and DBOS keeps it; ``synchronous`` stays
SQLite's default, FULL), ``sqlite-journal`` (the database as DBOS creates it: a rollback
journal, several fsyncs per commit) and ``pg`` (the system database in this job's schema via
``dbos_system_schema``). The kill workload resumes the way a DBOS application does:
``DBOS.launch()`` in a fresh process recovers the pending workflow, and the harness
waits on its handle. In the history workload the workflow keeps the history in a local
list and passes it to each step, which returns its new message.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

# Ignores for mypy in the project's venv, where the peers are (rightly) absent.
from dbos import DBOS, SetWorkflowID  # type: ignore[import-not-found, unused-ignore]

from bench.peers._common import Body, Calls, History, Job, message, pg_bytes, sqlite_bytes

_body = Body()


@DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
def step(index: int) -> dict[str, int]:
    """A trivial step; in the kill workload it logs its call, and one of them kills."""
    _body.step(index)
    return {"index": index}


@DBOS.workflow()  # type: ignore[untyped-decorator, unused-ignore]
def chain(steps: int) -> int:
    """``steps`` steps in a row."""
    for index in range(steps):
        step(index)
    return steps


@DBOS.step()  # type: ignore[untyped-decorator, unused-ignore]
def say(index: int, history: list[dict[str, str]]) -> dict[str, str]:
    """One turn of the growing history: sees the history, returns the new message."""
    _body.turn(index)
    return message(index)


@DBOS.workflow()  # type: ignore[untyped-decorator, unused-ignore]
def conversation(steps: int) -> int:
    """``steps`` turns, each appending one message to the history."""
    history: list[dict[str, str]] = []
    for index in range(steps):
        history.append(say(index, history))
    return len(history)


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` on DBOS."""
    logging.getLogger("dbos").setLevel(logging.WARNING)
    path = Path(job.dir) / "dbos.db"
    config: dict[str, Any] = {"name": "peers", "log_level": "WARNING"}
    if job.backend == "pg":
        config["system_database_url"] = job.pg_url
        config["dbos_system_schema"] = job.schema
    else:
        if job.backend == "sqlite":
            conn = sqlite3.connect(path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.close()
        config["system_database_url"] = f"sqlite:///{path}"
    DBOS(config=config)  # type: ignore[arg-type, unused-ignore]
    DBOS.launch()
    try:
        if job.workload == "steps":
            if job.warmup:
                with SetWorkflowID("warm"):
                    chain(job.warmup)
            wall, cpu = time.perf_counter(), time.process_time()
            with SetWorkflowID("run"):
                chain(job.steps)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            return {
                "us_per_step": wall / job.steps * 1e6,
                "cpu_us_per_step": cpu / job.steps * 1e6,
            }
        if job.workload == "kill":
            _body.calls = Calls(job.counter_path)
            if job.phase == "first":
                _body.kill_at = job.kill_at
                with SetWorkflowID("killed"):
                    chain(job.steps)
                raise AssertionError("the step at kill_at did not kill this process")
            # launch() has already handed the pending workflow to recovery.
            result = DBOS.retrieve_workflow("killed").get_result()
            assert result == job.steps, result
            return {"done_wall": time.time()}
        if job.workload == "history":
            if job.backend == "pg":
                _body.history = History(job.steps, lambda: pg_bytes(job.pg_url, job.schema))
            else:
                _body.history = History(job.steps, lambda: sqlite_bytes(path))
            _body.history.bytes_start = _body.history.size()
            with SetWorkflowID("history"):
                conversation(job.steps)
            return _body.history.result(_body.history.size())
        raise ValueError(f"unknown workload {job.workload!r}")
    finally:
        DBOS.destroy()
