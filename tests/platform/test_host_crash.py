"""The seed's "Survive a Host Crash", with real processes and a real SIGKILL.

A host spawns a long-lived child with ``detached_spawn`` and relays its frames to a
client over a durable stream. The client drops its connection at 100 random points,
and at another random point the host is SIGKILLed; a new host process builds the same
harness, calls ``reattach_live_children``, finds the same child (same pid: it never
stopped) and its parent's context, and the frames keep flowing. The client's sequence
must have no gap and no duplicate. Once per transport.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from little_workflow.platform import ProcessIdentity, is_alive, process_start_time
from little_workflow.platform.ipc import DurableClient, ReconnectPolicy
from little_workflow.storage import create_in_memory_storage
from tests.platform.crash_host import TOKEN
from tests.processes import finish

REPO = Path(__file__).resolve().parents[2]
COUNT = 1200
DISCONNECTS = 100


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _address(transport: str, root: Path) -> str:
    if transport == "unix":
        return f"unix:{root / 'host.sock'}"
    return f"{transport}://127.0.0.1:{_free_port()}"


def _host(root: Path, transport: str, address: str, phase: str) -> subprocess.Popen[str]:
    module = "tests.platform.crash_host"
    return subprocess.Popen(
        [sys.executable, "-m", module, str(root), transport, address, phase, str(COUNT)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(host: subprocess.Popen[str]) -> str:
    """How ``host`` ended (killed here if it had not), with what it wrote."""
    alive = host.poll() is None
    if alive:
        host.kill()
    out, err = host.communicate(timeout=10)
    state = "still running (killed)" if alive else f"exited {host.returncode}"
    return f"second host {state}; stdout:\n{out}\nstderr:\n{err}"


async def _report(host: subprocess.Popen[str]) -> dict[str, Any]:
    assert host.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(host.stdout.readline), 60)
    if not line:
        _, err = host.communicate(timeout=10)
        raise AssertionError(f"the host said nothing; stderr:\n{err}")
    report: dict[str, Any] = json.loads(line)
    return report


@pytest.mark.timeout(240)
@pytest.mark.parametrize("transport", ["unix", "tcp", "ws"])
async def test_a_host_crash_loses_and_repeats_no_frame(tmp_path: Path, transport: str) -> None:
    seed = int(os.environ.get("LITTLE_WORKFLOW_CRASH_SEED", random.randrange(2**32)))
    rng = random.Random(seed)
    where = f"(transport {transport}, LITTLE_WORKFLOW_CRASH_SEED={seed})"
    disconnect_at = set(rng.sample(range(1, COUNT), DISCONNECTS))
    kill_at = rng.randrange(COUNT // 5, COUNT // 2)
    address = _address(transport, tmp_path)

    first = _host(tmp_path, transport, address, "first")
    spawned = await _report(first)
    child = ProcessIdentity(pid=spawned["pid"], start_time=process_start_time(spawned["pid"]))
    client = DurableClient(
        address,
        ack_store=create_in_memory_storage(),
        client_id="ui",
        token=None if transport == "unix" else TOKEN,
        reconnect=ReconnectPolicy(initial_delay=0.01, max_delay=0.2, attempts=None),
    )
    seqs: list[int | None] = []
    frames: list[Any] = []
    second: subprocess.Popen[str] | None = None
    found: dict[str, Any] = {}
    try:
        try:
            async with asyncio.timeout(180):
                async for received in client.frames():
                    seqs.append(received.seq)
                    frames.append(json.loads(received.frame))
                    assert received.seq is not None
                    await client.ack(received.seq)
                    if len(seqs) == kill_at:
                        first.send_signal(signal.SIGKILL)
                        assert first.wait(timeout=10) == -signal.SIGKILL
                        assert is_alive(child), f"the child died with its host {where}"
                        second = _host(tmp_path, transport, address, "second")
                        found = await _report(second)
                        # The child holds its last frame until the new host has found it:
                        # released sooner, it could finish (and so not be live) before a
                        # slow new host looks, however slow this client.
                        (tmp_path / "release").touch()
                    if len(seqs) in disconnect_at:
                        await client.reconnect()
                    if len(seqs) == COUNT:
                        break
        except TimeoutError:
            # The client redials until it is cut off: what the second host said is why.
            said = "no second host" if second is None else _stop(second)
            raise AssertionError(f"{len(seqs)} frames in 180 s {where}; {said}") from None
        assert second is not None
        out, err = finish(second, timeout=60)
        assert second.returncode == 0, f"second host failed {where}:\n{err}"
    finally:
        await client.close()
        for host in (first, second):
            if host is not None:
                if host.poll() is None:
                    host.kill()
                host.communicate()  # and close its pipes

    assert seqs == list(range(1, COUNT + 1)), f"gap or duplicate {where}"
    assert frames == [{"i": index} for index in range(COUNT)], where
    # The new host found the same child, still the same process, and its parent.
    assert found["handles"] == [spawned["handle"]]
    assert found["pid"] == spawned["pid"]
    assert found["contexts"] == {spawned["handle"]: "exec_host"}
    assert found["cwd"] == {spawned["handle"]: str(tmp_path / "work")}
    assert json.loads(out.splitlines()[-1]) == {"result": {"done": COUNT}}
    assert client.connect_count > DISCONNECTS  # every drop (and the kill) redialled
    deadline = asyncio.get_running_loop().time() + 20
    while is_alive(child):  # it lingers briefly after its result was acked, then exits
        assert asyncio.get_running_loop().time() < deadline, f"the child never exited {where}"
        await asyncio.sleep(0.05)
