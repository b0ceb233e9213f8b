"""A run page's stream shows an answer as it streams in, with three real processes.

``little-workflow run`` drives ``live_flows.brief`` against the fake model server (a
real HTTP server, its stream paced by ``event_delay``); ``little-workflow ui`` serves
the same data directory; the test reads the run's event stream over HTTP. The agent's
second call starts only once the page's socket exists (``wait_for_page``), so it must
stream to the page: its ``delta`` messages must all come before the update holding
its committed answer, and join to exactly that answer. Garbage sent to the page's
socket meanwhile must change nothing.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from little_workflow._live import LIVE_DIR, MAX_DATAGRAM
from little_workflow.harness.models import ModelResponse
from little_workflow.testing.fake_models import FakeModelServer
from tests.runtime.support import cli_popen
from tests.ui import live_flows
from tests.ui.support import sse, ui_server

CALL = "agent.turns[1].model"  # the long answer's call (the first asks for the tool)


def _base(line: str) -> str:
    assert line.startswith("little-workflow ui: http://127.0.0.1:"), line
    return line.split(": ", 1)[1].strip().rstrip("/")


def _hostile(data: Path) -> int:
    """Send garbage to each socket of the sockets directory; how many were sent."""
    sent = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        for entry in (data / LIVE_DIR).iterdir():
            address = os.readlink(entry) if entry.is_symlink() else os.fspath(entry)
            for garbage in (b"\x00garbage", b"{" * 5000, b"x" * (MAX_DATAGRAM + 1)):
                sender.sendto(garbage, address)
                sent += 1
    return sent


def _read_stream(http: httpx.Client, data: Path) -> list[tuple[str, int | None, Any]]:
    text, garbled = "", False
    with http.stream("GET", "/api/runs/run_live/stream") as response:
        assert response.status_code == 200
        for chunk in response.iter_text():
            text += chunk
            if not garbled and "event: delta" in text:
                garbled = _hostile(data) > 0
            if "event: end" in text:
                break
    assert garbled
    return sse(text)


@pytest.mark.timeout(180)
def test_a_run_page_hears_the_answer_before_it_is_committed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with (
        FakeModelServer(live_flows.script, event_delay=0.02) as model,
        ui_server(data) as (ui, line),
        httpx.Client(base_url=_base(line), timeout=60) as http,
    ):
        run = live_flows.start_brief(data, model.url, "sockets", "run_live")
        try:
            deadline = time.monotonic() + 60
            while http.get("/api/runs/run_live").status_code == 404:
                assert run.poll() is None, run.communicate()
                assert time.monotonic() < deadline, "the run never appeared"
                time.sleep(0.02)
            messages = _read_stream(http, data)
        finally:
            out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        assert json.loads(out) == live_flows.ANSWER
        # The page's stream ended: its socket goes (once the server's generator resumes).
        deadline = time.monotonic() + 30
        while any((data / LIVE_DIR).iterdir()):
            assert time.monotonic() < deadline, list((data / LIVE_DIR).iterdir())
            time.sleep(0.02)
    assert ui.returncode in (0, -15)

    kinds = [kind for kind, _, _ in messages]
    assert kinds[-1] == "end"
    assert messages[-1][2]["status"] == "completed"
    committed_at = next(
        index
        for index, (kind, _, payload) in enumerate(messages)
        if kind == "update"
        and any(
            row["type"] == "harness.model.responded" and row["event"]["callId"] == CALL
            for row in payload["events"]
        )
    )
    row = next(
        row
        for _, _, payload in messages[: committed_at + 1]
        if "events" in payload
        for row in payload["events"]
        if row["type"] == "harness.model.responded" and row["event"]["callId"] == CALL
    )
    answer = ModelResponse.model_validate(row["event"]["response"]).message
    batches = [
        (index, batch)
        for index, (kind, _, payload) in enumerate(messages)
        if kind == "delta"
        for batch in payload["batches"]
        if batch["runId"] == "run_live" and batch["path"] == CALL
    ]
    assert batches, kinds
    assert all(index < committed_at for index, _ in batches)
    joined: dict[str, str] = {"text": "", "reasoning": ""}
    for _, batch in batches:
        assert batch["attempt"] == 1
        assert batch["slot"] == "writer"
        for piece in batch["deltas"]:
            joined[piece["kind"]] += piece["text"]
    assert joined["text"] == answer.text == live_flows.ANSWER
    assert joined["reasoning"] == live_flows.THOUGHT
    # Nothing of the garbage reached the page.
    assert all(
        set(batch) == {"seq", "runId", "lineage", "path", "slot", "attempt", "deltas"}
        for _, batch in batches
    )


@pytest.mark.timeout(120)
def test_a_page_whose_socket_cannot_be_bound_follows_the_run_as_before(tmp_path: Path) -> None:
    from tests.runtime.support import wait_for_file
    from tests.ui.flows import LIVE

    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / LIVE_DIR).write_text("not a directory")  # so no socket can be made there
    entered, release = tmp_path / "entered", tmp_path / "release"
    with ui_server(data) as (ui, line), httpx.Client(base_url=_base(line), timeout=60) as http:
        run = cli_popen(data, "run", str(LIVE), "--run-id", "run_held",
                        env={"LW_TEST_ENTERED": str(entered),
                             "LW_TEST_RELEASE": str(release)})  # fmt: skip
        try:
            wait_for_file(entered, run)
            text = ""
            with http.stream("GET", "/api/runs/run_held/stream") as response:
                for chunk in response.iter_text():
                    text += chunk
                    if "event: update" in text and not release.exists():
                        release.write_text("go")  # after the first look, with the run held
                    if "event: end" in text:
                        break
        finally:
            if not release.exists():
                release.write_text("go")
            run.communicate(timeout=60)
        assert run.returncode == 0
        ui.terminate()
        _, logged = ui.communicate(timeout=30)
    messages = sse(text)
    assert messages[-1][0] == "end"
    assert messages[-1][2]["status"] == "completed"
    assert "delta" not in [kind for kind, _, _ in messages]
    # Tried once, said once; the stream went on without it.
    assert logged.count("cannot show answers live") == 1, logged
