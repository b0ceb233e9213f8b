"""Soak: many runs of a 20-step workflow by concurrent runners, with the figures.

``python -m tests.soak [--store sqlite|postgres|URL] [--runs 1000] [--runners 8]``

Not a pytest module (no ``test_`` name): it takes a minute or more, so it runs on
demand. One process, one ``Runtime``; ``--runners`` asyncio tasks take run numbers from
one counter until ``--runs`` are done. Every run must complete with its output and hold
its exact events (seqs 1..n, one ``StepCompleted`` per step); any error is counted and
printed. Reported: completed runs, errors, wall time, runs and events per second, and
the resident set size after the warm-up (the first ``--runners`` x 5 runs) and at the
end, with the peak, so that growth over the soak shows.

``sqlite`` (the default) makes a fresh data directory with the default store
(``synchronous=FULL``: every durable step is fsynced); ``postgres`` uses
``$LITTLE_WORKFLOW_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1/test``)
in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

STEPS = 20
POSTGRES_URL = os.environ.get(
    "LITTLE_WORKFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def add(value: int, amount: int) -> int:
    """One step: ``value + amount``."""
    return value + amount


def workflow() -> Workflow:
    """``STEPS`` steps in a chain, each adding its number to the previous output."""
    steps: list[ExecuteStep | OutputStep] = []
    previous = "${input.start}"
    for index in range(1, STEPS + 1):
        steps.append(
            ExecuteStep(id=f"s{index}", fn="soak:add", with_={"value": previous, "amount": index})
        )
        previous = f"${{steps.s{index}.output}}"
    steps.append(OutputStep(id="out", value=previous))
    return Workflow(name="soak", steps=steps)


def rss_mib() -> float:
    """The process's resident set size now, in MiB."""
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mib() -> float:
    """The process's peak resident set size so far, in MiB (Linux: ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@contextmanager
def store_for(kind: str) -> Iterator[tuple[str | None, str]]:
    """``(store URL or None for the data directory's SQLite, label)``; cleans up after."""
    if kind == "sqlite":
        yield None, "sqlite (default store, synchronous=FULL)"
        return
    url = POSTGRES_URL if kind == "postgres" else kind
    schema = f"soak_{secrets.token_hex(4)}"
    try:
        yield f"{url}?schema={schema}", f"postgres ({url.split('@')[-1]}, schema {schema})"
    finally:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


async def soak(data_dir: str, store: str | None, runs: int, runners: int) -> dict[str, object]:
    flow = workflow()
    expected_output = sum(range(1, STEPS + 1))
    errors: list[str] = []
    completed = 0
    events = 0
    warm_rss: float | None = None
    warm_up = runners * 5
    next_run = 0
    async with Runtime(data_dir, store=store, functions={"soak:add": add}) as rt:

        async def runner() -> None:
            nonlocal next_run, completed, events, warm_rss
            while next_run < runs:
                number = next_run
                next_run += 1
                run_id = f"soak-{number:05d}"
                try:
                    result = await rt.run(flow, {"start": number}, run_id=run_id)
                    log = await rt.events.read(run_id)
                except Exception as exc:  # counted and shown: a soak reports every error
                    errors.append(f"{run_id}: {type(exc).__name__}: {exc}")
                    continue
                done = [r for r in log if r.type == "StepCompleted"]
                if (
                    result.output != number + expected_output
                    or [r.seq for r in log] != list(range(1, len(log) + 1))
                    or len(done) != STEPS
                    or len({r.event.step_path for r in done}) != STEPS  # type: ignore[attr-defined]
                ):
                    errors.append(f"{run_id}: wrong output or events")
                    continue
                completed += 1
                events += len(log)
                if completed == warm_up:
                    warm_rss = rss_mib()

        began = time.perf_counter()
        await asyncio.gather(*(runner() for _ in range(runners)))
        seconds = time.perf_counter() - began
    return {
        "runs": runs,
        "runners": runners,
        "steps": STEPS,
        "completed": completed,
        "errors": len(errors),
        "firstErrors": errors[:5],
        "seconds": round(seconds, 2),
        "runsPerSecond": round(completed / seconds, 1),
        "events": events,
        "eventsPerSecond": round(events / seconds),
        "rssAfterWarmUpMiB": None if warm_rss is None else round(warm_rss, 1),
        "rssAtEndMiB": round(rss_mib(), 1),
        "peakRssMiB": round(max(peak_rss_mib(), rss_mib(), warm_rss or 0.0), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__)
    parser.add_argument("--store", default="sqlite", help="sqlite, postgres or a store URL")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--runners", type=int, default=8)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="lw-soak-")
    try:
        with store_for(args.store) as (store, label):
            report = asyncio.run(soak(data_dir, store, args.runs, args.runners))
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    report = {"store": label, **report}
    print(json.dumps(report, indent=2))
    return 0 if report["errors"] == 0 and report["completed"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
