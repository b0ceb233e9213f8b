"""Real processes: a harness SIGKILLed mid-run and resumed by another; a prompt across exits.

``durable_child`` builds the same harness every time over a SQLite or file checkpoint
store and notes every model and tool call in a file before making it, so the counts
survive the process. Killed at a call (a tool's, or a model's mid-stream), the next
process restores the context and replays the ledger: it ends with the item log of a run
that was never killed, and only the call that was cut off is made again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from little_workflow.durable import StepLedgerRetention
from little_workflow.harness import agent, call_model, run_code, sequence, tool
from little_workflow.harness.models import scripted
from little_workflow.storage import create_in_memory_storage
from tests.harness.durable_support import (
    CallLog,
    Crash,
    LoggedProvider,
    Steps,
    durable_harness,
    item_log,
    ledger_entries,
    make_tools,
)

REPO = Path(__file__).resolve().parents[2]
CALLS = ["model turn=0", "tool lookup Ada", "model turn=1", "tool score 7", "model turn=2"]


def child(store: str, log: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.harness.durable_child",
            "--store",
            store,
            "--execution",
            "exec_proc",
            "--log",
            str(log),
            *args,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def answer(store: str, data_dir: Path, prompt_id: str, text: str) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "little_workflow",
            "--data-dir",
            str(data_dir),
            "answer",
            "exec_proc",
            prompt_id,
            text,
            "--checkpoints",
            store,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def reference_items() -> list[Any]:
    """The item log of the same execution, never killed."""
    harness = durable_harness(create_in_memory_storage(), graph=agent(slot="main"))
    ctx = harness.create_context(id="exec_proc", instructions="Be brief")
    assert await harness.execute(ctx, "Ada") == "Ada scores 70"
    return item_log(ctx)


def store_url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/cp.db" if kind == "sqlite" else f"file://{tmp_path}/cp"


@pytest.mark.parametrize("kind", ["sqlite", "file"])
@pytest.mark.parametrize("kill", CALLS)
async def test_sigkill_mid_run_then_resume_in_a_new_process(
    tmp_path: Path, kind: str, kill: str
) -> None:
    store, log = store_url(kind, tmp_path), tmp_path / "calls"
    killed = child(store, log, "--input", "Ada", "--kill", kill)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert CallLog(log).lines() == CALLS[: CALLS.index(kill) + 1]

    resumed = child(store, log, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["output"] == "Ada scores 70"
    assert result["frontier"] == []
    assert result["items"] == await reference_items()
    # Every call recorded before the kill replayed; only the one cut off ran again.
    at = CALLS.index(kill)
    assert CallLog(log).lines() == CALLS[: at + 1] + CALLS[at:]


def test_a_second_kill_during_the_resume(tmp_path: Path) -> None:
    store, log = store_url("sqlite", tmp_path), tmp_path / "calls"
    first = child(store, log, "--input", "Ada", "--kill", "tool lookup Ada")
    assert first.returncode == -signal.SIGKILL
    second = child(store, log, "--resume", "--kill", "model turn=2")
    assert second.returncode == -signal.SIGKILL
    third = child(store, log, "--resume")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["output"] == "Ada scores 70"
    assert CallLog(log).lines() == [
        "model turn=0",
        "tool lookup Ada",
        "tool lookup Ada",
        "model turn=1",
        "tool score 7",
        "model turn=2",
        "model turn=2",
    ]


def test_a_process_suspends_on_a_question_and_another_continues(tmp_path: Path) -> None:
    store, log = store_url("sqlite", tmp_path), tmp_path / "calls"
    asked = child(store, log, "--graph", "ask", "--suspend", "--input", "go")
    assert asked.returncode == 0, asked.stderr
    assert json.loads(asked.stdout) == {"awaiting": "flow.ask", "question": "Whom should I score?"}
    assert CallLog(log).lines() == []  # the process is gone; nothing was asked of the model

    still = child(store, log, "--graph", "ask", "--suspend", "--resume")
    assert json.loads(still.stdout) == {"awaiting": "flow.ask", "question": "Whom should I score?"}

    answer(store, tmp_path / "data", "flow.ask", "Ada")
    resumed = child(store, log, "--graph", "ask", "--suspend", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["output"] == "Ada scores 70"
    assert [item["message"]["content"] for item in result["items"][:2]] == ["go", "Ada"]
    assert CallLog(log).lines() == CALLS
    # A later resume replays everything, the answer included.
    again = child(store, log, "--graph", "ask", "--suspend", "--resume")
    assert json.loads(again.stdout)["output"] == "Ada scores 70"
    assert CallLog(log).lines() == CALLS


def test_a_waiting_process_takes_an_answer_from_the_command_line(tmp_path: Path) -> None:
    store, log = store_url("sqlite", tmp_path), tmp_path / "calls"
    waiting = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.harness.durable_child",
            "--store",
            store,
            "--execution",
            "exec_proc",
            "--log",
            str(log),
            "--graph",
            "ask",
            "--input",
            "go",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The prompt is durable once asked: the command finds it in the snapshot.
        deadline = time.monotonic() + 30
        while True:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "little_workflow",
                    "--data-dir",
                    str(tmp_path / "d"),
                    "answer",
                    "exec_proc",
                    "flow.ask",
                    "Ada",
                    "--checkpoints",
                    store,
                ],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if done.returncode == 0:
                break
            assert time.monotonic() < deadline, done.stderr
            assert waiting.poll() is None, waiting.communicate()
        out, err = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            os.kill(waiting.pid, signal.SIGKILL)
            waiting.wait()
    assert waiting.returncode == 0, err
    assert json.loads(out)["output"] == "Ada scores 70"


async def test_an_unrecorded_model_turn_is_issued_again_and_deduplicated(
    tmp_path: Path,
) -> None:
    """The snapshot holds model answers the ledger does not (too big to keep): on restart
    the turns are issued again; an identical answer (same response id) is not appended
    twice."""
    storage = create_in_memory_storage()
    keep_tools_only = StepLedgerRetention(max_entry_bytes=100)  # no model answer fits
    log = CallLog(tmp_path / "calls")
    lookup, _ = make_tools(log)

    @tool
    def score(years: int) -> int:
        """Score years of experience.

        Args:
            years: Years.
        """
        log.note(f"tool score {years}")  # the same tool as make_tools' (the same spec), dying
        raise Crash

    first = durable_harness(
        storage, provider=LoggedProvider(log), tools=[lookup, score], retention=keep_tools_only
    )
    ctx = first.create_context(id="exec_proc", instructions="Be brief")
    with pytest.raises(Crash):
        await first.execute(ctx, "Ada")
    assert [e["kind"] for e in await ledger_entries(storage, "exec_proc")] == ["tool"]
    assert len(ctx.items) == 4

    second = durable_harness(
        storage, provider=LoggedProvider(log), tools=make_tools(log), retention=keep_tools_only
    )
    outcome = await second.resume("exec_proc")
    assert outcome is not None
    assert outcome[1] == "Ada scores 70"
    assert item_log(outcome[0]) == await reference_items()
    assert log.lines() == [
        *CALLS[:4],
        "model turn=0",
        "model turn=1",
        "tool score 7",
        "model turn=2",
    ]


async def test_a_different_answer_to_a_reissued_turn_is_a_new_turn() -> None:
    storage = create_in_memory_storage()
    answers = iter(["first answer", "second answer"])
    provider = scripted(lambda request: next(answers))
    steps = Steps(crash="c")
    graph = sequence([call_model("main", id="model"), run_code(steps.c, id="c")], id="flow")
    tiny = StepLedgerRetention(max_entry_bytes=10)
    harness = durable_harness(storage, graph=graph, provider=provider, retention=tiny)
    with pytest.raises(Crash):
        await harness.execute(harness.create_context(id="exec_diff"), "hi")
    resumed = durable_harness(storage, graph=graph, provider=provider, retention=tiny)
    outcome = await resumed.resume("exec_diff")
    assert outcome is not None
    assert [(m.role, m.content) for m in outcome[0].items.messages] == [
        ("user", "hi"),
        ("assistant", "first answer"),
        ("assistant", "second answer"),
    ]
