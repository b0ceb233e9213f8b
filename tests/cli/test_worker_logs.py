"""A worker's log on stderr (issue 17, 5): one line per event, tracebacks with ``--debug``;
and ``submit --input @FILE`` for an input too long for a command line.

The database goes away under a worker driving a run: its schema is dropped (on the real
PostgreSQL server) while the run's steps are in flight. The run ends in a storage error
and every claim afterwards fails; each of those events is one line on stderr naming the
error, and the traceback is there only with ``little-workflow --debug worker``.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from little_workflow.cli._logs import OneLineFormatter
from little_workflow.runtime import Runtime
from tests.cli.test_stdout_and_input import BIG, FLOWS, lw
from tests.conftest import POSTGRES_URL
from tests.workers.support import FLOW, REPO, held_by, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(180)]


def _lines(stream: object) -> queue.Queue[str | None]:
    """The lines of ``stream`` as they come, read by a thread (``None`` at its end)."""
    found: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            found.put(line)
        found.put(None)

    threading.Thread(target=read, daemon=True).start()
    return found


@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
async def test_a_worker_logs_one_line_per_event_when_its_database_goes_away(
    postgres_url: str, tmp_path: Path, debug: bool
) -> None:
    schema = postgres_url.rsplit("schema=", 1)[1]
    items = json.dumps({"items": [1, 2, 3, 4]})
    submitted = lw(tmp_path, "submit", str(FLOW), "--input", items, "--store", postgres_url)
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()

    command = [sys.executable, "-m", "little_workflow", "--data-dir", str(tmp_path)]
    command += ["--debug"] if debug else []
    command += ["worker", "--store", postgres_url, "--worker-id", "w_logs",
                "--lease-seconds", "3", "--poll-interval", "0.05"]  # fmt: skip
    # Steps long enough to be in flight when the schema goes.
    env = {**os.environ, "LW_TEST_STEP_SECONDS": "2", "PYTHONPATH": str(REPO)}
    worker = _start(command, env)
    lines = _lines(worker.stderr)
    seen: list[str] = []
    try:
        async with Runtime(tmp_path / "observer", store=postgres_url) as runtime:
            await wait_for(lambda: _holds(runtime, run_id), timeout=60)
        _drop(schema)
        # Read until the run's end and a failed claim after it are logged.
        deadline = time.monotonic() + 90
        while not (
            any("ended in an error" in line for line in seen)
            and any("cannot claim runs" in line for line in seen)
        ):
            assert time.monotonic() < deadline, "".join(seen)
            try:
                line = lines.get(timeout=1)
            except queue.Empty:
                continue
            assert line is not None, f"the worker exited: {''.join(seen)}"
            seen.append(line)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        # The pipe is closed even when the test failed above: left to the garbage
        # collector, it is a ResourceWarning that fails whichever test runs then.
        try:
            while (line := lines.get(timeout=10)) is not None:
                seen.append(line)
        finally:
            assert worker.stderr is not None
            worker.stderr.close()
    text = "".join(seen)

    ended = next(line for line in seen if "ended in an error" in line)
    claims = [line for line in seen if "cannot claim runs" in line]
    assert claims[0].startswith("worker w_logs: cannot claim runs: ")
    if debug:
        # The event's line, then the traceback of the storage error that ended the run.
        after = seen[seen.index(ended) + 1 :]
        assert after[0] == "Traceback (most recent call last):\n", text
        assert any(line.startswith("little_workflow.errors.StorageError: ") for line in after)
        return
    assert ended.startswith(f"worker w_logs: run {run_id} ended in an error: storage_error: ")
    assert "Traceback" not in text, text
    # One line per event: every line is an event of the worker or of the run it drove
    # ("run '...': flushing held events failed: ..."), or the driver's own warning under
    # its logger's name ("psycopg.pool: discarding closed connection"), none a
    # continuation of another.
    for line in seen:
        assert line.startswith(("worker", f"run {run_id!r}: ", "psycopg")), text


def _drop(schema: str) -> None:
    """Drop the worker's schema under it. The worker's own statements hold locks on its
    tables in the other order, so the server may pick this DROP as a deadlock's victim:
    it is then tried again, as any client of a busy database would."""
    for attempt in range(10):
        try:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 9:
                raise
            time.sleep(0.1)


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)


async def _holds(runtime: Runtime, run_id: str) -> bool:
    return run_id in await held_by(runtime, "w_logs")


def test_submit_reads_an_input_too_long_for_a_command_line_from_a_file(
    postgres_url: str, tmp_path: Path
) -> None:
    document = tmp_path / "input.json"
    document.write_text(json.dumps({"blob": "s" * BIG}))
    submitted = lw(
        tmp_path, "submit", str(FLOWS / "measure.yaml"), "--input", f"@{document}",
        "--store", postgres_url,
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    run_id = submitted.stdout.strip()
    worked = lw(tmp_path, "worker", "--store", postgres_url, "--max-runs", "1")
    assert worked.returncode == 0, worked.stderr
    waited = lw(tmp_path, "wait", run_id, "--store", postgres_url, "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert json.loads(waited.stdout) == {"length": BIG, "head": "s" * 8}


def test_a_library_warning_is_one_line_named_after_its_logger() -> None:
    formatter = OneLineFormatter(debug=False)

    def line(name: str, message: str) -> str:
        record = logging.LogRecord(name, logging.WARNING, __file__, 1, message, None, None)
        return formatter.format(record)

    assert line("psycopg.pool", "discarding closed connection:\n\t<conn>") == (
        "psycopg.pool: discarding closed connection: <conn>"
    )
    assert line("little_workflow.worker", "worker w: up") == "worker w: up"
