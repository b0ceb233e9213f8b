"""Child processes for the conformance suites: real OS processes that share a store.

Run as ``python -m little_workflow.testing._child COMMAND URL ...``. Each command prints
one line per acknowledged write and flushes, so the parent knows exactly what was
acknowledged before it kills the child.
"""

from __future__ import annotations

import asyncio
import sys

from little_workflow.events import StepCompleted
from little_workflow.storage import open_event_log, open_storage


async def kv_write(url: str, name: str, count: int) -> None:
    storage = await open_storage(url)
    try:
        for index in range(count):
            await storage.set(f"{name}/{index:05d}", {"writer": name, "i": index})
            await storage.set(f"shared/{index:05d}", {"writer": name, "i": index})
    finally:
        await storage.close()


async def log_append(url: str, run_id: str, name: str, count: int) -> None:
    """Append ``count`` events one by one; print each acknowledged seq."""
    log = await open_event_log(url)
    try:
        for index in range(count):
            event = StepCompleted(
                step_path=f"{name}.step",
                step_id=name,
                kind="execute",
                output={"writer": name, "i": index, "pad": "p" * 200},
            )
            (seq,) = await log.append(run_id, [event])
            sys.stdout.write(f"{seq} {index}\n")
            sys.stdout.flush()
    finally:
        await log.close()


def main(argv: list[str]) -> int:
    command, url, *rest = argv
    if command == "kv-write":
        asyncio.run(kv_write(url, rest[0], int(rest[1])))
    elif command == "log-append":
        asyncio.run(log_append(url, rest[0], rest[1], int(rest[2])))
    else:
        sys.stderr.write(f"unknown command {command!r}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
