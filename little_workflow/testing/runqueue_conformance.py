"""The conformance suite every ``RunQueue`` backend must pass, unchanged.

Subclass it in a test module and provide one fixture:

* ``queue_store``: an open, empty ``Store`` whose ``queue`` is the backend under test and
  whose ``events`` is the event log its fences guard (fenced appends are checked there).

Lease times are the backend's clock; the tests that need a lease to expire use short
leases and wait them out (a wait longer than the lease, never an assertion on time).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from little_workflow.errors import InvalidIdError, LeaseLostError
from little_workflow.events import StepCompleted
from little_workflow.storage import Limit, Permit, Rate, RunQueue, Store
from little_workflow.storage._fence import fenced

__all__ = ["RunQueueConformance"]


def _step(index: int) -> StepCompleted:
    return StepCompleted(step_path=f"s{index}", step_id="s", kind="execute", output={"i": index})


def _queue(store: Store) -> RunQueue:
    queue = store.queue
    assert queue is not None, "the queue_store fixture must be a store with a run queue"
    return queue


class RunQueueConformance:
    """Submit, claim under leases with fencing tokens, renew, finish, release, workers."""

    async def test_is_a_run_queue(self, queue_store: Store) -> None:
        assert isinstance(_queue(queue_store), RunQueue)

    async def test_a_run_is_submitted_once_and_claimed_by_one_worker(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        assert await queue.submit("run_a")
        assert not await queue.submit("run_a")
        entry = await queue.get("run_a")
        assert entry is not None
        assert entry.state == "queued"
        assert entry.attempts == 0
        first = await queue.claim("w1", limit=5, lease_seconds=30)
        assert [claim.run_id for claim in first] == ["run_a"]
        assert first[0].attempts == 1
        assert await queue.claim("w2", limit=5, lease_seconds=30) == []
        entry = await queue.get("run_a")
        assert entry is not None
        assert entry.state == "leased"
        assert entry.worker_id == "w1"
        assert entry.lease_token == first[0].fence.token
        assert await queue.holder("run_a") == "w1"
        assert await queue.get("run_never") is None

    async def test_claims_take_the_oldest_first_and_sub_runs_before_the_backlog(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        for run_id in ("run_1", "run_2", "run_3"):
            await queue.submit(run_id)
        await queue.submit("run_child", parent_run_id="run_1")
        # Which runs a claim takes is ordered; the order of the list it returns is not.
        claims = await queue.claim("w1", limit=2, lease_seconds=30)
        assert {claim.run_id for claim in claims} == {"run_child", "run_1"}
        claims = await queue.claim("w1", limit=5, lease_seconds=30)
        assert {claim.run_id for claim in claims} == {"run_2", "run_3"}
        assert await queue.claim("w1", limit=0, lease_seconds=30) == []

    async def test_concurrent_claimers_split_the_backlog_without_overlap(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        run_ids = [f"run_{index:03d}" for index in range(60)]
        for run_id in run_ids:
            await queue.submit(run_id)
        claims = await asyncio.gather(
            *(queue.claim(f"w{index}", limit=20, lease_seconds=30) for index in range(4))
        )
        claimed = [claim.run_id for batch in claims for claim in batch]
        assert len(claimed) == len(set(claimed))  # no run held twice
        assert set(claimed) <= set(run_ids)
        tokens = [claim.fence.token for batch in claims for claim in batch]
        assert len(tokens) == len(set(tokens))
        rest = await queue.claim("w9", limit=100, lease_seconds=30)
        assert sorted(claimed + [claim.run_id for claim in rest]) == run_ids

    async def test_an_expired_lease_is_lost_and_the_next_holder_gets_a_larger_token(
        self, queue_store: Store
    ) -> None:
        queue, log = _queue(queue_store), queue_store.events
        await queue.submit("run_x")
        (old,) = await queue.claim("w1", limit=1, lease_seconds=0.3)
        with fenced(old.fence):
            assert await log.append("run_x", [_step(1)]) == [1]
        await asyncio.sleep(0.5)
        # Expired: renewing is refused even before anyone else claims the run, and so is
        # an append under it.
        assert await queue.renew("w1", [old.fence], lease_seconds=30) == set()
        assert await queue.holder("run_x") is None
        assert [entry.run_id for entry in await queue.expired()] == ["run_x"]
        with fenced(old.fence), pytest.raises(LeaseLostError, match=r"token"):
            await log.append("run_x", [_step(2)])
        (new,) = await queue.claim("w2", limit=1, lease_seconds=30)
        assert new.run_id == "run_x"
        assert new.fence.token > old.fence.token
        assert new.attempts == 2
        assert await queue.expired() == []
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
        assert entry.finished_at is not None

    async def test_a_fenced_append_to_a_sub_run_checks_the_root_runs_lease(
        self, queue_store: Store
    ) -> None:
        queue, log = _queue(queue_store), queue_store.events
        await queue.submit("run_root")
        (claim,) = await queue.claim("w1", limit=1, lease_seconds=30)
        with fenced(claim.fence):
            assert await log.append("run_child", [_step(1)]) == [1]
        assert await queue.release(claim.fence)
        with fenced(claim.fence), pytest.raises(LeaseLostError):
            await log.append("run_child", [_step(2)])
        assert [record.seq for record in await log.read("run_child")] == [1]

    async def test_a_run_released_with_not_before_is_claimed_only_from_then(
        self, queue_store: Store
    ) -> None:
        # A run that waits (docs/waits.md): its row is queued again, claimable from its
        # timer's time; ``claim_run`` (a send, a parent) takes it whatever the time.
        queue = _queue(queue_store)
        await queue.submit("run_nb")
        (claim,) = await queue.claim("w1", limit=1, lease_seconds=30)
        assert await queue.release(claim.fence, not_before=time.time() + 0.5)
        assert await queue.claim("w2", limit=1, lease_seconds=30) == []
        await asyncio.sleep(0.7)
        (due,) = await queue.claim("w2", limit=1, lease_seconds=30)
        assert due.run_id == "run_nb"
        assert await queue.release(due.fence, not_before=time.time() + 3600)
        assert await queue.claim("w3", limit=1, lease_seconds=30) == []
        named = await queue.claim_run("run_nb", "w3", lease_seconds=30)
        assert named is not None
        assert await queue.release(named.fence)  # no not-before: claimable at once
        assert [c.run_id for c in await queue.claim("w4", limit=1, lease_seconds=30)] == ["run_nb"]

    async def test_renewing_keeps_a_lease_past_its_first_term(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.submit("run_r")
        (claim,) = await queue.claim("w1", limit=1, lease_seconds=0.4)
        for _ in range(4):
            await asyncio.sleep(0.2)
            assert await queue.renew("w1", [claim.fence], lease_seconds=0.4) == {"run_r"}
        assert await queue.claim("w2", limit=1, lease_seconds=30) == []
        # Another worker's name does not renew it.
        assert await queue.renew("w2", [claim.fence], lease_seconds=30) == set()
        assert await queue.renew("w1", [], lease_seconds=30) == set()

    async def test_a_released_run_is_claimable_at_once(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.submit("run_rel")
        (claim,) = await queue.claim("w1", limit=1, lease_seconds=30)
        assert await queue.release(claim.fence)
        assert not await queue.release(claim.fence)
        (again,) = await queue.claim("w2", limit=1, lease_seconds=30)
        assert again.fence.token > claim.fence.token

    async def test_claim_run_takes_one_named_run_only_if_nobody_holds_it(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        await queue.submit("run_one")
        await queue.submit("run_other")
        claim = await queue.claim_run("run_one", "w1", lease_seconds=30)
        assert claim is not None
        assert claim.run_id == "run_one"
        assert await queue.claim_run("run_one", "w2", lease_seconds=30) is None
        assert await queue.claim_run("run_never", "w2", lease_seconds=30) is None
        (other,) = await queue.claim("w2", limit=5, lease_seconds=30)
        assert other.run_id == "run_other"
        assert await queue.finish(claim.fence, "failed")
        assert await queue.claim_run("run_one", "w2", lease_seconds=30) is None

    async def test_settle_ends_only_a_run_nobody_holds(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.submit("run_free")
        await queue.submit("run_held")
        held = await queue.claim_run("run_held", "w1", lease_seconds=30)
        assert held is not None
        assert await queue.settle("run_free", "cancelled")
        assert not await queue.settle("run_held", "cancelled")
        assert not await queue.settle("run_free", "cancelled")  # done already
        assert not await queue.settle("run_never", "cancelled")
        entry = await queue.get("run_free")
        assert entry is not None
        assert (entry.state, entry.outcome) == ("done", "cancelled")
        assert await queue.claim("w2", limit=5, lease_seconds=30) == []

    async def test_forget_deletes_only_finished_rows(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.submit("run_done")
        await queue.submit("run_waiting")
        claim = await queue.claim_run("run_done", "w1", lease_seconds=30)
        assert claim is not None
        assert await queue.finish(claim.fence, "completed")
        assert await queue.forget(["run_done", "run_waiting", "run_never"]) == 1
        assert await queue.forget([]) == 0
        assert await queue.get("run_done") is None
        assert await queue.get("run_waiting") is not None

    async def test_workers_are_listed_with_the_runs_they_hold(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.register_worker("w_list", host="h1", pid=42, concurrency=3)
        await queue.submit("run_w1")
        await queue.submit("run_w2")
        claims = await queue.claim("w_list", limit=2, lease_seconds=30)
        await queue.heartbeat_worker("w_list")
        (info,) = [worker for worker in await queue.workers() if worker.worker_id == "w_list"]
        assert (info.host, info.pid, info.concurrency) == ("h1", 42, 3)
        assert info.heartbeat_at >= info.started_at
        assert sorted((run, token) for run, token, _ in info.runs) == sorted(
            (claim.run_id, claim.fence.token) for claim in claims
        )
        await queue.stop_worker("w_list")
        assert all(worker.worker_id != "w_list" for worker in await queue.workers())
        stopped = await queue.workers(include_stopped=True)
        assert any(w.worker_id == "w_list" and w.stopped_at is not None for w in stopped)

    async def test_attended_runs_are_the_queued_and_the_unexpired_leases(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        for run_id in ("run_q", "run_live", "run_lapsed", "run_done"):
            await queue.submit(run_id)
        assert await queue.claim_run("run_live", "w1", lease_seconds=60) is not None
        assert await queue.claim_run("run_lapsed", "w2", lease_seconds=0.2) is not None
        done = await queue.claim_run("run_done", "w1", lease_seconds=60)
        assert done is not None
        assert await queue.finish(done.fence, "completed")
        await asyncio.sleep(0.4)  # past run_lapsed's lease, by the backend's clock
        asked = ["run_q", "run_live", "run_lapsed", "run_done", "run_never_submitted"]
        assert await queue.attended(asked) == {"run_q", "run_live"}
        assert await queue.attended([]) == set()

    # --- limits -----------------------------------------------------------------------

    async def test_limits_are_stored_replaced_and_removed(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        assert await queue.limits("queue") == {}
        await queue.set_limit("queue", "models", Limit(concurrency=8, rate=Rate(60, per=60)))
        await queue.set_limit("queue", "slow", Limit(concurrency=1))
        await queue.set_limit("model", "judge", Limit(rate=Rate(30, per=10)))
        assert await queue.limits("queue") == {
            "models": Limit(concurrency=8, rate=Rate(60, per=60)),
            "slow": Limit(concurrency=1),
        }
        await queue.set_limit("queue", "models", Limit(concurrency=3))
        assert (await queue.limits("queue"))["models"] == Limit(concurrency=3)
        assert await queue.limits("model") == {"judge": Limit(rate=Rate(30, per=10))}
        assert await queue.remove_limit("queue", "slow")
        assert not await queue.remove_limit("queue", "slow")
        assert set(await queue.limits("queue")) == {"models"}
        with pytest.raises(InvalidIdError, match="queue name"):
            await queue.set_limit("queue", "bad name", Limit(concurrency=1))
        with pytest.raises(InvalidIdError, match="queue name"):
            await queue.submit("run_bad", queue="no/slash")
        assert await queue.get("run_bad") is None

    async def test_a_queue_limit_caps_its_runs_held_at_once_and_no_other_queue(
        self, queue_store: Store
    ) -> None:
        queue = _queue(queue_store)
        await queue.set_limit("queue", "q2", Limit(concurrency=2))
        for index in range(5):
            await queue.submit(f"run_q{index}", queue="q2")
        await queue.submit("run_free1")
        await queue.submit("run_free2")
        entry = await queue.get("run_q0")
        assert entry is not None
        assert entry.queue == "q2"
        first = await queue.claim("w1", limit=10, lease_seconds=30)
        taken = {claim.run_id for claim in first}
        assert taken == {"run_q0", "run_q1", "run_free1", "run_free2"}
        assert await queue.claim("w2", limit=10, lease_seconds=30) == []
        # A sub-run takes no place: its parent holds one already.
        await queue.submit("run_child", parent_run_id="run_q0", queue="q2")
        assert [claim.run_id for claim in await queue.claim("w2", limit=10, lease_seconds=30)] == [
            "run_child"
        ]
        by_id = {claim.run_id: claim for claim in first}
        assert await queue.finish(by_id["run_q0"].fence, "completed")
        (second,) = await queue.claim("w2", limit=10, lease_seconds=30)
        assert second.run_id == "run_q2"
        assert await queue.release(by_id["run_q1"].fence)
        (third,) = await queue.claim("w3", limit=10, lease_seconds=30)
        assert third.run_id == "run_q1"
        assert await queue.claim("w3", limit=10, lease_seconds=30) == []
        # Raising the limit is seen by the next claim.
        await queue.set_limit("queue", "q2", Limit(concurrency=4))
        rest = await queue.claim("w3", limit=10, lease_seconds=30)
        assert {claim.run_id for claim in rest} == {"run_q3", "run_q4"}

    async def test_concurrent_claimers_never_exceed_a_queue_limit(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.set_limit("queue", "q3", Limit(concurrency=3))
        for index in range(30):
            await queue.submit(f"run_{index:02d}", queue="q3")
        batches = await asyncio.gather(
            *(queue.claim(f"w{index}", limit=10, lease_seconds=30) for index in range(6))
        )
        assert sum(len(batch) for batch in batches) == 3

    async def test_a_lapsed_lease_frees_its_place_in_the_queue(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.set_limit("queue", "q1", Limit(concurrency=1))
        await queue.submit("run_a", queue="q1")
        await queue.submit("run_b", queue="q1")
        (first,) = await queue.claim("w1", limit=5, lease_seconds=0.2)
        assert await queue.claim("w2", limit=5, lease_seconds=30) == []
        await asyncio.sleep(0.4)  # past the lease, by the backend's clock
        (again,) = await queue.claim("w2", limit=5, lease_seconds=30)
        assert again.run_id == first.run_id  # the abandoned run first, then the backlog
        assert await queue.claim("w3", limit=5, lease_seconds=30) == []

    async def test_a_queue_rate_caps_the_claims_per_period(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.set_limit("queue", "r3", Limit(rate=Rate(3, per=3600)))
        for index in range(5):
            await queue.submit(f"run_r{index}", queue="r3")
        first = await queue.claim("w1", limit=10, lease_seconds=30)
        assert len(first) == 3
        for claim in first:
            assert await queue.finish(claim.fence, "completed")
        # Finished runs free no rate: three claims were made within the hour.
        assert await queue.claim("w1", limit=10, lease_seconds=30) == []
        # The window is the current limit's: shortened, those claims fall out of it.
        await queue.set_limit("queue", "r3", Limit(rate=Rate(3, per=0.2)))
        await asyncio.sleep(0.4)
        rest = await queue.claim("w1", limit=10, lease_seconds=30)
        assert {claim.run_id for claim in rest} == {"run_r3", "run_r4"}

    async def test_model_permits_cap_the_calls_held_at_once(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        assert await queue.acquire_permit("model", "unlimited", lease_seconds=30) is None
        await queue.set_limit("model", "judge", Limit(concurrency=2))
        one = await queue.acquire_permit("model", "judge", lease_seconds=30)
        two = await queue.acquire_permit("model", "judge", lease_seconds=0.2)
        assert isinstance(one, Permit)
        assert isinstance(two, Permit)
        assert one.permit_id != two.permit_id
        wait = await queue.acquire_permit("model", "judge", lease_seconds=30)
        assert isinstance(wait, float)
        assert wait > 0
        assert await queue.release_permit(one)
        assert not await queue.release_permit(one)
        three = await queue.acquire_permit("model", "judge", lease_seconds=30)
        assert isinstance(three, Permit)
        # ``two`` is not renewed: once its lease is over it holds no place.
        await asyncio.sleep(0.4)
        assert await queue.renew_permits([two, three], lease_seconds=30) == {three.permit_id}
        four = await queue.acquire_permit("model", "judge", lease_seconds=30)
        assert isinstance(four, Permit)
        assert isinstance(await queue.acquire_permit("model", "judge", lease_seconds=30), float)

    async def test_model_permits_cap_the_calls_per_period(self, queue_store: Store) -> None:
        queue = _queue(queue_store)
        await queue.set_limit("model", "fast", Limit(rate=Rate(2, per=3600)))
        for _ in range(2):
            permit = await queue.acquire_permit("model", "fast", lease_seconds=30)
            assert isinstance(permit, Permit)
            assert await queue.release_permit(permit)
        wait = await queue.acquire_permit("model", "fast", lease_seconds=30)
        # Worth waiting until the oldest call leaves the hour's window.
        assert isinstance(wait, float)
        assert 1000 < wait <= 3600
