"""Microseconds per committed event: ``EventLog`` on SQLite next to raw ``sqlite3``.

Run: ``python -m bench.append [--rounds 7] [--events 400] [--dir PATH]``

The baseline is what a careful hand-written event log does with the standard library:
the same table (``run_id, seq, type, ts, data``, primary key ``(run_id, seq)``), the
event's fields turned into JSON with ``json.dumps``, one ``INSERT`` (or ``executemany``
of 100 rows) and ``commit()``, on its own file in WAL mode with the same ``synchronous``
setting. little-workflow additionally validates the run id, builds and validates a
pydantic event, keeps the run index (``runs`` table) and assigns gap-free sequence
numbers inside the transaction.

Both run in the same process, interleaved round by round (raw, ours, raw, ours, ...)
so that disk and CPU noise hit both alike; the table shows medians over rounds and the
ratio ours / raw. The files live under ``--dir`` (default: a temporary directory next
to this repository, on the same disk as a real data directory: never tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from little_workflow.events import StepCompleted
from little_workflow.storage import StoreSpec
from little_workflow.storage._sqlite import SqliteEventLog
from little_workflow.storage._sqlite_db import SqliteDatabase

BATCH = 100


def _payload(index: int) -> dict[str, object]:
    return {
        "stepPath": f"review-candidates[cand_{index % 50}].worker",
        "stepId": "worker",
        "kind": "execute",
        "visit": None,
        "output": {"score": index * 0.5, "label": "accept", "notes": "x" * 64},
        "route": None,
    }


def _event(index: int) -> StepCompleted:
    payload = _payload(index)
    return StepCompleted(
        step_path=str(payload["stepPath"]),
        step_id="worker",
        kind="execute",
        output=payload["output"],  # type: ignore[arg-type]
    )


class RawLog:
    """The baseline: plain sqlite3, the same row shape, json.dumps, insert + commit."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute(f"PRAGMA synchronous = {synchronous}")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "type TEXT NOT NULL, ts REAL NOT NULL, data TEXT NOT NULL, "
            "PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
        )
        self.conn.commit()
        self.seq = 0

    def single(self, run_id: str, index: int) -> None:
        self.seq += 1
        self.conn.execute(
            "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
            (run_id, self.seq, "StepCompleted", time.time(), json.dumps(_payload(index))),
        )
        self.conn.commit()

    def batch(self, run_id: str, index: int) -> None:
        now = time.time()
        rows = []
        for offset in range(BATCH):
            self.seq += 1
            rows.append(
                (run_id, self.seq, "StepCompleted", now, json.dumps(_payload(index + offset)))
            )
        self.conn.executemany(
            "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)", rows
        )
        self.conn.commit()


async def _time_ours(log: SqliteEventLog, run_id: str, events: int, batch: int) -> float:
    start = time.perf_counter()
    if batch == 1:
        for index in range(events):
            await log.append(run_id, [_event(index)])
    else:
        for index in range(0, events, batch):
            await log.append(run_id, [_event(index + offset) for offset in range(batch)])
    return (time.perf_counter() - start) / events * 1e6


def _time_raw(step: Callable[[str, int], None], run_id: str, events: int, batch: int) -> float:
    start = time.perf_counter()
    for index in range(0, events, batch):
        step(run_id, index)
    return (time.perf_counter() - start) / events * 1e6


async def measure(
    root: Path, synchronous: str, batch: int, rounds: int, events: int
) -> tuple[float, float]:
    """Median µs per event for (raw, ours) over interleaved rounds."""
    folder = root / f"{synchronous.lower()}-{batch}"
    folder.mkdir(parents=True)
    raw = RawLog(folder / "raw.db", synchronous)
    db = await SqliteDatabase.open(
        StoreSpec(kind="sqlite", path=folder / "ours.db", synchronous=synchronous)  # type: ignore[arg-type]
    )
    ours = SqliteEventLog(db, owns_database=True)
    raw_step = raw.single if batch == 1 else raw.batch
    # Warm-up: page cache, statement caches, WAL file allocated.
    _time_raw(raw_step, "run_warm", min(events, 200), batch)
    await _time_ours(ours, "run_warm", min(events, 200), batch)
    raw_times: list[float] = []
    our_times: list[float] = []
    for round_index in range(rounds):
        run_id = f"run_{round_index}"
        raw_times.append(_time_raw(raw_step, run_id, events, batch))
        our_times.append(await _time_ours(ours, run_id, events, batch))
    raw.conn.close()
    await ours.close()
    return statistics.median(raw_times), statistics.median(our_times)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--events", type=int, default=400, help="events per round (single)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="append-", dir=base))
    cases = [("FULL", 1), ("FULL", BATCH), ("NORMAL", 1), ("NORMAL", BATCH)]
    print(f"EventLog.append on SQLite vs raw sqlite3; {args.rounds} interleaved rounds, medians")
    print(f"{'case':<24}{'raw µs/event':>14}{'ours µs/event':>15}{'ratio':>8}")
    try:
        for synchronous, batch in cases:
            events = args.events if batch == 1 else args.events * 10
            raw_us, our_us = await measure(root, synchronous, batch, args.rounds, events)
            label = f"{synchronous}, {'single' if batch == 1 else f'batch {batch}'}"
            print(f"{label:<24}{raw_us:>14.1f}{our_us:>15.1f}{our_us / raw_us:>8.2f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
