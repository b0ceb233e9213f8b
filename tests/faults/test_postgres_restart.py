"""PostgreSQL restarted under a run, on a private cluster of this module's own.

The shared server must never be restarted, so these tests ``initdb`` a cluster
(``pgcluster.PrivateCluster``) and restart it with ``pg_ctl restart``, ``-m fast`` (a
clean shutdown: every connection terminated) and ``-m immediate`` (a crash: the server
is killed and recovers from its WAL on start). The workflow is ten steps that take a
little time, a ``disrupt`` step whose callable the test supplies, and ten more.

* **Between two commits** the restart must not be seen: the run pauses until the server
  is back and continues on new connections, to the same events and output as an
  undisturbed run.
* **During a commit** (the append blocked on a row lock that a prepared transaction
  holds, so the restart surely lands inside it: a prepared transaction outlives the
  restart, where a session's lock would be released by its own termination and could
  let the append commit first) the run fails with ``StorageUnavailableError``, never a raw
  ``psycopg`` error or a hang, and ``Runtime.resume`` then completes it.
* **A crash after a write-behind commit**: events committed without waiting for the
  disk (``synchronous_commit`` off; the WAL writer is slowed so they are still in memory)
  are lost by the crash; the run stops with a typed error and resumes.

In every case: seqs 1..n, one ``StepCompleted`` per step path, the undisturbed output.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from little_workflow.errors import ConflictError, StorageError, StorageUnavailableError
from little_workflow.events import RecordedEvent, RunStatus
from little_workflow.runtime import Runtime
from tests.faults.pgcluster import PrivateCluster

pytestmark = pytest.mark.timeout(120)

FLOW = Path(__file__).with_name("flows") / "restart.yaml"
INPUT = {"start": 0, "seconds": 0.05}
OUTPUT = sum(range(1, 21))
# The WAL writer flushes async commits every wal_writer_delay; slowed to its maximum so
# that a write-behind commit is surely still in memory when the server crashes.
SLOW_WAL_WRITER = "wal_writer_delay=10s"
# Room for the prepared transaction that holds the run's row lock across a restart.
PREPARED = "max_prepared_transactions=4"


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivateCluster]:
    server = PrivateCluster(SLOW_WAL_WRITER, PREPARED)
    reason = server.start()
    if reason is not None:
        server.remove()
        pytest.skip(reason)
    try:
        yield server
    finally:
        server.remove()


def _store(cluster: PrivateCluster, schema: str) -> str:
    return f"{cluster.url}?schema={schema}"


def _completed_paths(events: list[RecordedEvent]) -> collections.Counter[str]:
    return collections.Counter(
        str(record.event.step_path) for record in events if record.type == "StepCompleted"
    )


def _shape(events: list[RecordedEvent]) -> collections.Counter[tuple[str, str | None]]:
    return collections.Counter(
        (record.type, getattr(record.event, "step_path", None)) for record in events
    )


def _runtime(tmp_path: Path, store: str, disrupt: Callable[..., Any]) -> Runtime:
    return Runtime(tmp_path / "data", store=store, functions={"restart:disrupt": disrupt})


@pytest.fixture(scope="module")
def undisturbed(
    cluster: PrivateCluster, tmp_path_factory: pytest.TempPathFactory
) -> list[RecordedEvent]:
    """The events of the workflow run with nothing disrupted."""

    async def run() -> list[RecordedEvent]:
        tmp_path = tmp_path_factory.mktemp("undisturbed")
        async with _runtime(tmp_path, _store(cluster, "calm"), lambda: None) as rt:
            result = await rt.run(FLOW, INPUT, run_id="calm")
            assert result.output == OUTPUT
            return await rt.events.read("calm")

    return asyncio.run(run())


def _check_log(events: list[RecordedEvent], undisturbed: list[RecordedEvent]) -> None:
    assert [record.seq for record in events] == list(range(1, len(events) + 1))
    completed = _completed_paths(events)
    assert completed == _completed_paths(undisturbed)
    assert set(completed.values()) == {1}
    assert events[-1].type == "RunCompleted"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_restart_between_commits_is_not_seen(
    cluster: PrivateCluster, undisturbed: list[RecordedEvent], tmp_path: Path, mode: str
) -> None:
    restarts: list[str] = []

    def disrupt() -> None:
        # A sync step blocks the loop: nothing of this run is committed meanwhile, and
        # every pooled connection is dead once the server is back.
        cluster.pg_ctl("restart", mode=mode)
        restarts.append(mode)

    async with _runtime(tmp_path, _store(cluster, f"between_{mode}"), disrupt) as rt:
        result = await asyncio.wait_for(rt.run(FLOW, INPUT, run_id="r1"), 60)
        events = await rt.events.read("r1")
    assert restarts == [mode]
    assert result.status is RunStatus.COMPLETED
    assert result.output == OUTPUT
    _check_log(events, undisturbed)
    assert _shape(events) == _shape(undisturbed)


def _restart_once_blocked(cluster: PrivateCluster, mode: str, done: list[str]) -> None:
    """Wait until an append waits for the row lock, then restart the server."""
    deadline = time.monotonic() + 30
    with psycopg.connect(cluster.url, autocommit=True) as watcher:
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND query LIKE '%lw_append%'"
            ).fetchone()
            if row is not None and row[0] > 0:
                break
            time.sleep(0.02)
        else:
            done.append("no append waited for the lock")
            return
    cluster.pg_ctl("restart", mode=mode)
    done.append("restarted")


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_a_restart_during_a_commit_fails_typed_and_resumes(
    cluster: PrivateCluster, undisturbed: list[RecordedEvent], tmp_path: Path, mode: str
) -> None:
    schema = f"during_{mode}"
    done: list[str] = []
    threads: list[threading.Thread] = []
    held = f"lw_hold_{mode}"

    def disrupt() -> None:
        if threads:
            return  # the resumed run calls it again: the server is left alone
        # Lock the run's row in a prepared transaction, so this step's completion (the
        # next append) waits inside the server until the restart ends its connection,
        # and still cannot commit if the restart ends the other connections first.
        with psycopg.connect(cluster.url) as holder:
            holder.execute(f"SELECT 1 FROM {schema}.runs WHERE run_id = 'r1' FOR UPDATE")
            holder.execute(f"PREPARE TRANSACTION '{held}'")
        thread = threading.Thread(target=_restart_once_blocked, args=(cluster, mode, done))
        thread.start()
        threads.append(thread)

    def release() -> None:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            prepared = conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (held,))
            if prepared.fetchone() is not None:
                conn.execute(f"ROLLBACK PREPARED '{held}'")

    try:
        async with _runtime(tmp_path, _store(cluster, schema), disrupt) as rt:
            with pytest.raises(StorageUnavailableError) as caught:
                await asyncio.wait_for(rt.run(FLOW, INPUT, run_id="r1"), 60)
            assert "append" in str(caught.value)
            await asyncio.to_thread(threads[0].join, 60)
            assert done == ["restarted"]
            await asyncio.to_thread(release)
            result = await asyncio.wait_for(rt.resume("r1"), 60)
            events = await rt.events.read("r1")
    finally:
        with contextlib.suppress(psycopg.Error):
            await asyncio.to_thread(release)
    assert result.status is RunStatus.COMPLETED
    assert result.output == OUTPUT
    _check_log(events, undisturbed)


async def test_a_crash_after_a_write_behind_commit_stops_typed_and_resumes(
    cluster: PrivateCluster, undisturbed: list[RecordedEvent], tmp_path: Path
) -> None:
    crashes: list[str] = []

    async def disrupt() -> None:
        if crashes:
            return
        # This step's StepAttemptStarted is committed without sync 0.05 s in (the
        # write-behind flush); the crash then takes it, though the server said committed.
        await asyncio.sleep(0.3)
        await asyncio.to_thread(cluster.pg_ctl, "restart", mode="immediate")
        crashes.append("immediate")

    async with _runtime(tmp_path, _store(cluster, "write_behind"), disrupt) as rt:
        stopped: StorageError | None = None
        try:
            result = await asyncio.wait_for(rt.run(FLOW, INPUT, run_id="r1"), 60)
        except StorageError as exc:
            stopped = exc
        if stopped is not None:
            # The log now holds fewer events than the writer committed: typed, and
            # saying why; what the crash took was only a note that the step had begun.
            assert isinstance(stopped, ConflictError | StorageUnavailableError)
            if isinstance(stopped, ConflictError):
                assert "lost" in str(stopped)
            result = await asyncio.wait_for(rt.resume("r1"), 60)
        events = await rt.events.read("r1")
    assert crashes == ["immediate"]
    assert result.status is RunStatus.COMPLETED
    assert result.output == OUTPUT
    _check_log(events, undisturbed)
