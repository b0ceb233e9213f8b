"""Issue 23: N runs driven at once in one process, events per second against one run.

Run: ``python -m bench.group_commit [--rounds 5] [--steps 50] [--store URL]``

Each round runs, through one real ``Runtime`` on SQLite (``synchronous=FULL``, the
default: every durable step is fsynced), a chain of ``--steps`` trivial ``execute``
steps (one commit per step) in 1, 2, 4 and 8 runs at once (``asyncio.gather``), the
order of the four rotated from round to round. Reported per N, medians over rounds:
events appended per second, µs of wall time per step, and the ratio of events per second
to one run's in the same round. Appends of concurrent runs that are ready together share
one transaction and one fsync (``storage/_sqlite_db.py``, "Grouped"); one run alone
keeps the inline commit, so its figure is also the single-run regression check.

The workload uses only the public API, so the same file measures an older revision:
``PYTHONPATH=<checkout> python <this file>``. ``--store`` takes any store URL (a
``postgresql://…?schema=…`` one measures Postgres). Files live under ``.bench-data/``
in the repository (the real disk, never tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

COUNTS = (1, 2, 4, 8)


async def trivial(index: int) -> dict[str, int]:
    """The step body: as cheap as a step can be, so the commits are what is measured."""
    return {"index": index}


def chain(steps: int) -> Workflow:
    """``steps`` execute steps in a row, then the output."""
    body: list[ExecuteStep | OutputStep] = [
        ExecuteStep(id=f"s{i}", fn="bench.group_commit:trivial", with_={"index": i})
        for i in range(steps)
    ]
    body.append(OutputStep(id="out", value=f"${{steps.s{steps - 1}.output.index}}"))
    return Workflow(name=f"group-chain-{steps}", steps=body)


async def concurrent(
    runtime: Runtime, workflow: Workflow, prefix: str, runs: int
) -> tuple[float, float]:
    """(events per second, µs of wall time per step) of ``runs`` runs driven at once."""
    ids = [f"{prefix}_{index}" for index in range(runs)]
    start = time.perf_counter()
    await asyncio.gather(*(runtime.run(workflow, None, run_id=run_id) for run_id in ids))
    elapsed = time.perf_counter() - start
    events = 0
    for run_id in ids:
        events += await runtime.events.last_seq(run_id)
    return events / elapsed, elapsed / (runs * (len(workflow.steps) - 1)) * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--store", default=None, help="a store URL (default: SQLite FULL)")
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="group-", dir=base))
    try:
        workflow = chain(args.steps)
        rates: dict[int, list[float]] = {n: [] for n in COUNTS}
        step_times: dict[int, list[float]] = {n: [] for n in COUNTS}
        ratios: dict[int, list[float]] = {n: [] for n in COUNTS}
        async with Runtime(root / "data", store=args.store) as runtime:
            # Warm-up: page cache, statement caches, the workflow pinned in the store.
            await concurrent(runtime, workflow, "warm", 8)
            for round_index in range(args.rounds):
                shift = round_index % len(COUNTS)
                measured: dict[int, tuple[float, float]] = {}
                for n in COUNTS[shift:] + COUNTS[:shift]:
                    measured[n] = await concurrent(runtime, workflow, f"r{round_index}_{n}", n)
                for n in COUNTS:
                    rates[n].append(measured[n][0])
                    step_times[n].append(measured[n][1])
                    ratios[n].append(measured[n][0] / measured[1][0])
        print(
            f"{args.rounds} interleaved rounds, chains of {args.steps} one-commit steps, "
            f"store {args.store or 'SQLite FULL (default)'}:"
        )
        print("  runs at once   events/s   µs/step (wall)   vs one run (median of rounds)")
        for n in COUNTS:
            rate = statistics.median(rates[n])
            step_us = statistics.median(step_times[n])
            ratio = statistics.median(ratios[n])
            print(f"  {n:>12}   {rate:8.0f}   {step_us:14.1f}   {ratio:5.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
