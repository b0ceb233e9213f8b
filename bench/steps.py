"""The runtime's cost per durable ``execute`` step, and the time to resume a long run.

Run: ``python -m bench.steps [--rounds 5] [--steps 300] [--resume-steps 10000]``

1. **Per step.** A workflow of ``--steps`` trivial ``execute`` steps (an async function
   returning a small dict) runs start to finish; its time divided by the steps is set
   next to one raw ``sqlite3`` insert + commit (``synchronous=FULL``, WAL, same row
   shape) measured in the same process, interleaved round by round. The runtime writes
   one commit per step: ``StepCompleted`` with one fsync, the write-behind
   ``StepAttemptStarted`` held before it in the same transaction; the target is
   at most 1.3x one raw FULL commit, i.e. one fsync per step plus little else. The same
   chain with a sync step function (``def``, run in a worker thread: the thread hop) is
   measured in the same rounds, against the same baseline and against the async chain.
2. **Resume.** A loop (``work`` then the decision ``check``, each with a high
   ``maxVisits``) runs until ``--resume-steps`` steps have completed and is interrupted
   at the next ``work`` visit (its task is cancelled there, as a kill would leave it); a
   fresh ``Runtime`` then resumes it. Reported: seconds from opening the runtime to the
   run's completion, and how many times the event log was read (the resume reads it
   once, then replays every recorded visit from memory).

Files live under ``.bench-data/`` in the repository (the real disk, never tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from little_workflow.lwir import DecisionStep, ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime, StepContext

# Read through the imported module (``bench.steps``), which is not ``__main__``: the
# runtime imports step functions by name.
RELEASED = False


async def trivial(index: int) -> dict[str, int]:
    """The step body: as cheap as a step can be."""
    return {"index": index}


async def gate() -> str:
    """Blocks until the benchmark cancels the run (where the 'kill' happens), unless released."""
    while not importlib.import_module("bench.steps").RELEASED:  # noqa: ASYNC110 - set from another run
        await asyncio.sleep(0.01)
    return "released"


def trivial_sync(index: int) -> dict[str, int]:
    """The same body as a plain ``def``: it runs in a worker thread (the thread hop)."""
    return {"index": index}


def chain(steps: int, fn: str = "bench.steps:trivial") -> Workflow:
    """``steps`` execute steps in a row, then the output."""
    body: list[Any] = [ExecuteStep(id=f"s{i}", fn=fn, with_={"index": i}) for i in range(steps)]
    body.append(OutputStep(id="out", value=f"${{steps.s{steps - 1}.output.index}}"))
    name = f"chain-{steps}" if fn == "bench.steps:trivial" else f"chain-sync-{steps}"
    return Workflow(name=name, steps=body)


async def work(ctx: StepContext) -> int:
    """The loop's body; blocks (until released) once enough visits have completed."""
    if (ctx.visit or 0) == importlib.import_module("bench.steps").STOP_AT:
        await gate()
    return ctx.visit or 0


def check(ctx: StepContext) -> str:
    """The loop's decision: round again until the visit where the body blocked."""
    return "done" if (ctx.visit or 0) >= importlib.import_module("bench.steps").STOP_AT else "again"


STOP_AT = 0


def loop(visits: int) -> Workflow:
    """``work`` and ``check`` alternating ``visits`` times at most."""
    return Workflow(
        name="loop",
        steps=[
            ExecuteStep(id="work", fn="bench.steps:work", max_visits=visits),
            DecisionStep(
                id="check",
                fn="bench.steps:check",
                max_visits=visits,
                routes={"again": "work", "done": "out"},
            ),
            OutputStep(id="out", value="${steps.work.output}"),
        ],
    )


def raw_commits(path: Path, count: int) -> float:
    """µs per raw sqlite3 insert + commit with synchronous=FULL."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "type TEXT NOT NULL, ts REAL NOT NULL, data TEXT NOT NULL, "
        "PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
    )
    (start_seq,) = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM events").fetchone()
    start = time.perf_counter()
    for offset in range(1, count + 1):
        payload = {"stepPath": f"s{offset}", "stepId": f"s{offset}", "output": {"index": offset}}
        conn.execute(
            "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
            ("run_raw", start_seq + offset, "StepCompleted", time.time(), json.dumps(payload)),
        )
        conn.commit()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / count * 1e6


async def runtime_steps(runtime: Runtime, workflow: Workflow, run_id: str) -> float:
    """µs per step for one whole run of ``workflow`` (already pinned by a warm-up run)."""
    start = time.perf_counter()
    await runtime.run(workflow, None, run_id=run_id)
    elapsed = time.perf_counter() - start
    return elapsed / (len(workflow.steps) - 1) * 1e6


class CountingReads:
    """Wraps an event log to count ``read`` calls."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.inner.read(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def resume_time(data_dir: Path, steps: int) -> tuple[float, int, int]:
    """(seconds to resume, event-log reads, steps executed by the resume)."""
    module = importlib.import_module("bench.steps")
    module.STOP_AT = steps // 2
    module.RELEASED = False
    workflow = loop(steps // 2 + 2)
    blocked_at = f"work.visit[{steps // 2}]"
    async with Runtime(data_dir, store=f"sqlite:///{data_dir}/?synchronous=NORMAL") as runtime:
        task = asyncio.create_task(runtime.run(workflow, None, run_id="run_long"))
        while True:
            await asyncio.sleep(0.05)
            state = await runtime.get_state("run_long")
            if state.steps.get(blocked_at) is not None:
                break
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    module.RELEASED = True
    start = time.perf_counter()
    runtime = Runtime(data_dir)
    await runtime.open()
    # Under the payload layer, where the store's own log is read.
    counting = CountingReads(runtime.events.inner)
    runtime.events.inner = counting
    result = await runtime.resume("run_long")
    elapsed = time.perf_counter() - start
    await runtime.close()
    return elapsed, counting.reads, result.executed_steps


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--resume-steps", type=int, default=10_000)
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="steps-", dir=base))
    try:
        workflow = chain(args.steps)
        sync_workflow = chain(args.steps, "bench.steps:trivial_sync")
        raw_times: list[float] = []
        our_times: list[float] = []
        sync_times: list[float] = []
        async with Runtime(root / "data") as runtime:
            # Warm-up: page cache, statement caches, and the workflow pinned in the store
            # (a one-off per workflow version, measured apart below).
            raw_commits(root / "raw.db", 100)
            await runtime_steps(runtime, workflow, "run_warm")
            await runtime_steps(runtime, sync_workflow, "run_warm_sync")
            for round_index in range(args.rounds):
                raw_times.append(raw_commits(root / "raw.db", args.steps))
                our_times.append(await runtime_steps(runtime, workflow, f"run_{round_index}"))
                sync_times.append(
                    await runtime_steps(runtime, sync_workflow, f"run_sync_{round_index}")
                )
            one_step = chain(1)
            start = time.perf_counter()
            await runtime.run(one_step, None, run_id="run_first")
            first_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            await runtime.run(one_step, None, run_id="run_second")
            second_ms = (time.perf_counter() - start) * 1e3
        raw, ours = statistics.median(raw_times), statistics.median(our_times)
        synced = statistics.median(sync_times)
        hop = statistics.median(s - o for s, o in zip(sync_times, our_times, strict=True))
        print(f"per durable execute step, {args.rounds} interleaved rounds of {args.steps} steps:")
        print(f"  raw sqlite3 FULL insert+commit  {raw:8.1f} µs")
        print(f"  little-workflow execute step    {ours:8.1f} µs   ratio {ours / raw:.2f}")
        print(
            f"  the same, sync step (a thread)  {synced:8.1f} µs   ratio {synced / raw:.2f}"
            f"   ({synced / ours:.2f}x the async step; hop {hop:+.1f} µs, median of rounds)"
        )
        print(
            f"a one-step run: {first_ms:.1f} ms the first time (pins the workflow), "
            f"{second_ms:.1f} ms after"
        )
        seconds, reads, executed = await resume_time(root / "resume", args.resume_steps)
        print(
            f"resume of a run with {args.resume_steps} completed steps: {seconds:.3f} s "
            f"({reads} event-log read(s), {executed} step(s) executed)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
