"""Worker processes on the real PostgreSQL server, one killed and one paused past its lease.

Four ``little-workflow worker`` processes (each with its own data directory, like four
machines) drive 200 submitted runs: a map fan-out, a sum, then a payment of the sum (a
side-effecting step with a reconcile hook, counted at a "far end" keyed by its
side-effect key). While they work, one is SIGKILLed and another SIGSTOPped until its
leases have lapsed and others have taken its runs over, then SIGCONTed. Afterwards:
every run completed once with the right output, every step has one ``StepCompleted``,
only steps in flight on the disrupted workers ran twice, every payment reached the far
end exactly once, and the revived worker dropped its runs (its late writes refused)
without writing anything.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime
from tests.processes import finish
from tests.workers.support import REPO, held_by, wait_for, worker_command

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]

FLOW = Path(__file__).with_name("fanout_pay.yaml")
LEASE = 1.5
CONCURRENCY = 3
BRANCHES = 4  # the map's concurrency: steps one run may have in flight


def _start_worker(
    store: str, data_dir: Path, worker_id: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        worker_command(store, data_dir, worker_id, concurrency=CONCURRENCY, lease=LEASE),
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


async def test_runs_survive_a_killed_and_a_paused_worker(postgres_url: str, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    far_end = tmp_path / "far_end"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_FAR_END": str(far_end),
        "LW_TEST_STEP_SECONDS": "0.1",
        "PYTHONPATH": str(REPO),
    }
    inputs = {f"run_{index:03d}": [index, index + 1, index + 2, index + 3] for index in range(200)}
    async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
        for run_id, items in inputs.items():
            await runtime.submit(FLOW, {"items": items}, run_id=run_id)
        workers = {
            name: _start_worker(postgres_url, tmp_path / name, name, env)
            for name in ("w_killed", "w_paused", "w_steady", "w_other")
        }
        try:
            # Disrupt each only once it holds runs with steps in flight.
            async def holding(name: str) -> bool:
                return len(await held_by(runtime, name)) > 0 and calls.exists()

            await wait_for(lambda: holding("w_killed"), 60)
            workers["w_killed"].send_signal(signal.SIGKILL)
            await wait_for(lambda: holding("w_paused"), 60)
            paused_runs = await held_by(runtime, "w_paused")
            workers["w_paused"].send_signal(signal.SIGSTOP)

            async def taken_over() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in paused_runs]
                return all(
                    entry is not None and (entry.state == "done" or entry.worker_id != "w_paused")
                    for entry in entries
                )

            await wait_for(taken_over, 60)
            # A run it finished in the moment between the queue read and the SIGSTOP
            # landing is done under its name; every other one was taken over.
            taken = [
                run_id
                for run_id in paused_runs
                if (entry := await runtime.queue.get(run_id)) is not None
                and entry.worker_id != "w_paused"
            ]
            assert taken, paused_runs
            workers["w_paused"].send_signal(signal.SIGCONT)

            async def all_done() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in inputs]
                return all(entry is not None and entry.state == "done" for entry in entries)

            await wait_for(all_done, 150)
        finally:
            for process in workers.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGCONT)
                    process.send_signal(signal.SIGTERM)
        outputs = {name: process.communicate(timeout=30) for name, process in workers.items()}
        assert workers["w_killed"].returncode == -signal.SIGKILL
        for name in ("w_paused", "w_steady", "w_other"):
            assert workers[name].returncode == 0, outputs[name][1].decode()
        paused_report = outputs["w_paused"][1].decode()
        found = re.search(r"stopped: .*; (\d+) lease\(s\) lost", paused_report)
        assert found is not None, paused_report
        lost = int(found.group(1))
        # Every run taken over from it while paused: it lost each of those leases, at
        # its next write (refused) or renewal, and wrote nothing after.
        assert lost >= len(taken), paused_report

        step_paths: dict[str, list[str]] = {}
        paid: dict[str, int] = {}
        for run_id, items in inputs.items():
            state = await runtime.get_state(run_id)
            assert state.output == sum(item * item for item in items), run_id
            paid[f"{run_id}/pay"] = sum(item * item for item in items)
            entry = await runtime.queue.get(run_id)
            assert entry is not None
            assert entry.outcome == "completed"
            completed = [
                record.event.step_path
                for record in await runtime.events.read(run_id)
                if isinstance(record.event, StepCompleted)
            ]
            # Each branch's step, the map itself, the sum and the payment: once each.
            assert len(completed) == len(set(completed)) == len(items) + 3, run_id
            step_paths[run_id] = [path for path in completed if path not in ("fan", "pay")]

    # Every payment happened exactly once at the far end, with the run's amount, whatever
    # worker died, paused or took over in between: the hook, asked on takeover, said
    # whether it had happened; a paused worker's late request carried the same key, so
    # the far end kept one payment.
    effects = {
        path.name.replace("~", "/"): int(path.read_text())
        for path in far_end.iterdir()
        if path.name != "requests.log"
    }
    assert effects == paid
    requests = collections.Counter((far_end / "requests.log").read_text().splitlines())
    assert set(requests) == set(paid)
    repeated = sum(times - 1 for times in requests.values())
    counted = collections.Counter(calls.read_text().splitlines())
    expected = {f"{run_id}/{path}" for run_id, paths in step_paths.items() for path in paths}
    # Every committed step was called; no call outside the runs' steps.
    assert set(counted) == expected
    # Only steps in flight on the two disrupted workers ran a second time: at most their
    # concurrency times the map's, each.
    twice = [call for call, times in counted.items() if times > 1]
    print(
        f"paused worker held {len(paused_runs)} run(s), lost {lost} lease(s); "
        f"{len(twice)} step call(s) ran twice of {sum(counted.values())}; "
        f"{repeated} payment request(s) repeated, none paid twice"
    )
    assert all(counted[call] == 2 for call in twice)
    assert len(twice) <= 2 * CONCURRENCY * BRANCHES, json.dumps(twice)


def test_a_worker_stopped_while_it_starts_exits_cleanly(postgres_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    process = _start_worker(postgres_url, tmp_path / "w", "w_early", env)
    assert process.stderr is not None
    first = process.stderr.readline()
    assert first.startswith(b"worker: starting"), first
    # Now it imports the runtime and opens the store: well before any claim.
    process.send_signal(signal.SIGTERM)
    _, rest = finish(process, timeout=30)
    stderr = first + rest
    assert process.returncode == 0, stderr.decode()
    assert "worker w_early stopped" in stderr.decode()


async def test_a_maps_sub_runs_spread_over_the_workers(postgres_url: str, tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    pids = tmp_path / "pids.txt"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_PIDS": str(pids),
        "LW_TEST_STEP_SECONDS": "0.2",
        "PYTHONPATH": str(REPO),
    }
    spread = Path(__file__).with_name("spread.yaml")
    inputs = {f"run_s{index}": [index * 10 + item for item in range(8)] for index in range(3)}
    async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
        workers = {
            name: _start_worker(postgres_url, tmp_path / name, name, env)
            for name in ("w_a", "w_b", "w_c")
        }
        try:
            # Every worker up before the runs arrive, so each can take a share.
            async def registered() -> bool:
                found = {info.worker_id for info in await runtime.queue.workers()}
                return found >= set(workers)

            await wait_for(registered, 60)
            for run_id, items in inputs.items():
                await runtime.submit(spread, {"items": items}, run_id=run_id)

            async def all_done() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in inputs]
                return all(entry is not None and entry.state == "done" for entry in entries)

            await wait_for(all_done, 120)
        finally:
            for process in workers.values():
                process.send_signal(signal.SIGTERM)
        for name, process in workers.items():
            _, stderr = process.communicate(timeout=30)
            assert process.returncode == 0, (name, stderr.decode())
        for run_id, items in inputs.items():
            assert (await runtime.get_state(run_id)).output == [item * item for item in items]
    # 24 sub-runs, each run once, by more than one worker process.
    counted = collections.Counter(calls.read_text().splitlines())
    assert len(counted) == 24
    assert set(counted.values()) == {1}
    ran_in = {line.split(" ")[1] for line in pids.read_text().splitlines()}
    assert len(ran_in) >= 2, ran_in
    print(f"24 sub-runs ran in {len(ran_in)} worker process(es)")
