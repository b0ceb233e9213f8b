"""The UI on a run whose process was SIGKILLed: interrupted, not Live, and its stream ends.

A real ``little-workflow run`` blocked in a step is killed with SIGKILL; the API (through
ASGI, and through the real server's socket for the stream) must stop calling it running.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.runtime.support import cli_popen, wait_for_file
from tests.ui.flows import LIVE
from tests.ui.support import client, sse, ui_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """``run_cut`` of ``live.yaml`` in another process, blocked in its ``hold`` step."""
    data = tmp_path / "data"
    entered = tmp_path / "entered"
    process = cli_popen(
        data,
        "run",
        str(LIVE),
        "--run-id",
        "run_cut",
        env={"LW_TEST_ENTERED": str(entered), "LW_TEST_RELEASE": str(tmp_path / "never")},
    )
    try:
        wait_for_file(entered, process)
        yield data, process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


def _kill(process: subprocess.Popen[str]) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


async def test_the_api_reports_a_killed_run_interrupted_and_its_stream_ends(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    data, process = held
    async with client(data) as http:
        (row,) = (await http.get("/api/runs")).json()["runs"]
        assert (row["runId"], row["status"], row["interruption"]) == ("run_cut", "running", None)
        _kill(process)

        (row,) = (await http.get("/api/runs")).json()["runs"]
        assert row["status"] == "interrupted"
        assert f"pid {process.pid}" in row["interruption"]
        filtered = await http.get("/api/runs", params={"status": "interrupted"})
        assert [run["runId"] for run in filtered.json()["runs"]] == ["run_cut"]
        assert (await http.get("/api/runs", params={"status": "running"})).json()["runs"] == []
        assert (await http.get("/api/runs", params={"status": "asleep"})).status_code == 400

        run = (await http.get("/api/runs/run_cut")).json()["run"]
        assert (run["status"], run["interruption"]) == ("interrupted", row["interruption"])
        # The duration's end: the time of its last event.
        events = (await http.get("/api/runs/run_cut/events")).json()["events"]
        assert run["updatedAt"] == events[-1]["ts"]

        # The stream ends (it would poll forever for a run it believes running).
        answer = await asyncio.wait_for(http.get("/api/runs/run_cut/stream"), 60)
    messages = sse(answer.text)
    assert [kind for kind, _, _ in messages] == ["update", "end"]
    update, end = messages[0][2], messages[1][2]
    assert update["run"]["run"]["status"] == "interrupted"
    assert end == {"lastSeq": len(events), "status": "interrupted"}


def test_a_live_stream_ends_when_its_runs_process_is_killed(
    held: tuple[Path, subprocess.Popen[str]],
) -> None:
    data, process = held
    with ui_server(data) as (server, line):
        found = re.fullmatch(r"little-workflow ui: (http://127\.0\.0\.1:\d+)/\n", line)
        assert found, line
        url = f"{found.group(1)}/api/runs/run_cut/stream"
        seen: list[tuple[str, object]] = []
        with (
            httpx.Client(timeout=60) as http,
            http.stream("GET", url) as answer,
        ):
            assert answer.status_code == 200
            block = ""
            for text in answer.iter_lines():
                if text:
                    block += text + "\n"
                    continue
                for kind, _, data_ in sse(block + "\n"):
                    seen.append((kind, data_))
                    if kind == "update" and data_["run"] is not None:  # type: ignore[index]
                        status = data_["run"]["run"]["status"]  # type: ignore[index]
                        if status == "running" and process.poll() is None:
                            _kill(process)  # while the page follows it, Live
                block = ""
        assert server.poll() is None  # the stream ended, the server did not
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "update"
    assert seen[0][1]["run"]["run"]["status"] == "running"  # type: ignore[index]
    assert seen[-1] == ("end", {"lastSeq": seen[-1][1]["lastSeq"], "status": "interrupted"})  # type: ignore[index]
    assert seen[-2][1]["run"]["run"]["status"] == "interrupted"  # type: ignore[index]
