"""The child process of ``LocalSubprocessAdapter``: ``python -m little_workflow.platform._child``.

It reads its spec (JSON) from stdin, so that neither the input nor the IPC token shows
in ``ps``; binds its ``DurableServer``; writes its status record (with storage); tells
the host its address and identity on the ready pipe; runs the target; records the
outcome (status first, then the result frame: the status is the authority); and then
lingers until the host acked the result, for at most ``linger`` seconds with storage
(a later host reads what is left from storage) or, without storage, for as long as
the host lives (nobody else could ever read it). SIGTERM cancels the target, which is
recorded as a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import traceback
from typing import Any

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.platform._local import READY_FD_ENV, channel_name, status_key
from little_workflow.platform._proc import ProcessIdentity, current_process, is_alive
from little_workflow.platform._subprocess import ChildContext, SpawnSpec, run_target
from little_workflow.platform.ipc import (
    DurableOutboundQueue,
    DurableServer,
    create_durable_outbound_queue,
)
from little_workflow.storage import StorageAdapter, create_in_memory_storage, open_storage

_MAX_SPEC_BYTES = 256 * 1024 * 1024
_VERSION = 1


def _spec(payload: dict[str, Any]) -> SpawnSpec:
    for entry in reversed(payload.get("sysPath") or []):
        if isinstance(entry, str) and entry not in sys.path:
            sys.path.insert(0, entry)
    return SpawnSpec(
        handle_id=payload["handleId"],
        target=payload["target"],
        runner=payload.get("runner"),
        input=payload.get("input"),
        step_id=payload.get("stepId") or "spawn",
        execution_id=payload.get("executionId"),
        cwd=payload.get("cwd"),
        metadata=payload.get("metadata") or {},
    )


async def _outcome(task: asyncio.Future[JsonValue]) -> dict[str, JsonValue]:
    """The target's outcome as the final envelope: a result, or an error."""
    try:
        return {"type": "result", "value": await task}
    except (Exception, asyncio.CancelledError) as exc:
        traceback.print_exc()
        kind = "Terminated" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__
        error: dict[str, JsonValue] = {"type": kind, "message": str(exc)}
        code = getattr(exc, "code", None)
        if isinstance(code, str):
            error["code"] = code
        return {"type": "error", "error": error}


async def _run(payload: dict[str, Any], ready_fd: int) -> int:
    spec = _spec(payload)
    handle_id = spec.handle_id
    url = payload.get("storageUrl")
    storage: StorageAdapter = await open_storage(url) if url else create_in_memory_storage()
    queue = await create_durable_outbound_queue(
        storage=storage, socket_path=channel_name(handle_id)
    )
    server = DurableServer(queue, payload["address"], token=payload.get("token"))
    await server.start()
    identity = current_process()
    record: dict[str, JsonValue] = {
        "version": _VERSION,
        "state": "running",
        "process": dict(identity.to_json()),
        "transport": str(server.address),
        "startedAt": time.time(),
    }
    if url:
        await storage.set(status_key(handle_id), record)
    ready = {"transport": str(server.address), "process": identity.to_json()}
    os.write(ready_fd, (json.dumps(ready) + "\n").encode())
    os.close(ready_fd)

    async def emit(frame: JsonValue) -> int:
        return await server.publish(codec.dumps({"type": "emit", "frame": frame}))

    child = ChildContext(
        handle_id=handle_id,
        execution_id=spec.execution_id,
        step_id=spec.step_id,
        cwd=spec.cwd,
        metadata=dict(spec.metadata),
        emitter=emit,
    )
    task = asyncio.ensure_future(run_target(spec, child))
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    final = await _outcome(task)
    if final["type"] == "result":
        record.update(state="finished", result=final["value"])
    else:
        record.update(state="failed", error=final["error"])
    record["finishedAt"] = time.time()
    if url:
        await storage.set(status_key(handle_id), record)
    final_seq = await server.publish(codec.dumps(final))
    await _linger(queue, final_seq, payload, durable=bool(url))
    await server.close()
    close = getattr(storage, "close", None)
    if close is not None:
        await close()
    return 0 if record["state"] == "finished" else 1


async def _linger(
    queue: DurableOutboundQueue, final_seq: int, payload: dict[str, Any], *, durable: bool
) -> None:
    """Wait for the host to ack the result (see the module docstring for how long)."""
    host = ProcessIdentity.from_json(payload.get("host"))
    deadline = time.monotonic() + float(payload.get("linger") or 0)
    while queue.acked_through < final_seq:
        if durable and time.monotonic() >= deadline:
            return
        if not durable and (host is None or not is_alive(host)):
            return
        await asyncio.sleep(0.02)


def main() -> int:
    """Run the child whose spec is on stdin; the exit status says if the target succeeded.

    The process the host started forks and exits at once: the child proper is then
    nobody's child but init's, so the host never has to reap it (a host that outlives
    many children collects no zombies, and a handle dropped while its child runs is
    not a leaked ``Popen``), and ``setsid`` gives it a process group of its own to
    signal.
    """
    if os.fork() != 0:
        os._exit(0)
    os.setsid()
    ready_fd = int(os.environ.pop(READY_FD_ENV))
    data = sys.stdin.buffer.read(_MAX_SPEC_BYTES + 1)
    if len(data) > _MAX_SPEC_BYTES:
        print(f"child spec is over {_MAX_SPEC_BYTES} bytes", file=sys.stderr)
        return 2
    payload = json.loads(data)
    if not isinstance(payload, dict) or payload.get("version") != _VERSION:
        print("child spec is not a version 1 object", file=sys.stderr)
        return 2
    return asyncio.run(_run(payload, ready_fd))


if __name__ == "__main__":
    sys.exit(main())
