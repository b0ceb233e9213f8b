"""A code-first workflow that declares its events: ``send`` checks them before the wait.

``@workflow(events=...)`` is pinned in the run's ``RunStarted``; a send to a run that has
not reached its wait is refused for an undeclared event or a payload failing the declared
schema, with nothing written; a good one is kept and delivered at the wait. A workflow that
declares nothing keeps the old behaviour (checked at the wait). SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.errors import (
    ConfigError,
    EventPayloadError,
    EventRefusedError,
    LittleWorkflowError,
)
from little_workflow.events import EventReceived, RunStarted, WaitCompleted, WaitStarted
from little_workflow.runtime import Runtime
from tests.waits.declared_flows import declared, misdeclared, unguarded
from tests.waits.flows import approve

REPO = Path(__file__).parents[2]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """``None``: the data directory's SQLite file."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


async def _types(rt: Runtime, run_id: str) -> list[str]:
    return [record.type for record in await rt.events.read(run_id)]


async def test_a_send_before_the_wait_is_checked_against_the_declaration(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        await rt.submit(declared, {"n": 2}, run_id="d1")  # not driven: no wait reached
        state = await rt.get_state("d1")
        assert state.declared_events is not None
        assert state.declared_events["note"] is None
        approval = state.declared_events["approval"]
        assert isinstance(approval, dict)
        assert "by" in approval["required"]

        with pytest.raises(EventPayloadError) as bad:
            await rt.send("d1", "approval", {"ok": True})  # no "by"
        assert bad.value.code == "invalid_event_payload"
        assert "by" in bad.value.message
        with pytest.raises(EventRefusedError) as never:
            await rt.send("d1", "payment", {"ok": True})
        assert never.value.code == "not_waiting"
        assert "declares no such event" in never.value.message
        assert await _types(rt, "d1") == ["RunStarted"]  # nothing written

        sent = await rt.send("d1", "approval", {"ok": True, "by": "ann"}, key="a1")
        assert sent.outcome == "delivered"
        assert (await rt.send("d1", "note", [1, "two"], key="n1")).outcome == "delivered"
        result = await rt.resume("d1")
        assert result.output == {"n": 4, "by": "ann", "note": [1, "two"]}
        events = [record.event for record in await rt.events.read("d1")]
        assert [e.key for e in events if isinstance(e, EventReceived)] == ["a1", "n1"]
        ended = [(e.step_path, e.outcome, e.key) for e in events if isinstance(e, WaitCompleted)]
        assert ended == [("approval", "event", "a1"), ("note", "event", "n1")]
        started = [e for e in events if isinstance(e, WaitStarted)]
        assert [e.schema_ for e in started] == [approval, None]  # the declared schemas


async def test_a_workflow_that_declares_nothing_checks_at_the_wait(
    tmp_path: Path, store: str | None
) -> None:
    async with Runtime(tmp_path / "d", store=store) as rt:
        await rt.submit(approve, {"n": 1}, run_id="u1")
        assert (await rt.get_state("u1")).declared_events is None
        record = (await rt.events.read("u1"))[0].event
        assert isinstance(record, RunStarted)
        assert "declaredEvents" not in record.model_dump(mode="json", by_alias=True)
        # Accepted before the wait: the body has not said what it waits for yet.
        assert (await rt.send("u1", "payment", {"any": 1})).outcome == "delivered"
        assert (await rt.send("u1", "approval", {"ok": True}, key="b1")).outcome == "delivered"
        with pytest.raises(LittleWorkflowError):
            await rt.resume("u1")
        state = await rt.get_state("u1")
        assert state.status.value == "failed"
        assert state.failure_cause == "invalid_event_payload"


async def test_wait_for_refuses_an_undeclared_event_or_another_schema_at_the_call(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "d") as rt:
        result = await rt.run(misdeclared, {}, run_id="m1")
        assert result.output == ["undeclared_event", "event_schema_mismatch"]
        assert "WaitStarted" not in await _types(rt, "m1")
        with pytest.raises(LittleWorkflowError):
            await rt.run(unguarded, {}, run_id="m2")
        state = await rt.get_state("m2")
        assert state.status.value == "failed"
        assert "undeclared_event" in (state.failure_message or "")
        assert "WaitStarted" not in await _types(rt, "m2")


def test_a_declaration_is_checked_when_decorated() -> None:
    from little_workflow import workflow

    async def body(ctx: object) -> None:
        return None

    with pytest.raises(ConfigError, match="JSON Schema"):
        workflow(events={"approval": {"type": 3}})(body)
    with pytest.raises(ConfigError, match="not an event name"):
        workflow(events={"an event": None})(body)
    with pytest.raises(ConfigError, match="pydantic model"):
        workflow(events={"approval": int})(body)  # type: ignore[dict-item]


def test_the_cli_send_refuses_before_the_wait_with_nothing_written(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args]
        return subprocess.run(
            command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )

    flow = "tests.waits.declared_flows:declared"
    submitted = cli("submit", flow, "--input", '{"n": 1}', "--run-id", "c1")
    assert submitted.returncode == 0, submitted.stderr
    bad = cli("send", "c1", "approval", "--data", '{"ok": "yes", "by": "ann"}')
    assert bad.returncode == 3
    assert "invalid_event_payload" in bad.stderr
    never = cli("send", "c1", "payment", "--data", "{}")
    assert never.returncode == 3
    assert "not_waiting" in never.stderr
    good = cli("send", "c1", "approval", "--data", '{"ok": true, "by": "ann"}')
    assert good.returncode == 0, good.stderr

    async def types() -> list[str]:
        async with Runtime(data_dir) as rt:
            return await _types(rt, "c1")

    assert asyncio.run(types()) == ["RunStarted", "EventReceived"]  # the good one only
