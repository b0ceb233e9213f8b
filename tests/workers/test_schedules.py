"""Schedules started by workers: one run per tick, across workers, kills and clock steps.

The in-process tests drive ``Scheduler.look`` at chosen instants (``now``), so the
catch-up policies and a clock stepped back are checked without waiting for real time;
the process test runs two real ``little-workflow worker`` processes on one SQLite file
for 20 s of a schedule ticking every 2 s, SIGKILLs one and restarts it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from little_workflow.errors import CorruptDataError
from little_workflow.runtime import Runtime, Schedule
from little_workflow.runtime._schedules import Scheduler, add_schedule, list_schedules
from tests.runtime.support import cli
from tests.workers.support import REPO
from tests.workers.support import calls as calls_of

pytestmark = pytest.mark.timeout(240)

TICK = Path(__file__).with_name("tick.yaml")
#: A whole minute, so the ticks of ``*/2`` seconds and of ``* * * * *`` are easy to name.
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y%m%dT%H%M%SZ")


async def _scheduled(runtime: Runtime, name: str) -> list[str]:
    prefix = f"sched:{name}:"
    return sorted(
        info.run_id for info in await runtime.events.list_runs() if info.run_id.startswith(prefix)
    )


async def _add(runtime: Runtime, name: str, cron: str, catch_up: str = "latest") -> None:
    await add_schedule(
        runtime,
        Schedule(
            name=name,
            cron=cron,
            workflow=str(TICK),
            input={"n": 3},
            catch_up=catch_up,  # type: ignore[arg-type]
            since=T0,
        ),
    )


async def test_on_time_ticks_all_start_once_and_a_clock_stepped_back_starts_nothing(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "data") as runtime:
        await _add(runtime, "two", "* * * * * */2")
        scheduler = Scheduler(runtime, worker_id="w1", interval=1)
        started = await scheduler.look(now=T0 + 10.5)
        expected = [f"sched:two:{_stamp(T0 + s)}" for s in (2, 4, 6, 8, 10)]
        assert started == expected
        assert await scheduler.look(now=T0 + 10.9) == []
        assert await scheduler.look(now=T0 + 5) == []  # the clock stepped back
        assert await scheduler.look(now=T0 + 12.1) == [f"sched:two:{_stamp(T0 + 12)}"]
        assert await _scheduled(runtime, "two") == [*expected, f"sched:two:{_stamp(T0 + 12)}"]
        for run_id in await _scheduled(runtime, "two"):
            entry = await runtime.queue.get(run_id)
            assert entry is not None  # queued for a worker
            state = await runtime.get_state(run_id)
            assert state.input == {"n": 3}


async def test_missed_ticks_catch_up_by_policy(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "data") as runtime:
        await _add(runtime, "latest", "*/5 * * * *", "latest")
        await _add(runtime, "skip", "*/5 * * * *", "skip")
        scheduler = Scheduler(runtime, worker_id="w1", interval=1)
        # No worker ran for fifty minutes: the ten ticks are all older than the grace.
        started = await scheduler.look(now=T0 + 3000 + 100)
        assert started == [f"sched:latest:{_stamp(T0 + 3000)}"]
        assert await _scheduled(runtime, "latest") == started
        assert await _scheduled(runtime, "skip") == []
        # On time again: both start the next tick, and only it.
        started = await scheduler.look(now=T0 + 3300 + 1)
        assert sorted(started) == [
            f"sched:latest:{_stamp(T0 + 3300)}",
            f"sched:skip:{_stamp(T0 + 3300)}",
        ]


async def test_two_workers_looking_at_once_start_each_tick_once(
    tmp_path: Path, store: str | None
) -> None:
    data = tmp_path / "data"
    async with Runtime(data, store=store) as first, Runtime(data, store=store) as second:
        await _add(first, "race", "* * * * * */2")
        one = Scheduler(first, worker_id="w1", interval=1)
        two = Scheduler(second, worker_id="w2", interval=1)
        for instant in (T0 + 10.5, T0 + 20.5, T0 + 30.5):
            await asyncio.gather(one.look(now=instant), two.look(now=instant))
        runs = await _scheduled(first, "race")
        assert runs == [f"sched:race:{_stamp(T0 + s)}" for s in range(2, 31, 2)]
        for run_id in runs:
            events = await first.events.read(run_id)
            assert [event.type for event in events] == ["RunStarted"]
            entry = await first.queue.get(run_id)
            assert entry is not None
            assert entry.state == "queued"


async def test_a_corrupt_record_is_named(tmp_path: Path) -> None:
    async with Runtime(tmp_path / "data") as runtime:
        await _add(runtime, "fine", "* * * * *")
        await runtime.kv.set("schedule:broken", {"format": 1, "name": "broken"})
        with pytest.raises(CorruptDataError, match="'schedule:broken'"):
            await list_schedules(runtime)
        await runtime.kv.set("schedule:broken", {"format": 99})
        with pytest.raises(CorruptDataError, match="'schedule:broken'"):
            await runtime.list_schedules()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """The workers' store: the data directory's SQLite file (``None``), or PostgreSQL."""
    if request.param == "sqlite":
        return None
    url = request.getfixturevalue("postgres_url")
    assert isinstance(url, str)
    return url


def _worker(
    data: Path, name: str, env: dict[str, str], store: str | None
) -> subprocess.Popen[bytes]:
    # On PostgreSQL each worker has a data directory of its own, as on its own machine,
    # and the lease of a killed worker's run lapses after 3 s; on SQLite it dies with it.
    own = data if store is None else data / name
    lease = "600" if store is None else "3"
    command = [
        sys.executable, "-m", "little_workflow", "--data-dir", str(own), "worker",
        "--worker-id", name, "--concurrency", "2", "--lease-seconds", lease,
        "--poll-interval", "0.05", "--schedule-every", "0.2",
        *([] if store is None else ["--store", store]),
    ]  # fmt: skip
    with (data.parent / f"{name}.log").open("ab") as log:
        return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)


async def test_every_two_seconds_for_twenty_with_a_worker_sigkilled_and_restarted(
    tmp_path: Path, store: str | None
) -> None:
    data = tmp_path / "data"
    calls = tmp_path / "calls.txt"
    env = {**os.environ, "LW_TEST_CALLS": str(calls), "LW_TEST_STEP_SECONDS": "0.3"}
    async with Runtime(data, store=store) as runtime:
        schedule = await runtime.add_schedule(
            "every2", cron="* * * * * */2", workflow=TICK, input={"n": 2}
        )
    workers = {name: _worker(data, name, env, store) for name in ("wa", "wb")}
    try:
        await asyncio.sleep(8)
        workers["wa"].send_signal(signal.SIGKILL)
        workers["wa"].wait()
        await asyncio.sleep(4)
        workers["wa"] = _worker(data, "wa", env, store)
        await asyncio.sleep(8)
        async with Runtime(data, store=store) as runtime:
            pausing_at = time.time()
            await runtime.pause_schedule("every2")
            paused_at = time.time()
            # Let the runs started before the pause end.
            deadline = time.monotonic() + 120
            while True:
                runs = await _scheduled(runtime, "every2")
                states = [await runtime.get_state(run_id) for run_id in runs]
                if all(state.finished for state in states):
                    break
                assert time.monotonic() < deadline, "the scheduled runs did not end"
                await asyncio.sleep(0.2)
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in workers.values():
            process.wait(timeout=60)
    assert workers["wb"].returncode == 0, (tmp_path / "wb.log").read_text()
    # Every tick from the schedule's creation to its pause ran once, and none after it.
    # A tick due in the last moments before the pause committed may or may not have been
    # submitted (workers look every 0.2 s): either is right, so that window is open.
    first = int(schedule.since) + 1
    ticks = [second for second in range(first, int(paused_at) + 1) if second % 2 == 0]
    required = [f"sched:every2:{_stamp(second)}" for second in ticks if second < pausing_at - 1]
    optional = [f"sched:every2:{_stamp(second)}" for second in ticks if second >= pausing_at - 1]
    assert len(required) >= 8
    assert runs[: len(required)] == required, (runs, required)
    assert runs[len(required) :] == optional[: len(runs) - len(required)], (runs, optional)
    assert {state.output for state in states} == {4}
    assert calls_of(calls) == {f"{run_id}/sq": 1 for run_id in runs}


async def test_a_tick_submitted_by_two_workers_at_once_is_one_run(
    tmp_path: Path, store: str | None
) -> None:
    # On PostgreSQL both submits read the log before either appends, so one
    # ``RunStarted`` append conflicts (``ConflictError``, which must not escape: it would
    # end the look); on SQLite the second finds the run and queues it again. Either way
    # one run per tick, queued once.
    data = tmp_path / "data"
    async with Runtime(data, store=store) as first, Runtime(data, store=store) as second:
        await _add(first, "both", "* * * * *")
        (schedule,) = await first.list_schedules()
        one = Scheduler(first, worker_id="w1", interval=1)
        two = Scheduler(second, worker_id="w2", interval=1)
        for minute in range(1, 6):
            run_id = f"sched:both:{_stamp(T0 + 60 * minute)}"
            await asyncio.gather(one._start(schedule, run_id), two._start(schedule, run_id))
            events = await first.events.read(run_id)
            assert [event.type for event in events] == ["RunStarted"]
            entry = await first.queue.get(run_id)
            assert entry is not None
            assert entry.state == "queued"
        assert len(await _scheduled(first, "both")) == 5


async def test_a_code_first_schedule_runs_its_function(tmp_path: Path) -> None:
    from little_workflow.runtime import Worker

    async with Runtime(tmp_path / "data") as runtime:
        added = await runtime.add_schedule(
            "code", cron="* * * * * *", workflow="tests.code_first.flows:report", input={"total": 3}
        )
        assert added.workflow == "tests.code_first.flows:report"
        scheduler = Scheduler(runtime, worker_id="w1", interval=1)
        (run_id,) = await scheduler.look(now=added.since + 1)
        worker = Worker(
            runtime, concurrency=1, poll_interval=0.02, recover_every=0, schedule_every=0
        )
        report = await asyncio.wait_for(worker.run(max_runs=1), 60)
        assert report.finished == {"completed": 1}
        state = await runtime.get_state(run_id)
        assert state.workflow_version_id.endswith("tests.code_first.flows:report")
        assert state.input == {"total": 3}
        assert state.output == {"report": 4}  # revise: total + 1


async def test_a_module_that_does_not_import_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    from little_workflow.errors import LittleWorkflowError

    async with Runtime(tmp_path / "data") as runtime:
        with pytest.raises(LittleWorkflowError) as caught:
            await runtime.add_schedule("gone", cron="* * * * *", workflow="tests.nowhere:flow")
        assert "tests.nowhere" in str(caught.value)
        assert await runtime.list_schedules() == []


async def test_a_worker_with_a_corrupt_schedule_logs_it_and_drives_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from little_workflow.runtime import Worker

    async with Runtime(tmp_path / "data") as runtime:
        await runtime.kv.set("schedule:broken", {"format": 1, "name": "broken"})
        run_id = await runtime.submit(TICK, {"n": 5})
        worker = Worker(runtime, concurrency=1, poll_interval=0.02, schedule_every=0.05)
        with caplog.at_level("WARNING", logger="little_workflow.worker"):
            report = await asyncio.wait_for(worker.run(max_runs=1), 60)
        assert report.finished == {"completed": 1}
        assert report.scheduled == 0
        assert (await runtime.get_state(run_id)).output == 25
        warnings = [r.getMessage() for r in caplog.records if "schedules" in r.getMessage()]
        assert warnings
        assert "'schedule:broken'" in warnings[0]


def test_a_workflow_module_that_raises_as_a_worker_imports_it_is_logged(tmp_path: Path) -> None:
    # User code: the module imports when the schedule is added, then raises or exits
    # when a worker imports it at a tick. The worker logs it at each look and goes on
    # starting the other schedule's ticks.
    (tmp_path / "sched_flaky_flow.py").write_text(
        "import os, sys\n"
        "from little_workflow.runtime import workflow\n"
        "mode = os.environ.get('LW_TEST_IMPORT')\n"
        "if mode == 'raise':\n    raise RuntimeError('broken at import')\n"
        "if mode == 'exit':\n    sys.exit(3)\n"
        "@workflow\n"
        "async def flow(ctx, n: int) -> int:\n    return n\n"
    )
    data = tmp_path / "data"
    path = os.pathsep.join([str(tmp_path), str(REPO)])
    env = {**os.environ, "PYTHONPATH": path}
    every = ["--cron", "* * * * * *"]
    flaky = cli(
        data, "schedule", "add", "flaky", *every, "sched_flaky_flow:flow", "--input", '{"n": 1}',
        env=env,
    )  # fmt: skip
    assert flaky.returncode == 0, flaky.stderr
    fine = cli(data, "schedule", "add", "fine", *every, str(TICK), "--input", '{"n": 1}')
    assert fine.returncode == 0, fine.stderr
    for mode in ("raise", "exit"):
        log = tmp_path / f"{mode}.log"
        command = [
            sys.executable, "-m", "little_workflow", "--data-dir", str(data), "worker",
            "--poll-interval", "0.05", "--schedule-every", "0.2", "--max-runs", "3",
        ]  # fmt: skip
        with log.open("wb") as err:
            done = subprocess.run(
                command,
                cwd=REPO,
                env={**env, "LW_TEST_IMPORT": mode},
                stdout=subprocess.DEVNULL,
                stderr=err,
                timeout=120,
                check=False,
            )
        text = log.read_text()
        assert done.returncode == 0, text
        assert "3 completed" in text, text
        assert "cannot start its run" in text, text
        if mode == "raise":
            assert "schedule flaky: cannot start its run: broken at import" in text, text
    listed = cli(data, "runs", "--json")
    runs = [run["runId"] for run in json.loads(listed.stdout)]
    assert [run for run in runs if run.startswith("sched:flaky:")] == []
    assert len([run for run in runs if run.startswith("sched:fine:")]) >= 6
