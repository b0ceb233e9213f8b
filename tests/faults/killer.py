"""A child process that dies by SIGKILL in the middle of a file write, for the torn-write tests.

``python -m tests.faults.killer SCENARIO ROOT [--before-rename PATTERN#N] [--mid-write N]
[-- CLI ARGS]``

* ``--before-rename PATTERN#N``: the N-th ``os.replace``/``os.rename`` whose destination
  contains ``PATTERN`` SIGKILLs this process instead of renaming: the temp file is
  written and fsynced, the target not yet replaced.
* ``--mid-write N``: the N-th ``os.write`` into a temp file (a name starting with ``~``
  or ``.~``, the prefixes of every atomic writer) writes half its bytes, then SIGKILLs.

The hooks wrap the ``os`` functions the library looks up at each call; nothing in the
library is changed or told. ``SCENARIO`` writes a first version of something (whole),
then a second one, which the armed hook tears; the test then reads what is on disk in
its own process and makes the next write. ``cli`` runs the command line (the rest of
the arguments after ``--``), for the outer-loop manifest.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import runpy
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from little_workflow.artifacts import ArtifactStore
from little_workflow.durable import CheckpointSnapshot, create_checkpoint_store
from little_workflow.memory import open_memory
from little_workflow.platform import SpawnSpec, create_local_subprocess_adapter
from little_workflow.platform.ipc import create_durable_outbound_queue
from little_workflow.storage import FileBlobStore, create_file_storage

#: What the scenarios write, shared with the tests that check it.
KV_KEY = "runs/run-1/value"
EXECUTION_ID = "exec-1"
ARTIFACT = ("report.txt", "run-1", "write")
QUEUE_SOCKET = "/run/torn-queue.sock"
HANDLE_ID = "child-1"
FIRST_BLOB, SECOND_BLOB = b"first blob", b"second blob"
DESCRIBE = "little_workflow.testing.subprocess_targets:describe"


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def arm_before_rename(spec: str) -> None:
    pattern, _, count = spec.rpartition("#")
    target, seen = int(count), 0
    real_replace, real_rename = os.replace, os.rename

    def check(dst: Any) -> None:
        nonlocal seen
        if pattern in os.fsdecode(dst):
            seen += 1
            if seen == target:
                die()

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        check(dst)
        real_replace(src, dst, **kwargs)

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        check(dst)
        real_rename(src, dst, **kwargs)

    os.replace, os.rename = replace, rename


def arm_mid_write(target: int) -> None:
    seen = 0
    real_write = os.write

    def write(fd: int, data: Any) -> int:
        nonlocal seen
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            name = ""
        if name.startswith(("~", ".~")):
            seen += 1
            if seen == target:
                real_write(fd, bytes(data)[: max(1, len(data) // 2)])
                die()
        return real_write(fd, data)

    os.write = write


def snapshot(version: int) -> CheckpointSnapshot:
    return CheckpointSnapshot(
        execution_id=EXECUTION_ID,
        layers={"scratchpad": {"version": version, "notes": "x" * 2000}},
        captured_at=f"2026-01-0{version}T00:00:00Z",
    )


async def kv(root: Path) -> None:
    storage = create_file_storage(root / "kv")
    await storage.set(KV_KEY, {"version": 1})
    await storage.set(KV_KEY, {"version": 2})


async def checkpoint(root: Path) -> None:
    store = create_checkpoint_store(storage=create_file_storage(root / "checkpoints"))
    await store.save(snapshot(1))
    await store.save(snapshot(2))


async def memory(root: Path) -> None:
    store, _files = open_memory(root / "memory", None)
    await store.put("notes", "topic", {"version": 1})
    await store.put("notes", "topic", {"version": 2})


async def blob(root: Path) -> None:
    store = FileBlobStore(root / "blobs")
    await store.put(FIRST_BLOB)
    await store.put(SECOND_BLOB)


async def artifact(root: Path) -> None:
    store = ArtifactStore(root)
    name, run_id, step = ARTIFACT
    store.put(name, b"version 1\n", run_id=run_id, step_path=step)
    store.put(name, b"version 2\n", run_id=run_id, step_path=step)


async def queue(root: Path) -> None:
    storage = create_file_storage(root / "queue")
    outbound = await create_durable_outbound_queue(storage=storage, socket_path=QUEUE_SOCKET)
    await outbound.append('{"frame":1}')
    await outbound.append('{"frame":2}')


async def subprocess_manifest(root: Path) -> None:
    adapter = create_local_subprocess_adapter(
        storage=create_file_storage(root / "subprocess"),
        runtime_dir=str(root / "runtime"),
        linger=0.5,
    )
    spec = SpawnSpec(
        target=DESCRIBE,
        input={"n": 1},
        handle_id=HANDLE_ID,
    )
    await adapter.spawn(spec)


SCENARIOS: dict[str, Callable[[Path], Coroutine[Any, Any, None]]] = {
    "kv": kv,
    "checkpoint": checkpoint,
    "memory": memory,
    "blob": blob,
    "artifact": artifact,
    "queue": queue,
    "subprocess": subprocess_manifest,
}


def main() -> None:
    argv = sys.argv[1:]
    rest = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("scenario", choices=[*SCENARIOS, "cli"])
    parser.add_argument("root", type=Path)
    parser.add_argument("--before-rename")
    parser.add_argument("--mid-write", type=int)
    args = parser.parse_args(argv[: len(argv) - len(rest) - (1 if "--" in argv else 0)])
    if args.before_rename:
        arm_before_rename(args.before_rename)
    if args.mid_write:
        arm_mid_write(args.mid_write)
    if args.scenario == "cli":
        sys.argv = ["little_workflow", *rest]
        runpy.run_module("little_workflow", run_name="__main__", alter_sys=True)
        return
    asyncio.run(SCENARIOS[args.scenario](args.root))


if __name__ == "__main__":
    main()
