"""The cost per step of a code-first workflow, next to the same chain in LWIR.

Run: ``python -m bench.code_first [--rounds 5] [--steps 1000]``

A code-first body calls one trivial async step ``--steps`` times in a loop
(``ctx.step(trivial, i)``: paths ``trivial``, ``trivial.visit[1]``, ...); the LWIR chain
has ``--steps`` ``execute`` steps of the same function (``bench.steps.chain``). Both run
start to finish in the same process, round after round, interleaved with one raw
``sqlite3`` insert + commit (``synchronous=FULL``, WAL) per step as the floor: a step is
one fsynced commit. Reported: the median µs per step of each, and the code-first cost as
a ratio of the LWIR one (the target is within 10%). Files live under ``.bench-data/``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.steps import chain, raw_commits, runtime_steps, trivial
from little_workflow import Runtime, WorkflowContext, workflow


@workflow
async def code_chain(ctx: WorkflowContext, steps: int) -> int:
    """``steps`` calls of ``trivial`` in a row; the last one's index."""
    last = {"index": -1}
    for index in range(steps):
        last = await ctx.step(trivial, index)
    return last["index"]


async def code_steps(runtime: Runtime, steps: int, run_id: str) -> float:
    """µs per step of one whole code-first run of ``steps`` steps."""
    start = time.perf_counter()
    await runtime.run(code_chain, {"steps": steps}, run_id=run_id)
    return (time.perf_counter() - start) / steps * 1e6


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="code-first-", dir=base))
    try:
        lwir = chain(args.steps)
        raw_times: list[float] = []
        lwir_times: list[float] = []
        code_times: list[float] = []
        async with Runtime(root / "data") as runtime:
            raw_commits(root / "raw.db", 100)
            await runtime_steps(runtime, lwir, "run_warm")
            await code_steps(runtime, 50, "run_warm_code")
            for index in range(args.rounds):
                raw_times.append(raw_commits(root / "raw.db", args.steps))
                lwir_times.append(await runtime_steps(runtime, lwir, f"run_lwir_{index}"))
                code_times.append(await code_steps(runtime, args.steps, f"run_code_{index}"))
        raw = statistics.median(raw_times)
        lwir_us = statistics.median(lwir_times)
        code_us = statistics.median(code_times)
        print(f"per durable step, {args.rounds} interleaved rounds of {args.steps} steps:")
        print(f"  raw sqlite3 FULL insert+commit  {raw:8.1f} µs")
        print(f"  LWIR execute step               {lwir_us:8.1f} µs   ratio {lwir_us / raw:.2f}")
        print(
            f"  code-first ctx.step             {code_us:8.1f} µs   ratio {code_us / raw:.2f}"
            f"   ({code_us / lwir_us:.2f}x the LWIR step)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
