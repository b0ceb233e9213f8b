"""The UI's one write, ``POST /api/runs/{runId}/send``: it answers a waiting run through
``Runtime.send``, and only for the UI's own page (token, origin, JSON body)."""

from __future__ import annotations

from pathlib import Path

import pytest

from little_workflow.errors import RunWaitingError
from little_workflow.events import EventReceived
from little_workflow.runtime import Runtime
from tests.ui.support import client

APPROVE = Path(__file__).parents[1] / "waits" / "approve.yaml"
TOKEN = "t0ken-for-the-writes"
OWN = "http://127.0.0.1:8765"
JSON = {"content-type": "application/json", "origin": OWN}


@pytest.fixture
async def data(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    async with Runtime(root) as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(APPROVE, {"n": 2}, run_id="run_wait")
    return root


async def _received(root: Path) -> list[EventReceived]:
    async with Runtime(root) as rt:
        records = await rt.events.read("run_wait")
    return [r.event for r in records if isinstance(r.event, EventReceived)]


async def test_a_send_is_delivered_once_per_key(data: Path) -> None:
    body = {"event": "approval", "data": {"ok": True}, "key": "form-1"}
    async with client(data) as http:
        sent = await http.post("/api/runs/run_wait/send", json=body, headers=JSON)
        again = await http.post("/api/runs/run_wait/send", json=body, headers=JSON)
        view = (await http.get("/api/runs/run_wait")).json()["run"]
    assert sent.status_code == 200, sent.text
    assert sent.json() == {
        "runId": "run_wait",
        "event": "approval",
        "key": "form-1",
        "outcome": "delivered",
    }
    assert again.json()["outcome"] == "duplicate"  # a double submit delivers once
    assert [(e.key, e.data) for e in await _received(data)] == [("form-1", {"ok": True})]
    assert view["waiting"]["ready"] is True
    assert view["waiting"]["schema"]["required"] == ["ok"]  # what the form shows


async def test_a_payload_the_schema_refuses_is_refused_with_its_message(data: Path) -> None:
    body = {"event": "approval", "data": {"ok": "yes"}, "key": "form-2"}
    async with client(data) as http:
        refused = await http.post("/api/runs/run_wait/send", json=body, headers=JSON)
        unknown = await http.post(
            "/api/runs/run_wait/send", json={"event": "other", "data": 1}, headers=JSON
        )
        missing = await http.post(
            "/api/runs/nobody/send", json={"event": "approval", "data": 1}, headers=JSON
        )
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_event_payload"
    assert "boolean" in refused.json()["message"]
    assert unknown.status_code == 409
    assert unknown.json()["error"] == "not_waiting"
    assert missing.status_code == 404
    assert await _received(data) == []  # nothing written


async def test_with_a_token_a_send_without_it_is_refused(data: Path) -> None:
    body = {"event": "approval", "data": {"ok": True}}
    async with client(data, token=TOKEN, base_url="http://192.0.2.7:8765") as http:
        origin = {"content-type": "application/json", "origin": "http://192.0.2.7:8765"}
        refused = await http.post("/api/runs/run_wait/send", json=body, headers=origin)
        wrong = await http.post(
            "/api/runs/run_wait/send",
            json=body,
            headers={**origin, "cookie": "lw_ui_token=stale"},
        )
        assert refused.status_code == wrong.status_code == 401
        assert await _received(data) == []
        sent = await http.post(
            "/api/runs/run_wait/send",
            json=body,
            headers={**origin, "cookie": f"lw_ui_token={TOKEN}"},
        )
        assert sent.status_code == 200, sent.text
        # A client that is no browser: the bearer token, no Origin.
        curl = await http.post(
            "/api/runs/run_wait/send",
            json={**body, "key": "curl"},
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        assert curl.status_code == 200, curl.text
    assert len(await _received(data)) == 2


async def test_a_send_from_another_origin_is_refused(data: Path) -> None:
    body = {"event": "approval", "data": {"ok": True}}
    async with client(data) as http:
        foreign = await http.post(
            "/api/runs/run_wait/send",
            json=body,
            headers={"content-type": "application/json", "origin": "http://evil.example"},
        )
        fetched = await http.post(
            "/api/runs/run_wait/send",
            json=body,
            headers={**JSON, "sec-fetch-site": "cross-site"},
        )
        # What a plain HTML form of another site can send: no JSON content type.
        form = await http.post(
            "/api/runs/run_wait/send",
            content=b'{"event": "approval", "data": {"ok": true}}',
            headers={"content-type": "text/plain", "origin": OWN},
        )
        read_only = await http.get("/api/runs/run_wait/send")
    assert foreign.status_code == fetched.status_code == 403
    assert foreign.json()["error"] == "cross_origin"
    assert form.status_code == 415
    assert read_only.status_code == 405
    assert await _received(data) == []
