"""The run queue on PostgreSQL: claims, leases, fencing tokens, workers.

Everything here runs against the real server; times are the server's, so the tests that
need a lease to expire use short leases and wait them out.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from little_workflow.errors import LeaseLostError
from little_workflow.events import StepCompleted
from little_workflow.storage import StoreSpec, parse_store_url
from little_workflow.storage._fence import Fence, fenced
from little_workflow.storage._postgres import PostgresEventLog
from little_workflow.storage._postgres_db import PostgresDatabase
from little_workflow.storage._queue_postgres import PostgresRunQueue

pytestmark = pytest.mark.postgres


def _step(index: int) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id="s", kind="execute", output={"i": index})


@pytest.fixture
def spec(postgres_url: str) -> StoreSpec:
    return parse_store_url(postgres_url)


@pytest.fixture
async def database(spec: StoreSpec) -> AsyncIterator[PostgresDatabase]:
    db = await PostgresDatabase.open(spec, max_connections=4)
    yield db
    await db.close()


@pytest.fixture
def queue(database: PostgresDatabase) -> PostgresRunQueue:
    return PostgresRunQueue(database)


async def test_a_run_is_submitted_once_and_claimed_by_one_worker(queue: PostgresRunQueue) -> None:
    assert await queue.submit("run_a")
    assert not await queue.submit("run_a")
    entry = await queue.get("run_a")
    assert entry is not None
    assert entry.state == "queued"
    first = await queue.claim("w1", limit=5, lease_seconds=30)
    assert [claim.run_id for claim in first] == ["run_a"]
    assert first[0].attempts == 1
    assert await queue.claim("w2", limit=5, lease_seconds=30) == []
    entry = await queue.get("run_a")
    assert entry is not None
    assert entry.state == "leased"
    assert entry.worker_id == "w1"
    assert entry.lease_token == first[0].fence.token


async def test_concurrent_claimers_split_the_backlog_without_overlap(
    queue: PostgresRunQueue,
) -> None:
    run_ids = [f"run_{index:03d}" for index in range(60)]
    for run_id in run_ids:
        await queue.submit(run_id)
    claims = await asyncio.gather(
        *(queue.claim(f"w{index}", limit=20, lease_seconds=30) for index in range(4))
    )
    claimed = [claim.run_id for batch in claims for claim in batch]
    assert len(claimed) == len(set(claimed))  # no run held twice
    assert set(claimed) <= set(run_ids)
    rest = await queue.claim("w9", limit=100, lease_seconds=30)
    assert sorted(claimed + [claim.run_id for claim in rest]) == run_ids


async def test_an_expired_lease_is_lost_and_the_next_holder_gets_a_larger_token(
    queue: PostgresRunQueue, database: PostgresDatabase
) -> None:
    await queue.submit("run_x")
    (old,) = await queue.claim("w1", limit=1, lease_seconds=0.3)
    log = PostgresEventLog(database)
    with fenced(old.fence):
        assert await log.append("run_x", [_step(1)]) == [1]
    await asyncio.sleep(0.5)
    # Expired: renewing is refused even before anyone else claims the run, and so is
    # an append under it.
    assert await queue.renew("w1", [old.fence], lease_seconds=30) == set()
    with fenced(old.fence), pytest.raises(LeaseLostError, match=r"token"):
        await log.append("run_x", [_step(2)])
    (new,) = await queue.claim("w2", limit=1, lease_seconds=30)
    assert new.run_id == "run_x"
    assert new.fence.token > old.fence.token
    assert new.attempts == 2
    with fenced(new.fence):
        assert await log.append("run_x", [_step(2)]) == [2]
    with fenced(old.fence), pytest.raises(LeaseLostError) as caught:
        await log.append("run_x", [_step(3)])
    assert caught.value.code == "lease_lost"
    # The refused writes left nothing behind.
    assert [record.seq for record in await log.read("run_x")] == [1, 2]
    assert not await queue.finish(old.fence, "completed")
    assert await queue.finish(new.fence, "completed")
    entry = await queue.get("run_x")
    assert entry is not None
    assert entry.state == "done"
    assert entry.outcome == "completed"


async def test_a_fenced_append_to_a_sub_run_checks_the_root_runs_lease(
    queue: PostgresRunQueue, database: PostgresDatabase
) -> None:
    await queue.submit("run_root")
    (claim,) = await queue.claim("w1", limit=1, lease_seconds=30)
    log = PostgresEventLog(database)
    with fenced(claim.fence):
        assert await log.append("run_child", [_step(1)]) == [1]
    assert await queue.release(claim.fence)
    with fenced(claim.fence), pytest.raises(LeaseLostError):
        await log.append("run_child", [_step(2)])


async def test_renewing_keeps_a_lease_past_its_first_term(queue: PostgresRunQueue) -> None:
    await queue.submit("run_r")
    (claim,) = await queue.claim("w1", limit=1, lease_seconds=0.4)
    for _ in range(4):
        await asyncio.sleep(0.2)
        assert await queue.renew("w1", [claim.fence], lease_seconds=0.4) == {"run_r"}
    assert await queue.claim("w2", limit=1, lease_seconds=30) == []
    # Another worker's name does not renew it.
    assert await queue.renew("w2", [claim.fence], lease_seconds=30) == set()


async def test_a_released_run_is_claimable_at_once(queue: PostgresRunQueue) -> None:
    await queue.submit("run_rel")
    (claim,) = await queue.claim("w1", limit=1, lease_seconds=30)
    assert await queue.release(claim.fence)
    assert not await queue.release(claim.fence)
    (again,) = await queue.claim("w2", limit=1, lease_seconds=30)
    assert again.fence.token > claim.fence.token


async def test_workers_are_listed_with_the_runs_they_hold(queue: PostgresRunQueue) -> None:
    await queue.register_worker("w_list", host="h1", pid=42, concurrency=3)
    await queue.submit("run_w1")
    await queue.submit("run_w2")
    claims = await queue.claim("w_list", limit=2, lease_seconds=30)
    (info,) = [worker for worker in await queue.workers() if worker.worker_id == "w_list"]
    assert (info.host, info.pid, info.concurrency) == ("h1", 42, 3)
    assert sorted((run, token) for run, token, _ in info.runs) == sorted(
        (claim.run_id, claim.fence.token) for claim in claims
    )
    await queue.stop_worker("w_list")
    assert all(worker.worker_id != "w_list" for worker in await queue.workers())
    stopped = await queue.workers(include_stopped=True)
    assert any(w.worker_id == "w_list" and w.stopped_at is not None for w in stopped)


async def test_other_backends_refuse_a_fenced_append() -> None:
    from little_workflow.errors import ConfigError
    from little_workflow.storage import create_in_memory_event_log

    log = create_in_memory_event_log()
    with fenced(Fence(run_id="run_m", token=1)), pytest.raises(ConfigError, match="leases"):
        await log.append("run_m", [_step(1)])
    assert await log.read("run_m") == []


async def test_attended_runs_are_the_queued_and_the_unexpired_leases(
    queue: PostgresRunQueue,
) -> None:
    for run_id in ("run_q", "run_live", "run_lapsed", "run_done"):
        await queue.submit(run_id)
    assert await queue.claim_run("run_live", "w1", lease_seconds=60) is not None
    assert await queue.claim_run("run_lapsed", "w2", lease_seconds=0.2) is not None
    done = await queue.claim_run("run_done", "w1", lease_seconds=60)
    assert done is not None
    assert await queue.finish(done.fence, "completed")
    await asyncio.sleep(0.4)  # past run_lapsed's lease, by the server's clock
    asked = ["run_q", "run_live", "run_lapsed", "run_done", "run_never_submitted"]
    assert await queue.attended(asked) == {"run_q", "run_live"}
    assert await queue.attended([]) == set()
