"""An agent's ``ask_user`` inside a run is a wait: real processes, SQLite and PostgreSQL.

The model is scripted (``ask_flows``): its first turn asks a question, its second says
what the person answered. Every request the model gets is counted in a file outside the
processes, so a model call made again after the park (or after a SIGKILL) would show.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from little_workflow.errors import EventRefusedError, RunWaitingError
from little_workflow.events import EventReceived, WaitCompleted, WaitStarted
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models import scripted
from little_workflow.lwir import parse_workflow
from little_workflow.runtime import Runtime
from tests.waits.ask_flows import QUESTION, script

pytestmark = [pytest.mark.timeout(240)]

HERE = Path(__file__).parent
REPO = HERE.parents[1]
SETUP = ("--setup", "tests.waits.ask_flows:setup")
FLOWS = {"lwir": str(HERE / "ask.yaml"), "code": "tests.waits.ask_flows:logo"}
#: The agent's path, hence the event that answers it: ``designer`` in both forms.
EVENT = "ask_user:designer"


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest) -> str | None:
    """``None``: the data directory's SQLite file, no server at all."""
    if request.param == "sqlite":
        return None
    url: str = request.getfixturevalue("postgres_url")
    return url


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LW_TEST_MODEL_CALLS": str(tmp_path / "model_calls.txt"),
        "PYTHONPATH": str(REPO),
    }


def _cli(data_dir: Path, store: str | None, *args: str) -> list[str]:
    prefix = [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *SETUP]
    return prefix + ([] if store is None else ["--store", store]) + list(args)


async def _run(
    data_dir: Path, store: str | None, env: dict[str, str], *args: str
) -> subprocess.CompletedProcess[str]:
    command = _cli(data_dir, store, *args)
    return await asyncio.to_thread(
        subprocess.run, command, cwd=REPO, env=env, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip


def _model_calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "model_calls.txt"
    return path.read_text().splitlines() if path.exists() else []


async def _finished(data_dir: Path, store: str | None, run_id: str) -> bool:
    async with Runtime(data_dir, store=store) as rt:
        return (await rt.get_state(run_id)).finished


async def _until_finished(data_dir: Path, store: str | None, run_id: str) -> None:
    deadline = time.monotonic() + 90
    while not await _finished(data_dir, store, run_id):
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


def _worker(data_dir: Path, store: str | None, env: dict[str, str]) -> subprocess.Popen[str]:
    command = _cli(
        data_dir, store, "worker", "--poll-interval", "0.05", "--recover-every", "0.2",
        "--lease-seconds", "2",
    )  # fmt: skip
    return subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _stop(worker: subprocess.Popen[str]) -> None:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()


async def _check_log(data_dir: Path, store: str | None, run_id: str, answer: str) -> None:
    async with Runtime(data_dir, store=store) as rt:
        state = await rt.get_state(run_id)
        assert state.status.value == "completed", state.failure_message
        assert state.output == {"brand": "Acme", "answer": f"The logo will be {answer}."}
        events = [record.event for record in await rt.events.read(run_id)]
        started = [e for e in events if isinstance(e, WaitStarted)]
        assert [(e.kind, e.event, e.question) for e in started] == [("ask_user", EVENT, QUESTION)]
        assert started[0].step_path.startswith("designer#")
        received = [e for e in events if isinstance(e, EventReceived)]
        assert [(e.event, e.data) for e in received] == [(EVENT, answer)]
        ended = [e for e in events if isinstance(e, WaitCompleted)]
        assert [(e.step_path, e.outcome) for e in ended] == [(started[0].step_path, "event")]


@pytest.mark.slow
@pytest.mark.parametrize("form", ["lwir", "code"])
async def test_a_question_parks_the_run_and_a_send_from_another_process_answers_it(
    tmp_path: Path, store: str | None, form: str
) -> None:
    env = _env(tmp_path)
    data_dir = tmp_path / "data"
    run_id = f"ask_{form}"
    ran = await _run(
        data_dir, store, env, "run", FLOWS[form], "--run-id", run_id, "--input", '{"brand": "Acme"}'
    )
    assert ran.returncode == 7, ran.stderr  # it waits; the process is gone
    assert ran.stdout == ""
    assert QUESTION in ran.stderr
    assert f"send {run_id} {EVENT} --data" in ran.stderr
    assert _model_calls(tmp_path) == ["designer-model 0 Design a logo for Acme"]

    listed = await _run(data_dir, store, env, "runs", "--waiting", "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert row["status"] == "waiting"
    assert row["waiting"]["kind"] == "ask_user"
    assert row["waiting"]["event"] == EVENT
    assert row["waiting"]["question"] == QUESTION
    shown = await _run(data_dir, store, env, "show", run_id)
    assert QUESTION in " ".join(shown.stdout.split())  # wrapped to the terminal's width

    bad = await _run(data_dir, store, env, "send", run_id, EVENT, "--data", '{"colour": 1}')
    assert bad.returncode == 3, bad.stderr  # an answer is a string
    assert "invalid_event_payload" in bad.stderr
    sent = await _run(data_dir, store, env, "send", run_id, EVENT, "--data", '"teal"')
    assert sent.returncode == 0, sent.stderr
    assert "delivered" in sent.stderr

    resumed = await _run(data_dir, store, env, "resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"brand": "Acme", "answer": "The logo will be teal."}
    # The first call was replayed from the ledger, not made again; the second one got
    # the answer as the tool's result.
    assert _model_calls(tmp_path) == [
        "designer-model 0 Design a logo for Acme",
        "designer-model 1 teal",
    ]
    await _check_log(data_dir, store, run_id, "teal")


@pytest.mark.slow
async def test_a_sigkill_of_the_worker_while_the_run_waits_changes_nothing(
    tmp_path: Path, store: str | None
) -> None:
    env = _env(tmp_path)
    data_dir = tmp_path / "data"
    worker_dir = data_dir if store is None else tmp_path / "worker"
    run_id = "ask_killed"
    submitted = await _run(
        data_dir, store, env, "submit", FLOWS["lwir"], "--run-id", run_id,
        "--input", '{"brand": "Acme"}',
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    first = _worker(worker_dir, store, env)
    try:
        deadline = time.monotonic() + 60
        while True:
            async with Runtime(data_dir, store=store) as rt:
                infos = await rt.events.list_runs()
                if run_id in await rt.waiting_runs(infos):
                    break
            assert time.monotonic() < deadline, "the run never waited"
            await asyncio.sleep(0.1)
        first.send_signal(signal.SIGKILL)
        first.communicate()
        assert first.returncode == -signal.SIGKILL
    finally:
        _stop(first)
    sent = await _run(data_dir, store, env, "send", run_id, EVENT, "--data", '"violet"')
    assert sent.returncode == 0, sent.stderr
    second = _worker(worker_dir, store, env)
    try:
        await _until_finished(data_dir, store, run_id)
    finally:
        _stop(second)
    assert _model_calls(tmp_path) == [
        "designer-model 0 Design a logo for Acme",
        "designer-model 1 violet",
    ]
    await _check_log(data_dir, store, run_id, "violet")


def _slots() -> dict[str, ModelSlot]:
    return {"designer": ModelSlot(provider=scripted(script), model="designer-model")}


async def test_ask_user_is_offered_only_when_the_step_enables_it(tmp_path: Path) -> None:
    text = (HERE / "ask.yaml").read_text().replace("    askUser: true\n", "")
    flow = parse_workflow(text)
    async with Runtime(tmp_path / "d", model_slots=_slots()) as rt:
        result = await rt.run(flow, {"brand": "Acme"}, run_id="plain")
        # The model's call of a tool it was not offered fails, and it is told so: the
        # run never waits.
        assert "unknown tool 'ask_user'" in str(result.output)
        events = [record.event for record in await rt.events.read("plain")]
        assert not any(isinstance(e, WaitStarted) for e in events)


async def test_an_answer_before_the_question_is_refused_and_a_timeout_tells_the_model(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "d", model_slots=_slots()) as rt:
        # Not asked yet: a run that has not started its agent, or a finished one.
        text = (
            (HERE / "ask.yaml")
            .read_text()
            .replace("askUser: true", "askUser: true\n    askUserTimeout: 0s")
        )
        with pytest.raises(RunWaitingError) as waiting:
            await rt.run(parse_workflow(text), {"brand": "Acme"}, run_id="late")
        assert waiting.value.waits[0]["question"] == QUESTION
        assert "YOUR ANSWER" in waiting.value.message
        await asyncio.sleep(1.2)  # past the timeout and its grace
        with pytest.raises(EventRefusedError):
            await rt.send("late", EVENT, "too late")
        result = await rt.resume("late")
        assert "no answer to this question came within 0s" in str(result.output)
        events = [record.event for record in await rt.events.read("late")]
        ended = [e for e in events if isinstance(e, WaitCompleted)]
        assert [e.outcome for e in ended] == ["timeout"]
        with pytest.raises(EventRefusedError) as refused:
            await rt.send("late", "ask_user:other", "hello")
        assert refused.value.code == "not_waiting"
