"""What the orchestrator and the measuring children share: the job, the call counter, sizes.

A job is one measurement in one fresh child process: a system (``lw``, ``raw``,
``dbos``, ``langgraph``), a backend variant, a workload and its counts. It crosses the
process boundary as one JSON argument; the child answers with one JSON line on stdout.
"""

from __future__ import annotations

import base64
import json
import os
import random
import signal
import sqlite3
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Bytes of one message in the growing-history workload (the issue's "2 KB per step").
MESSAGE_BYTES = 2048

#: The prefix of every Postgres schema the harness creates, so a sweep finds leftovers.
SCHEMA_PREFIX = "peers_"


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """One measurement: what to run, where, and how much."""

    system: str
    #: ``sqlite-full``, ``sqlite-normal``, ``sqlite-batch100``, ``sqlite-map100``,
    #: ``sqlite``, ``sqlite-async``, ``pg``: each system module knows its own.
    backend: str
    #: ``steps``, ``kill`` or ``history``.
    workload: str
    #: ``first`` (runs until the kill) or ``resume`` (the fresh process); ``kill`` only.
    phase: str = "first"
    #: A fresh directory for this measurement's files (databases, the call counter).
    dir: str
    steps: int
    warmup: int = 0
    #: The 0-based index of the step whose body SIGKILLs its own process (``kill``).
    kill_at: int = -1
    pg_url: str = ""
    #: This measurement's own Postgres schema (created by the child, dropped after).
    schema: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The job as one command-line argument."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Job:
        """The job a child was given."""
        return cls(**json.loads(text))

    @property
    def counter_path(self) -> Path:
        """Where step bodies log their calls: outside the process that may be killed."""
        return Path(self.dir) / "calls.log"


class Calls:
    """Logs every call of a step body to a file, so steps run twice are counted outside.

    One unbuffered ``write`` on an ``O_APPEND`` descriptor per call, without fsync: the
    test kills the process, not the machine, and a SIGKILL does not take back what the
    kernel already holds in its page cache. An fsync per call would add the same
    ~150 µs to every system's resume time and measure the disk twice.
    """

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(self, index: int) -> None:
        """Note that the body of step ``index`` is running."""
        os.write(self._fd, f"{index}\n".encode())


def count_calls(path: Path, steps: int) -> tuple[int, int]:
    """(distinct steps that ran, steps that ran more than once) according to the log."""
    seen: dict[int, int] = {}
    if path.exists():
        for line in path.read_text().split():
            index = int(line)
            seen[index] = seen.get(index, 0) + 1
    ran = sum(1 for index in range(steps) if index in seen)
    return ran, sum(1 for count in seen.values() if count > 1)


def sqlite_bytes(path: Path) -> int:
    """The database's logical size (pages in use, WAL included) as a fresh reader sees it.

    File sizes would mislead: a WAL file keeps its length after a checkpoint, and a
    rollback-journal database has none.
    """
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    finally:
        conn.close()
    return int(pages) * int(size)


def pg_bytes(pg_url: str, schema: str) -> int:
    """Bytes of every table in ``schema``, with its indexes and TOAST."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def create_schema(pg_url: str, schema: str) -> None:
    """Create this measurement's schema (the peers' own DDL then lands inside it)."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))


def drop_schema(pg_url: str, schema: str) -> None:
    """Drop a measurement's schema and everything in it."""
    import psycopg
    from psycopg import sql

    assert schema.startswith(SCHEMA_PREFIX)
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def message(index: int) -> dict[str, str]:
    """One 2 KB message of the growing history: different for every step.

    Random text, like a model's answer and unlike ``"x" * 2048``: Postgres compresses
    large values (TOAST), so a repetitive payload would flatter the Postgres rows.
    """
    text = base64.b64encode(random.Random(index).randbytes(MESSAGE_BYTES * 3 // 4)).decode()
    return {"role": "assistant", "content": text}


class History:
    """Timestamps each step of the history workload, and the database size halfway.

    ``mark(index)`` is called at the start of each step body: the gap between two marks
    is what one step cost, framework included. Halfway through, ``size()`` is read once
    (its own cost falls into a step outside both windows that are compared).
    """

    def __init__(self, steps: int, size: Any) -> None:
        self.steps = steps
        self.stamps: list[float] = []
        self.size = size
        self.bytes_start = 0
        self.bytes_half = 0

    def mark(self, index: int) -> None:
        """Called at the start of step ``index``'s body."""
        if index == self.steps // 2 and not self.bytes_half:
            self.bytes_half = int(self.size())
        self.stamps.append(time.perf_counter())

    def result(self, bytes_end: int) -> dict[str, float]:
        """µs per step early and late in the run (a sixth each); bytes per step per half.

        The early window skips the first 5% of steps: they pay one-off costs (pinning a
        workflow, compiling a graph, warming caches) that are not growth.
        """
        gaps = [b - a for a, b in zip(self.stamps, self.stamps[1:], strict=False)]
        window = max(1, len(gaps) // 6)
        skip = len(gaps) // 20
        half = self.steps // 2
        return {
            "us_first": sum(gaps[skip : skip + window]) / window * 1e6,
            "us_last": sum(gaps[-window:]) / window * 1e6,
            "bytes_per_step_first_half": (self.bytes_half - self.bytes_start) / half,
            "bytes_per_step_second_half": (bytes_end - self.bytes_half) / (self.steps - half),
            "bytes_total": bytes_end - self.bytes_start,
        }


@dataclass(slots=True)
class Body:
    """What step bodies read: they are module-level functions, so the child sets this."""

    calls: Calls | None = None
    kill_at: int = -1
    history: History | None = None

    def step(self, index: int) -> None:
        """Log the call of step ``index``; SIGKILL this process if it is the one to die."""
        if self.calls is not None:
            self.calls.record(index)
            if index == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    def turn(self, index: int) -> None:
        """Timestamp turn ``index`` of the history workload."""
        assert self.history is not None
        self.history.mark(index)
