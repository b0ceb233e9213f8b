"""Instructions per durable step, counted by callgrind: a figure load cannot move.

``python -m bench.instructions [--src DIR] [--synchronous NORMAL|FULL]`` runs a chain of
``execute`` steps (``bench.peers._lw.chain``) twice under ``valgrind --tool=callgrind``,
with 300 and with 1,300 steps, and prints the difference divided by 1,000: what one more
step costs, everything done once per run (imports, opening the store, pinning) cancelled
out. Seconds on these shared machines move by ±20% from run to run; instruction counts
repeat to within about 0.3% (hash randomization), so a change of 1% is visible. ``--src``
measures another tree (``git archive REV little_workflow bench | tar -x -C DIR``).
``--step async`` runs the same body as an ``async def`` (on the event loop) instead of the
peers' plain ``def`` (in a worker thread since issue 17; callgrind runs one thread at a
time and counts no kernel work, so a thread hop shows here only in part).

Needs valgrind (Debian's ``valgrind``); each count takes about 40 s.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_DRIVER = """
import asyncio, sys, tempfile
sys.path.insert(0, {src!r})
from bench.peers._lw import chain, step
from little_workflow.runtime import Runtime

async def async_step(index: int) -> dict[str, int]:
    return {{"index": index}}

async def main() -> None:
    folder = tempfile.mkdtemp()
    runtime = Runtime(
        folder + "/data",
        store=f"sqlite:///{{folder}}/lw.db?synchronous={synchronous}",
        functions={{"peers.lw:step": {step}}},
        import_functions=False,
    )
    async with runtime:
        await runtime.run(chain("warm", 20), None, run_id="warm")
        await runtime.run(chain("run", {steps}), None, run_id="run")

asyncio.run(main())
"""


def count(src: Path, steps: int, synchronous: str, step: str = "sync") -> int:
    """Instructions of one process that runs a ``steps``-step chain."""
    function = "async_step" if step == "async" else "step"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as driver:
        driver.write(
            _DRIVER.format(src=str(src), steps=steps, synchronous=synchronous, step=function)
        )
    try:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, driver.name],
            capture_output=True, text=True, check=True, timeout=1800,
        )  # fmt: skip
    finally:
        os.unlink(driver.name)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    parser.add_argument("--step", choices=("sync", "async"), default="sync")
    args = parser.parse_args()
    low = count(args.src, 300, args.synchronous, args.step)
    high = count(args.src, 1300, args.synchronous, args.step)
    print(
        f"{args.src}: {(high - low) // 1000:,} instructions per step "
        f"({args.synchronous}, {args.step} step)"
    )


if __name__ == "__main__":
    main()
