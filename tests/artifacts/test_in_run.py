"""Artifacts and memory made inside real runs: steps, a tool step, an agent's tools; kills."""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from little_workflow.artifacts import ArtifactStore
from little_workflow.errors import ConfigError
from little_workflow.runtime import CRASH_EXIT_CODE, Runtime, RuntimeSetup, StepContext
from tests.artifacts.flows import WORKFLOW, setup
from tests.runtime.support import cli

SETUP = "tests.artifacts.flows:setup"
INPUT = {"topic": "durability"}
EXPECTED = [
    ("report.md", "report", b"# durability\n\nFindings.\n"),
    ("note.txt", "note", b"from a tool step"),
    ("draft.md", "writer/agent.turns[0].tools[c_write]", b"Draft v1"),
]

#: The events that end a commit in this workflow (the last one, RunCompleted, aside).
_COMMIT_ENDS = {"StepCompleted", "harness.model.responded", "harness.tool_call.succeeded"}


def _runtime(data: Path, configured: RuntimeSetup) -> Runtime:
    return Runtime(data, **configured.runtime_options())


def _check_run(data: Path, run_id: str, output: object) -> None:
    """The run made each expected artifact exactly once, and its output names them."""
    store = ArtifactStore(data)
    made = store.list(run_id)
    assert [(m.name, m.step_path, store.read_bytes(m.artifact_id)) for m in made] == EXPECTED
    assert len(list((data / "artifacts" / "manifests").glob("*.json"))) == len(EXPECTED)
    assert isinstance(output, dict)
    assert (output["report"], output["note"]) == (made[0].artifact_id, made[1].artifact_id)
    assert output["writer"] == "recalled: Draft v1"


async def test_steps_tools_and_agents_make_artifacts_and_memories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_TEST_CALLS", str(tmp_path / "calls"))
    data = tmp_path / "data"
    async with _runtime(data, setup()) as rt:
        result = await rt.run(WORKFLOW, INPUT, run_id="run_in")
        _check_run(data, "run_in", result.output)
        report = await rt.memory.entry("reports", "durability")
        draft = await rt.memory.entry("writer", "draft")
    assert report is not None
    assert draft is not None
    assert (report.value, report.run_id, report.step_path) == (
        result.output["report"],  # type: ignore[index, call-overload]
        "run_in",
        "keep",
    )
    assert (draft.value, draft.run_id, draft.step_path) == ("Draft v1", "run_in", "writer")
    # Resuming a completed run replays it: nothing is put again.
    before = sorted(path.stat().st_mtime_ns for path in (data / "artifacts").rglob("*.json"))
    async with _runtime(data, setup()) as rt:
        again = await rt.resume("run_in")
    assert again.output == result.output
    after = sorted(path.stat().st_mtime_ns for path in (data / "artifacts").rglob("*.json"))
    assert after == before


def test_a_step_context_outside_a_run_has_no_stores() -> None:
    bare = StepContext(run_id="run_1", step_path="s", step_id="s", attempt=1, visit=None)
    with pytest.raises(ConfigError):
        bare.artifacts.put("a.txt", b"a")
    with pytest.raises(ConfigError):
        _ = bare.memory


@pytest.mark.parametrize(
    ("variable", "killed_at"),
    [
        ("LW_TEST_KILL_ONCE", "report.md"),  # in an execute step
        ("LW_TEST_KILL_TOOL_ONCE", "note.txt"),  # in a tool step
        ("LW_TEST_KILL_TOOL_ONCE", "draft.md"),  # in an agent's tool call
    ],
)
def test_a_step_or_tool_killed_after_its_put_makes_one_artifact(
    tmp_path: Path, variable: str, killed_at: str
) -> None:
    data = tmp_path / "data"
    calls = tmp_path / "calls"
    env = {
        "LW_TEST_CALLS": str(calls),
        variable: str(tmp_path / "killed"),
        "LW_TEST_KILL_AT": killed_at,
    }
    args = ("--setup", SETUP, "run", str(WORKFLOW), "--input", json.dumps(INPUT))
    killed = cli(data, *args, "--run-id", "run_kill", env=env)
    assert killed.returncode == -9, killed.stderr
    store = ArtifactStore(data)
    before = store.list("run_kill")
    assert before[-1].name == killed_at  # on disk, though its step or call never completed
    resumed = cli(data, "--setup", SETUP, "resume", "run_kill", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert store.list("run_kill")[: len(before)] == before  # the same bytes: not rewritten
    _check_run(data, "run_kill", json.loads(resumed.stdout))
    reruns = 2 if killed_at == "report.md" else 1
    assert calls.read_text().splitlines() == ["run_kill report"] * reruns


def test_a_kill_after_any_commit_leaves_no_duplicate_artifact(tmp_path: Path) -> None:
    env = {"LW_TEST_CALLS": str(tmp_path / "calls")}
    args = ("--setup", SETUP, "run", str(WORKFLOW), "--input", json.dumps(INPUT))
    clean = cli(tmp_path / "clean", *args, "--run-id", "run_x", env=env)
    assert clean.returncode == 0, clean.stderr
    _check_run(tmp_path / "clean", "run_x", json.loads(clean.stdout))
    records = cli(tmp_path / "clean", "events", "run_x", "--json").stdout.splitlines()
    # Write-behind events share the commit of the durable event after them, so a kill
    # after any of them is a kill after that event: one kill point per commit.
    points = [
        record["seq"] for record in map(json.loads, records) if record["type"] in _COMMIT_ENDS
    ]
    assert len(points) >= 13  # every step and every call of the session

    def crash_and_resume(n: int) -> int:
        data = tmp_path / f"crash-{n}"
        crashed = cli(data, *args, "--run-id", "run_x", env=env, crash=n)
        resumed = cli(data, "--setup", SETUP, "resume", "run_x", env=env)
        assert resumed.returncode == 0, (n, resumed.stderr)
        _check_run(data, "run_x", json.loads(resumed.stdout))
        return crashed.returncode

    # Each kill point has its own data directory: they run side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = Counter(pool.map(crash_and_resume, points))
    assert outcomes == {CRASH_EXIT_CODE: len(points)}
