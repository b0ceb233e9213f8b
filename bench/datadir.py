"""What a data directory holds after many finished one-step runs.

Run: ``python -m bench.datadir [--runs 10000] [--data-dir DIR]``

``--runs`` one-step runs (one ``output`` step) are made through the API (``Runtime.run``)
on SQLite with ``synchronous=NORMAL``, one after another in one process. Reported, after
the runtime is closed (the WAL folded into the database): the directories in the data
directory (its root included), its files, and ``du -s`` (KiB allocated).

The data directory is removed and made again first; by default it is
``.bench-data/datadir/`` (the real disk, not a tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import time
from pathlib import Path

from little_workflow.lwir import OutputStep, Workflow
from little_workflow.runtime import Runtime

PLAIN = Workflow(name="plain", steps=(OutputStep(id="out", value="${input.n}"),))


async def make_runs(data_dir: Path, runs: int) -> float:
    """Seconds to make ``runs`` finished one-step runs in ``data_dir``."""
    store = f"sqlite:///{data_dir.resolve() / 'little-workflow.db'}?synchronous=NORMAL"
    async with Runtime(data_dir, store=store) as rt:
        start = time.perf_counter()
        for n in range(runs):
            await rt.run(PLAIN, {"n": n}, run_id=f"run_{n:07d}")
        return time.perf_counter() - start


def count(data_dir: Path) -> tuple[int, int]:
    """Directories (the root included) and files under ``data_dir``."""
    directories, files = 1, 0
    for _root, dirs, names in os.walk(data_dir):
        directories += len(dirs)
        files += len(names)
    return directories, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--data-dir", type=Path, default=Path(".bench-data") / "datadir")
    options = parser.parse_args()
    data_dir: Path = options.data_dir
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True, mode=0o700)
    seconds = asyncio.run(make_runs(data_dir, options.runs))
    directories, files = count(data_dir)
    du = subprocess.run(["du", "-sk", str(data_dir)], capture_output=True, text=True, check=True)
    kib = int(du.stdout.split()[0])
    print(f"runs: {options.runs:,} in {seconds:.1f} s")
    print(f"directories: {directories:,}  files: {files:,}")
    print(f"du -s: {kib:,} KiB ({kib * 1024 / options.runs:,.0f} B per run)")


if __name__ == "__main__":
    main()
