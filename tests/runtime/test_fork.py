"""``Runtime.fork``: a new run that keeps its source's work before a step path.

Step functions count their calls in a file (``LW_TEST_CALLS``), outside the process;
the scripted model and the tools count theirs. Every fork is checked for what it did
*not* call (the kept steps) as much as for what it did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import (
    ConfigError,
    InvalidForkPointError,
    InvalidValueError,
    RunFailedError,
)
from little_workflow.events import ForkOrigin, RunStatus, encode_event
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models import scripted
from little_workflow.runtime import Runtime
from tests.runtime.agent_flows import HERE as AGENT_FLOWS
from tests.runtime.agent_flows import Tools, script, slots
from tests.runtime.support import FLOWS, REPO, cli, of_type, read_calls, runtime

REVIEW = FLOWS / "review.yaml"
FORK_FLOW = FLOWS / "fork_flow.yaml"
FORK_TWO = AGENT_FLOWS / "fork_two.yaml"
QUERY = {"query": "q"}
ALL_REVIEW_CALLS = [
    "fetch",
    "review-candidates[cand_1].worker",
    "review-candidates[cand_2].worker",
    "review-candidates[cand_3].worker",
    "total",
    "judge.visit[0]",
    "revise.visit[0]",
    "judge.visit[1]",
]


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "calls"
    monkeypatch.setenv("LW_TEST_CALLS", str(path))
    return path


def take(calls: Path, run_id: str | None = None) -> list[str]:
    """The step paths called so far (by ``run_id`` if given), and reset the count."""
    found = [path for called, path, _ in read_calls(calls) if run_id in (None, called)]
    calls.unlink(missing_ok=True)
    return found


async def snapshot(rt: Runtime) -> dict[str, Any]:
    """Every run's events (as stored, with their times) and the pinned workflows."""
    runs = {}
    for info in await rt.events.list_runs():
        runs[info.run_id] = [
            (r.seq, r.ts, r.type, encode_event(r.event)) for r in await rt.events.read(info.run_id)
        ]
    return {"runs": runs, "workflows": sorted(await rt.kv.list("workflows/"))}


def edited(tmp_path: Path, source: Path, old: str, new: str, name: str | None = None) -> Path:
    """A copy of ``source`` (beside it in ``tmp_path``) with ``old`` replaced by ``new``."""
    text = source.read_text()
    assert old in text
    target = tmp_path / (name or source.name)
    target.write_text(text.replace(old, new))
    for sibling in source.parent.glob("*.yaml"):
        if not (tmp_path / sibling.name).exists():
            shutil.copy(sibling, tmp_path / sibling.name)
    return target


# --- what is kept, what runs anew ---------------------------------------------------


async def test_a_fork_at_a_loop_visit_keeps_everything_before_it(
    tmp_path: Path, calls: Path
) -> None:
    async with runtime(tmp_path / "data") as rt:
        source = await rt.run(REVIEW, QUERY, run_id="src")
        assert take(calls) == ALL_REVIEW_CALLS
        before = await snapshot(rt)

        fork = await rt.fork("src", at="judge.visit[1]")

        assert take(calls) == ["judge.visit[1]"]
        assert fork.run_id != "src"
        assert fork.output == source.output
        assert (fork.replayed_steps, fork.executed_steps) == (5, 1)
        assert fork.state.forked_from == ForkOrigin(run_id="src", at="judge.visit[1]")
        # The kept workflow step references the source's sub-run; none was started.
        (started,) = of_type(await rt.events.read(fork.run_id), "SubRunStarted")
        assert started.sub_run_id == source.state.steps["summarize"].sub_run_id
        assert await rt.events.list_runs(parent_run_id=fork.run_id) == []
        # The copied log is whole: a replay reaches every step it holds.
        replayed = await rt.replay(fork.run_id)
        assert (replayed.output, replayed.unreached) == (source.output, ())
        # The source is untouched (its events byte for byte, with their times).
        after = await snapshot(rt)
        assert after["runs"]["src"] == before["runs"]["src"]


async def test_a_fork_at_a_map_step_runs_the_map_and_what_follows(
    tmp_path: Path, calls: Path
) -> None:
    async with runtime(tmp_path / "data") as rt:
        source = await rt.run(REVIEW, QUERY, run_id="src")
        take(calls)
        fork = await rt.fork("src", at="review-candidates")
    assert take(calls) == ALL_REVIEW_CALLS[1:]
    assert fork.output == source.output
    assert fork.replayed_steps == 1


async def test_a_fork_inside_a_map_branch_keeps_the_branches_before_it(
    tmp_path: Path, calls: Path
) -> None:
    async with runtime(tmp_path / "data") as rt:
        await rt.run(REVIEW, QUERY, run_id="src")
        take(calls)
        fork = await rt.fork("src", at="review-candidates[cand_2].worker")
        log = await rt.events.read(fork.run_id)
    # Walk order: branches in item order, so cand_3 comes after cand_2 and runs too.
    assert take(calls) == ALL_REVIEW_CALLS[2:]
    assert fork.state.forked_from == ForkOrigin(run_id="src", at="review-candidates[cand_2].worker")
    copied = [event.step_path for event in of_type(log, "StepCompleted")][:2]
    assert copied == ["fetch", "review-candidates[cand_1].worker"]


async def test_a_fork_of_a_failed_run_with_new_input(tmp_path: Path, calls: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(RunFailedError):
            await rt.run(FORK_FLOW, {"query": "q", "value": "bad"}, run_id="src")
        assert take(calls) == ["fetch", "check"]

        fork = await rt.fork("src", at="check", input={"query": "other", "value": "good"})

        assert take(calls) == ["check", "stamp"]
        assert fork.status is RunStatus.COMPLETED
        # fetch was kept: its output is the source's, rendered from the old input.
        assert fork.output == {"query": "q", "stamped": "GOOD"}
        assert fork.state.input == {"query": "other", "value": "good"}
        assert (await rt.get_state("src")).status is RunStatus.FAILED


async def test_a_fork_with_an_edited_workflow(tmp_path: Path, calls: Path) -> None:
    flows = tmp_path / "flows"
    flows.mkdir()
    text = REVIEW.read_text()
    changed = flows / "review.yaml"
    changed.write_text(
        text.replace("maxVisits: 3\n    with:", "maxVisits: 4\n    with:").replace(
            "    value:\n", "    value:\n      edited: yes\n"
        )
    )
    shutil.copy(FLOWS / "summarize.yaml", flows / "summarize.yaml")
    async with runtime(tmp_path / "data") as rt:
        source = await rt.run(REVIEW, QUERY, run_id="src")
        take(calls)
        # A resume cannot take the edit: the run id belongs to the other workflow.
        with pytest.raises(ConfigError) as refused:
            await rt.run(changed, QUERY, run_id="src")
        assert refused.value.code == "run_id_conflict"
        # The edited judge is the first changed step: a fork after it cannot keep it.
        with pytest.raises(InvalidForkPointError) as caught:
            await rt.fork("src", at="revise.visit[0]", workflow=changed)
        assert caught.value.code == "fork_step_changed"
        assert caught.value.fork_at == "judge.visit[0]"
        assert "fork at 'judge.visit[0]'" in caught.value.message
        assert take(calls) == []

        fork = await rt.fork("src", at="judge.visit[0]", workflow=changed)
    assert take(calls) == ["judge.visit[0]", "revise.visit[0]", "judge.visit[1]"]
    assert fork.output == {**source.output, "edited": "yes"}  # type: ignore[dict-item]
    assert fork.state.definition_hash != source.state.definition_hash


async def test_prompts_policy_and_model_slots_change_the_forked_steps(tmp_path: Path) -> None:
    provider, tools = scripted(script), Tools()
    other = scripted(script)
    async with runtime(tmp_path / "data", model_slots=slots(provider), tools=tools.all()) as rt:
        source = await rt.run(FORK_TWO, {"who": "Ada"}, run_id="src")
        assert (provider.calls, len(tools.calls)) == (6, 4)

        fork = await rt.fork(
            "src",
            at="second",
            prompts={"second": {"prompt": "Raw Linus"}},
            policy={"second": {"attempts": 2}},
            model_slots={"worker": ModelSlot(provider=other, model="worker-model-2")},
        )
        (session,) = [
            e
            for e in of_type(await rt.events.read(fork.run_id), "harness.session.started")
            if e.session_id == "second"
        ]

    assert provider.calls == 6  # nothing more on the source's slot
    assert other.calls == 3
    assert tools.calls[4:] == [("lookup", "Linus"), ("score", 9)]
    assert fork.output == {
        "first": source.output["first"],
        "second": '{"who": "Linus", "score": 90}',
    }  # type: ignore[index]
    assert session.manifest["workerModelSlotId"] == "worker-model-2"
    # The runtime's own slots are unchanged: the override was for the fork.
    assert rt.model_slots["worker"].model == "worker-model"


async def test_a_fork_of_a_fork_and_the_same_fork_again(tmp_path: Path, calls: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        await rt.run(REVIEW, QUERY, run_id="src")
        first = await rt.fork("src", at="summarize", run_id="fork_1")
        take(calls)
        again = await rt.fork("src", at="summarize", run_id="fork_1")
        assert again.output == first.output
        assert take(calls) == []  # the same fork, already complete: nothing runs
        with pytest.raises(ConfigError) as caught:
            await rt.fork("src", at="judge.visit[0]", run_id="fork_1")
        assert caught.value.code == "run_id_conflict"

        second = await rt.fork("fork_1", at="judge.visit[1]")
    assert take(calls) == ["judge.visit[1]"]
    assert second.output == first.output
    assert second.state.forked_from == ForkOrigin(run_id="fork_1", at="judge.visit[1]")


# --- refused fork points ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "code", "fork_at", "says"),
    [
        ("jduge.visit[0]", "fork_unknown_step", None, "did you mean 'judge.visit[0]'"),
        ("judge", "fork_unknown_step", None, "a fork names one visit: judge.visit[<n>]"),
        ("fetch.visit[0]", "fork_unknown_step", None, "runs once"),
        ("review-candidates[cand_1]", "fork_unknown_step", None, "name a step of its body"),
        ("fetch[x].worker", "fork_unknown_step", None, "is not a map"),
        ("not a path!", "fork_unknown_step", None, "invalid step path"),
        ("judge.visit[2]", "fork_point_not_reached", None, "never went there"),
        ("review-candidates[cand_9].worker", "fork_point_not_reached", None, "never went"),
    ],
)
async def test_a_bad_fork_point_is_a_typed_error_and_writes_nothing(
    tmp_path: Path, calls: Path, at: str, code: str, fork_at: str | None, says: str
) -> None:
    async with runtime(tmp_path / "data") as rt:
        await rt.run(REVIEW, QUERY, run_id="src")
        take(calls)
        before = await snapshot(rt)
        with pytest.raises(InvalidForkPointError) as caught:
            await rt.fork("src", at=at, run_id="fork_1")
        assert await snapshot(rt) == before
    error = caught.value
    assert (error.code, error.fork_at, error.run_id) == (code, fork_at, "src")
    assert says in error.message
    assert take(calls) == []
    assert not (tmp_path / "data" / "runs" / "fork_1").exists()


async def test_a_fork_past_an_unfinished_step_names_that_step(tmp_path: Path, calls: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        with pytest.raises(RunFailedError):
            await rt.run(FORK_FLOW, {"query": "q", "value": "bad"}, run_id="src")
        before = await snapshot(rt)
        with pytest.raises(InvalidForkPointError) as caught:
            await rt.fork("src", at="stamp")
        assert await snapshot(rt) == before
        with pytest.raises(ConfigError) as missing:
            await rt.fork("no_such_run", at="stamp")
    assert (caught.value.code, caught.value.fork_at) == ("fork_point_not_reached", "check")
    assert missing.value.code == "run_not_found"


async def test_bad_changes_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    async with runtime(tmp_path / "data") as rt:
        await rt.run(REVIEW, QUERY, run_id="src")
        before = await snapshot(rt)
        refusals = [
            {"prompts": {"fetch": {"prompt": "x"}}},  # not an agent step
            {"prompts": {"nope": {"prompt": "x"}}},
            {"policy": {"review-candidates": {"attempts": 2}}},  # a map has no retry
            {"policy": {"fetch": {"attempts": 0}}},
            {"input": {1, 2}},
        ]
        for changes in refusals:
            with pytest.raises((ConfigError, InvalidValueError)):
                await rt.fork("src", at="summarize", **changes)
        assert await snapshot(rt) == before


# --- a fork is a run like any other -----------------------------------------------------


def test_a_fork_killed_mid_run_resumes_like_any_run(tmp_path: Path) -> None:
    data_dir, counted, kill_file = tmp_path / "data", tmp_path / "calls", tmp_path / "killed"
    env = {"LW_TEST_CALLS": str(counted)}
    made = cli(
        data_dir,
        "run",
        str(FORK_FLOW),
        "--input",
        '{"query": "q", "value": "a"}',
        "--run-id",
        "src",
        env=env,
    )
    assert made.returncode == 0, made.stderr
    assert take(counted) == ["fetch", "check", "stamp"]

    fork_args = ("fork", "src", "--at", "check", "--input", '{"query": "q", "value": "b"}')
    fork_args += ("--run-id", "fork_1")
    command = [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *fork_args]
    killed = subprocess.run(
        command,
        cwd=REPO,
        env={**os.environ, **env, "LW_TEST_KILL_FILE": str(kill_file)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert take(counted) == ["check", "stamp"]

    resumed = cli(data_dir, "resume", "fork_1", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"query": "q", "stamped": "B"}
    assert take(counted) == ["stamp"]  # check was committed before the kill; fetch kept

    again = cli(data_dir, *fork_args, env=env)  # the same command again: nothing to do
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == {"query": "q", "stamped": "B"}
    assert take(counted) == []
