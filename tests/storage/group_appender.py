"""A child process for the group-commit tests: many runs appending at once to one file.

``python -m tests.storage.group_appender URL PREFIX RUNS COUNT``: ``RUNS`` runs named
``PREFIX-<n>`` each append ``COUNT`` events one by one, all runs concurrently in one event
loop. Prints ``ack <run> <seq> <index>`` once each append has returned (it is durable
then), and ``batch <size>`` before each grouped transaction, so that the parent knows the
appends were grouped and what was acknowledged before it kills this process.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from little_workflow.events import StepCompleted
from little_workflow.storage import open_event_log
from little_workflow.storage._sqlite_db import SqliteDatabase

_run_batch = SqliteDatabase._run_batch


def _printing_batch(self: SqliteDatabase, batch: list[Any]) -> list[tuple[bool, Any]]:
    # In the worker thread; a whole line per write, so lines never interleave.
    sys.stdout.write(f"batch {len(batch)}\n")
    sys.stdout.flush()
    return _run_batch(self, batch)


async def _appender(log: Any, run_id: str, count: int) -> None:
    for index in range(count):
        # The step's own work, which awaits like any I/O: the other runs go on meanwhile.
        await asyncio.sleep(0)
        event = StepCompleted(
            step_path=f"s{index}",
            step_id=f"s{index}",
            kind="execute",
            output={"run": run_id, "i": index, "pad": "p" * 300},
        )
        (seq,) = await log.append(run_id, [event], expected_seq=index)
        sys.stdout.write(f"ack {run_id} {seq} {index}\n")
        sys.stdout.flush()


async def main(url: str, prefix: str, runs: int, count: int) -> None:
    SqliteDatabase._run_batch = _printing_batch  # type: ignore[method-assign]
    log = await open_event_log(url)
    try:
        await asyncio.gather(*(_appender(log, f"{prefix}-{n}", count) for n in range(runs)))
    finally:
        await log.close()


if __name__ == "__main__":
    url, prefix, runs, count = sys.argv[1:]
    asyncio.run(main(url, prefix, int(runs), int(count)))
