"""Interrupted runs on a PostgreSQL store, seen from another host (no shared file lock).

The host looking has a data directory of its own, so only the store can tell it whether
the run is driven: the advisory lock of a ``run`` on another machine, the queue's leases.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.runtime import Runtime
from little_workflow.views import RunReader
from tests.runtime.support import FLOWS
from tests.workers.support import FLOW, REPO, until

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


async def _statuses(host: Runtime) -> dict[str, str | None]:
    reader = RunReader(host.events, interrupted=host.interrupted_runs)
    return {summary.run_id: summary.reported_status for summary in await reader.summaries()}


async def test_a_run_whose_hosts_session_is_gone_is_interrupted_on_another_host(
    postgres_url: str, tmp_path: Path
) -> None:
    entered = tmp_path / "entered"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(tmp_path / "calls"),
        "LW_TEST_ENTERED": str(entered),
        "LW_TEST_RELEASE": str(tmp_path / "never"),
    }
    command = [
        sys.executable, "-m", "little_workflow", "--data-dir", str(tmp_path / "a"),
        "--store", postgres_url, "run", str(FLOWS / "cancel_slow.yaml"), "--run-id", "run_far",
    ]  # fmt: skip
    process = subprocess.Popen(  # noqa: ASYNC220 - a child to kill, not one to wait for
        command, cwd=REPO, env=env, stderr=subprocess.DEVNULL
    )
    try:
        await until(entered.exists)
        async with Runtime(tmp_path / "b", store=postgres_url) as host_b:
            # Driven on host A, whose file lock host B cannot see: its session holds the run.
            assert await _statuses(host_b) == {"run_far": "running"}
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            # The server ends the dead session (and its lock) once it sees the socket close.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 30
            while (await _statuses(host_b))["run_far"] != "interrupted":
                assert loop.time() < deadline, "still running after its host was killed"
                await asyncio.sleep(0.05)
            (stuck,) = await host_b.stuck_runs()
            assert (stuck.run_id, stuck.reason) == ("run_far", "interrupted")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


async def test_queued_and_leased_runs_are_not_interrupted_a_lapsed_lease_is(
    postgres_url: str, tmp_path: Path
) -> None:
    async with Runtime(tmp_path / "a", store=postgres_url) as host:
        for run_id in ("run_queued", "run_held", "run_lapsed"):
            await host.submit(FLOW, {"items": [1]}, run_id=run_id)
        assert await host.queue.claim_run("run_held", "w_live", lease_seconds=60) is not None
        assert await host.queue.claim_run("run_lapsed", "w_dead", lease_seconds=0.2) is not None
        await asyncio.sleep(0.4)  # past the dead worker's lease (server clock)
        assert await _statuses(host) == {
            "run_queued": "running",
            "run_held": "running",
            "run_lapsed": "interrupted",
        }
        # Listed once, for what is wrong with it: no worker is there to claim it again.
        assert [(item.run_id, item.reason) for item in await host.stuck_runs()] == [
            ("run_lapsed", "lease_expired")
        ]
