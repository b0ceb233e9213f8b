"""Instructions per durable step, counted by callgrind: a figure load cannot move.

``python -m bench.instructions [--src DIR] [--synchronous NORMAL|FULL]`` runs a chain of
``execute`` steps (``bench.peers._lw.chain``) twice under ``valgrind --tool=callgrind``,
with 300 and with 1,300 steps, and prints the difference divided by 1,000: what one more
step costs, with what is done once per process (imports, opening the store) cancelled
out. What grows with the definition is counted: building and validating the chain's
``Workflow`` (~111k instructions a step on 2026-12-07) and pinning it (hashing, the input
check: ~120k). ``--again`` also counts a second run of the same ``Workflow`` object, whose
analysis is cached (``little_workflow/_object_cache.py``): what a worker or a server that
runs one definition many times pays per step. Seconds on these shared machines move by
±20% from run to run; instruction counts repeat to within about 0.3% (hash
randomization), so a change of 1% is visible. ``--src`` measures another tree
(``git archive REV little_workflow bench | tar -x -C DIR``).
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
        workflow = chain("run", {steps})
        for again in range({runs}):
            await runtime.run(workflow, None, run_id=f"run{{again}}")

asyncio.run(main())
"""


def count(src: Path, steps: int, synchronous: str, step: str = "sync", runs: int = 1) -> int:
    """Instructions of one process that runs a ``steps``-step chain ``runs`` times."""
    function = "async_step" if step == "async" else "step"
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as driver:
        driver.write(
            _DRIVER.format(
                src=str(src), steps=steps, synchronous=synchronous, step=function, runs=runs
            )
        )
    try:
        _, instructions = callgrind([sys.executable, driver.name])
    finally:
        os.unlink(driver.name)
    return instructions


def callgrind(
    command: list[str], env: dict[str, str] | None = None, timeout: float = 1800
) -> tuple[str, int]:
    """``command``'s stdout and the instructions it ran, counted by callgrind."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        capture_output=True, text=True, check=False, timeout=timeout, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{command} failed under callgrind:\n{done.stderr[-3000:]}")
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{done.stderr[-2000:]}")
    return done.stdout, int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--synchronous", choices=("NORMAL", "FULL"), default="NORMAL")
    parser.add_argument("--step", choices=("sync", "async"), default="sync")
    parser.add_argument(
        "--again",
        action="store_true",
        help="also count a second run of the same Workflow object (four counts, not two)",
    )
    args = parser.parse_args()
    low = count(args.src, 300, args.synchronous, args.step)
    high = count(args.src, 1300, args.synchronous, args.step)
    print(
        f"{args.src}: {(high - low) // 1000:,} instructions per step "
        f"({args.synchronous}, {args.step} step)"
    )
    if args.again:
        low2 = count(args.src, 300, args.synchronous, args.step, runs=2)
        high2 = count(args.src, 1300, args.synchronous, args.step, runs=2)
        print(
            f"{args.src}: {((high2 - low2) - (high - low)) // 1000:,} instructions per step "
            "of a second run of the same workflow object"
        )


if __name__ == "__main__":
    main()
