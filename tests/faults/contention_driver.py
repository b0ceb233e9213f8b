"""A process of the contention test: ``python -m tests.faults.contention_driver``.

Arguments: ``DATA_DIR PREFIX RUNS GO_FILE``. Opens a ``Runtime`` on ``DATA_DIR`` (its
default SQLite store, default busy timeout), says it is ready (``GO_FILE.PREFIX.ready``)
and waits until ``GO_FILE`` exists, so that every process starts writing at the same
moment; then runs ``RUNS`` runs of ``flows/contention.yaml`` at once, with run ids
``PREFIX-0`` ... and start values 0 .... Prints one JSON line per run: its id, status and
output, or the type, code and message of the exception that reached this caller.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from little_workflow.runtime import Runtime

FLOW = Path(__file__).resolve().parent / "flows" / "contention.yaml"
ITEMS = [1, 2, 3, 4, 5, 6]


async def _one(rt: Runtime, run_id: str, start: int) -> dict[str, object]:
    try:
        result = await rt.run(FLOW, {"start": start, "items": ITEMS}, run_id=run_id)
    except Exception as exc:
        return {
            "run_id": run_id,
            "error": type(exc).__name__,
            "code": getattr(exc, "code", None),
            "message": str(exc),
        }
    return {"run_id": run_id, "status": result.status.value, "output": result.output}


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.01)


async def main(data_dir: str, prefix: str, runs: int, go_file: str) -> None:
    async with Runtime(data_dir) as rt:
        go = Path(go_file)
        go.with_name(f"{go.name}.{prefix}.ready").touch()
        await asyncio.to_thread(_wait_for, go)
        results = await asyncio.gather(
            *(_one(rt, f"{prefix}-{index}", index) for index in range(runs))
        )
    for result in results:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    began = time.monotonic()
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
    print(json.dumps({"seconds": time.monotonic() - began}), flush=True)
