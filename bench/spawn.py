"""What starting a child process costs, against starting a bare interpreter.

Run: ``python -m bench.spawn [--rounds 7]``

Cases, interleaved round by round (medians):

* ``python -c pass``: the floor, a bare interpreter started and waited for (baseline).
* ``python -c "import little_workflow"``: the floor plus the package import a child
  pays before it can run anything.
* ``spawn + wait``: ``LocalSubprocessAdapter.spawn`` of a trivial target on file
  storage (manifest written twice, the child forked, its server bound, its ready line
  read, its status written) and ``wait()`` for the result over the Unix socket.
* ``spawn + wait, no storage``: the same without records.

The table shows each case's median and its ratio to the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from little_workflow.platform import SpawnSpec, create_local_subprocess_adapter
from little_workflow.storage import create_file_storage

TARGET = "little_workflow.testing.subprocess_targets:describe"


def _run(*args: str) -> Callable[[], Awaitable[None]]:
    async def case() -> None:
        await asyncio.to_thread(subprocess.run, [sys.executable, *args], check=True)

    return case


def _spawn(root: Path | None) -> Callable[[], Awaitable[None]]:
    storage = None if root is None else create_file_storage(root=root)
    adapter = create_local_subprocess_adapter(storage=storage, linger=0.0)

    async def case() -> None:
        handle = await adapter.spawn(SpawnSpec(target=TARGET, input=1))
        await handle.wait()

    return case


async def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as directory:
        cases = {
            "python -c pass (baseline)": _run("-c", "pass"),
            'python -c "import little_workflow"': _run("-c", "import little_workflow"),
            "spawn + wait, file storage": _spawn(Path(directory) / "subprocess"),
            "spawn + wait, no storage": _spawn(None),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, case in cases.items():
                started = time.perf_counter()
                await case()
                times[name].append(time.perf_counter() - started)
    baseline = statistics.median(times["python -c pass (baseline)"])
    print("| case | median ms | ratio to `python -c pass` |\n|---|---:|---:|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1000:.1f} | {median / baseline:.1f} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    asyncio.run(main(parser.parse_args().rounds))
