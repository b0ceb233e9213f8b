"""A host process for the host-crash test (the seed's "Survive a Host Crash").

``python -m tests.platform.crash_host ROOT TRANSPORT ADDRESS PHASE COUNT``

Every boot builds the same harness: a local subprocess adapter over ``ROOT/subprocess``
and a checkpoint store over ``ROOT/checkpoints``. It serves a durable stream to a UI
client at ``ADDRESS`` (its queue shares the adapter's root) and relays the child's
frames into it. The child's seq is the stream's seq, so a relay that is killed after
publishing a frame and before acking it to the child skips it when it comes again:
exactly once end to end.

``first`` spawns the child with ``detached_spawn``; ``second`` finds it again with
``reattach_live_children``. Each prints one JSON line saying what it found, then
relays until the child is done and the client has acked everything.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from little_workflow.durable import create_checkpoint_store
from little_workflow.harness import (
    AgentHarness,
    HarnessEnvironment,
    HarnessStorage,
    reattach_live_children,
    sequence,
)
from little_workflow.platform import LocalHandle, create_local_subprocess_adapter
from little_workflow.platform.ipc import DurableServer, create_durable_outbound_queue
from little_workflow.storage import create_file_storage

TOKEN = "crash-test-token"
TARGET = "little_workflow.testing.subprocess_targets:ticker"


def build_harness(root: Path, transport: str) -> AgentHarness:
    """The same construction on every boot."""
    return AgentHarness(
        name="crash-proof",
        agent_graph=sequence([], id="idle"),
        environment=HarnessEnvironment(
            subprocess=create_local_subprocess_adapter(
                storage=create_file_storage(root=root / "subprocess"),
                transport=transport,  # type: ignore[arg-type]
            ),
            storage=HarnessStorage(
                checkpoint_store=create_checkpoint_store(
                    storage=create_file_storage(root=root / "checkpoints")
                )
            ),
        ),
    )


async def main(root: Path, transport: str, address: str, phase: str, count: int) -> int:
    harness = build_harness(root, transport)
    queue = await create_durable_outbound_queue(
        storage=create_file_storage(root=root / "subprocess"), socket_path="host:ui"
    )
    server = DurableServer(queue, address, token=None if transport == "unix" else TOKEN)
    await server.start()
    if phase == "first":
        parent = harness.create_context(id="exec_host", cwd=str(root / "work"))
        spawned = harness.detached_spawn(
            TARGET,
            {"count": count, "delay": 0.002, "hold_last": str(root / "release")},
            parent,
            cwd_init=str(root / "work"),
        )
        child = await spawned.started()
        assert isinstance(child, LocalHandle)
        report = {"phase": phase, "handle": child.handle_id, "pid": child.pid}
    else:
        live = await reattach_live_children(harness)
        child = live.handles[0]  # type: ignore[assignment]
        assert isinstance(child, LocalHandle)
        report = {
            "phase": phase,
            "handles": [handle.handle_id for handle in live.handles],
            "contexts": {key: ctx.id for key, ctx in live.contexts.items()},
            "cwd": {key: ctx.cwd for key, ctx in live.contexts.items()},
            "pid": child.pid,
        }
    print(json.dumps(report), flush=True)
    async for seq, frame in child.frames():
        if seq <= queue.last_seq:
            continue  # published by the host before this one, never acked to the child
        published = await server.publish(json.dumps(frame))
        if published != seq:
            print(f"relay out of step: child seq {seq}, stream seq {published}", file=sys.stderr)
            return 3
    result = await child.wait()
    while queue.acked_through < queue.last_seq:  # noqa: ASYNC110 (the server has no ack event)
        await asyncio.sleep(0.01)
    await server.close()
    print(json.dumps({"result": result}), flush=True)
    return 0


if __name__ == "__main__":
    root, transport, address, phase, count = sys.argv[1:6]
    os.makedirs(root, exist_ok=True)
    sys.exit(asyncio.run(main(Path(root), transport, address, phase, int(count))))
