"""The run queue on every backend that has one, through the one conformance suite.

Everything runs against the real thing (a SQLite file, the PostgreSQL server); times are
the backend's, so the tests that need a lease to expire use short leases and wait them out.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from little_workflow.events import StepCompleted
from little_workflow.storage import Store, open_store
from little_workflow.storage._fence import Fence, fenced
from little_workflow.testing import RunQueueConformance

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class TestRunQueueConformance(RunQueueConformance):
    @pytest.fixture(params=BACKENDS)
    async def queue_store(self, request: pytest.FixtureRequest) -> AsyncIterator[Store]:
        url: str = request.getfixturevalue(f"{request.param}_url")
        store = await open_store(url)
        yield store
        await store.close()


async def test_the_memory_backend_refuses_a_fenced_append() -> None:
    from little_workflow.errors import ConfigError
    from little_workflow.storage import create_in_memory_event_log

    log = create_in_memory_event_log()
    step = StepCompleted(step_path="s1", step_id="s", kind="execute", output={"i": 1})
    with fenced(Fence(run_id="run_m", token=1)), pytest.raises(ConfigError, match="leases"):
        await log.append("run_m", [step])
    assert await log.read("run_m") == []


async def test_on_sqlite_a_lease_held_by_a_killed_process_is_free_at_once(
    sqlite_url: str,
) -> None:
    import asyncio
    import signal
    import sys

    store = await open_store(sqlite_url)
    try:
        queue = store.queue
        assert queue is not None
        await queue.submit("run_k")
        code = (
            "import asyncio, sys\n"
            "from little_workflow.storage import open_store\n"
            "async def main():\n"
            "    store = await open_store(sys.argv[1])\n"
            "    (claim,) = await store.queue.claim('w_dead', limit=1, lease_seconds=600)\n"
            "    print(claim.fence.token, flush=True)\n"
            "    await asyncio.sleep(600)\n"
            "asyncio.run(main())\n"
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, sqlite_url, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        old_token = int(await child.stdout.readline())
        # Alive, the child's lease holds for its 600 s.
        assert await queue.holder("run_k") == "w_dead"
        assert await queue.claim("w_live", limit=1, lease_seconds=30) == []
        child.send_signal(signal.SIGKILL)
        await child.communicate()
        assert await queue.holder("run_k") is None
        assert await queue.attended(["run_k"]) == set()
        assert [entry.run_id for entry in await queue.expired()] == ["run_k"]
        (claim,) = await queue.claim("w_live", limit=1, lease_seconds=30)
        assert claim.run_id == "run_k"
        assert claim.fence.token > old_token
        assert claim.attempts == 2
    finally:
        await store.close()


async def test_on_sqlite_queue_places_and_permits_of_a_killed_process_are_free_at_once(
    sqlite_url: str,
) -> None:
    import asyncio
    import signal
    import sys

    from little_workflow.storage import Limit, Permit

    store = await open_store(sqlite_url)
    try:
        queue = store.queue
        assert queue is not None
        await queue.set_limit("queue", "one", Limit(concurrency=1))
        await queue.set_limit("model", "judge", Limit(concurrency=1))
        await queue.submit("run_a", queue="one")
        await queue.submit("run_b", queue="one")
        code = (
            "import asyncio, sys\n"
            "from little_workflow.storage import open_store\n"
            "async def main():\n"
            "    store = await open_store(sys.argv[1])\n"
            "    (claim,) = await store.queue.claim('w_dead', limit=5, lease_seconds=600)\n"
            "    permit = await store.queue.acquire_permit('model', 'judge', lease_seconds=600)\n"
            "    print(claim.run_id, type(permit).__name__, flush=True)\n"
            "    await asyncio.sleep(600)\n"
            "asyncio.run(main())\n"
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, sqlite_url, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        assert (await child.stdout.readline()).split() == [b"run_a", b"Permit"]
        # Alive, the child holds the queue's one place and the slot's one permit.
        assert await queue.claim("w_live", limit=5, lease_seconds=30) == []
        assert isinstance(await queue.acquire_permit("model", "judge", lease_seconds=30), float)
        child.send_signal(signal.SIGKILL)
        await child.communicate()
        # Dead, it holds neither: its abandoned run is claimed first, and only it.
        claims = await queue.claim("w_live", limit=5, lease_seconds=30)
        assert [claim.run_id for claim in claims] == ["run_a"]
        assert isinstance(await queue.acquire_permit("model", "judge", lease_seconds=30), Permit)
    finally:
        await store.close()
