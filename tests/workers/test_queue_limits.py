"""A queue's concurrency limit holds across worker processes, on SQLite and on PostgreSQL.

Four ``little-workflow worker`` processes, each able to drive two runs at once, share
one store holding 30 runs submitted to a queue limited to 3. Each run's one step writes
a ``start`` and an ``end`` line to a file (one ``O_APPEND`` write each, so the file's
line order is the order they happened in, whichever process wrote them). Afterwards:
all 30 completed, each step once, and at no point of the file were more than 3 runs
between their ``start`` and their ``end``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from little_workflow.runtime import Runtime
from little_workflow.storage import Rate
from tests.workers.support import REPO, wait_for, worker_command

pytestmark = pytest.mark.timeout(240)

FLOW = Path(__file__).with_name("limited.yaml")
LIMIT = 3
RUNS = 30


def peak_overlap(lines: list[str]) -> int:
    """The most runs inside the step at once, by the order of the lines."""
    inside: set[str] = set()
    peak = 0
    for line in lines:
        what, run_id, *_ = line.split()
        if what == "start":
            assert run_id not in inside, f"{run_id} started twice"
            inside.add(run_id)
            peak = max(peak, len(inside))
        else:
            inside.remove(run_id)
    assert not inside, f"runs that never ended: {sorted(inside)}"
    return peak


def _start_worker(
    store: str, tmp_path: Path, name: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        worker_command(store, tmp_path / name, name, concurrency=2, lease=10),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_queue_limit_of_3_holds_across_4_worker_processes(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store: str = request.getfixturevalue(f"{backend}_url")
    windows = tmp_path / "windows.txt"
    env = {
        **os.environ,
        "LW_TEST_WINDOWS": str(windows),
        "LW_TEST_STEP_SECONDS": "0.2",
        "PYTHONPATH": str(REPO),
    }
    async with Runtime(tmp_path / "submitter", store=store) as runtime:
        await runtime.set_queue("models", concurrency=LIMIT, rate=Rate(1000, per=60))
        run_ids = [f"run_{index:02d}" for index in range(RUNS)]
        for index, run_id in enumerate(run_ids):
            await runtime.submit(FLOW, {"n": index}, run_id=run_id, queue="models")
        workers = [_start_worker(store, tmp_path, name, env) for name in ("w1", "w2", "w3", "w4")]
        try:

            async def all_done() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in run_ids]
                return all(entry is not None and entry.state == "done" for entry in entries)

            await wait_for(all_done, 180)
        finally:
            for process in workers:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
        errors = [process.communicate(timeout=30)[1].decode() for process in workers]
        for process, err in zip(workers, errors, strict=True):
            assert process.returncode == 0, err
        for index, run_id in enumerate(run_ids):
            entry = await runtime.queue.get(run_id)
            assert entry is not None
            assert (entry.outcome, entry.queue, entry.attempts) == ("completed", "models", 1)
            assert (await runtime.get_state(run_id)).output == index
    lines = windows.read_text().splitlines()
    assert sorted(line.split()[1] for line in lines if line.startswith("start")) == run_ids
    peak = peak_overlap(lines)
    assert peak <= LIMIT
    # The workers had 8 places between them: the queue's limit is what held them back,
    # and it was reached (the test would not show a limit never approached).
    assert peak >= 2
    drivers = {line.split()[3] for line in lines}
    assert len(drivers) >= 2, "the runs were spread over several worker processes"


async def test_a_code_first_submit_names_its_queue_and_an_unknown_one_writes_nothing(
    tmp_path: Path,
) -> None:
    from little_workflow.errors import ConfigError
    from tests.code_first.flows import report

    async with Runtime(tmp_path / "data") as runtime:
        with pytest.raises(ConfigError, match="no queue 'nightly'") as refused:
            await runtime.submit(report, {"total": 1}, run_id="run_refused", queue="nightly")
        assert refused.value.code == "unknown_queue"
        assert await runtime.events.read("run_refused") == []
        assert await runtime.queue.get("run_refused") is None
        await runtime.set_queue("nightly", concurrency=1)
        await runtime.submit(report, {"total": 1}, run_id="run_code", queue="nightly")
        entry = await runtime.queue.get("run_code")
        assert entry is not None
        assert (entry.state, entry.queue) == ("queued", "nightly")
        assert [queue.name for queue in await runtime.queues()] == ["default", "nightly"]
