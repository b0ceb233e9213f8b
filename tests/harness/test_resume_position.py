"""A resumed execution shows later steps the conversation a completed composite left.

A composite step that completed before the crash (a whole ``agent``) replays from the
ledger without running its children, so none of its items are appended again. The
ledger records where the item log stood when the composite ended, and the replay moves
there: a code step after the agent sees its answer, a second agent sees the first one's
turns. Each test kills a real ``durable_child`` process with SIGKILL after the first
composite completed, resumes in a fresh process, and compares with an uncrashed run.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.harness.durable_support import CallLog
from tests.harness.test_processes import CALLS, child, store_url


def uncrashed(tmp_path: Path, kind: str, graph: str) -> dict[str, Any]:
    """The same execution in a store of its own, never killed."""
    clean = tmp_path / "clean"
    clean.mkdir()
    done = child(store_url(kind, clean), clean / "calls", "--graph", graph, "--input", "Ada")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_code_step_after_a_replayed_agent_sees_its_answer(tmp_path: Path, kind: str) -> None:
    expected = uncrashed(tmp_path, kind, "agent-code")
    assert expected["output"] == {"answer": "Ada scores 70", "messages": 6}

    store, log = store_url(kind, tmp_path), tmp_path / "calls"
    killed = child(store, log, "--graph", "agent-code", "--input", "Ada", "--kill", "code report")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = child(store, log, "--graph", "agent-code", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["output"] == expected["output"]
    assert result["items"] == expected["items"]
    # The agent replayed whole: no model or tool call again, only the code step.
    assert CallLog(log).lines() == [*CALLS, "code report", "code report"]


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_a_second_agent_after_a_replayed_one_sees_its_turns(tmp_path: Path, kind: str) -> None:
    expected = uncrashed(tmp_path, kind, "two-agents")
    # The second agent saw the first one's three answers: the script answers at once.
    assert CallLog(tmp_path / "clean" / "calls").lines() == [*CALLS, "model turn=3"]

    store, log = store_url(kind, tmp_path), tmp_path / "calls"
    killed = child(store, log, "--graph", "two-agents", "--input", "Ada", "--kill", "model turn=3")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = child(store, log, "--graph", "two-agents", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    assert result["output"] == expected["output"] == "Ada scores 70"
    assert result["items"] == expected["items"]
    # The first agent was not called again: only the call the kill cut off was.
    assert CallLog(log).lines() == [*CALLS, "model turn=3", "model turn=3"]


@pytest.mark.parametrize("kind", ["sqlite"])
def test_a_spawned_agent_rebuilds_its_conversation_on_resume(tmp_path: Path, kind: str) -> None:
    """A spawned agent's context is not snapshotted: a resume rebuilds it by replaying the
    child's steps one by one, so its code step still sees the agent's answer."""
    expected = uncrashed(tmp_path, kind, "spawned")
    assert expected["output"] == {"answer": "Ada scores 70", "messages": 6}

    store, log = store_url(kind, tmp_path), tmp_path / "calls"
    killed = child(store, log, "--graph", "spawned", "--input", "Ada", "--kill", "code report")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    resumed = child(store, log, "--graph", "spawned", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["output"] == expected["output"]
    assert CallLog(log).lines() == [*CALLS, "code report", "code report"]
