"""``little-workflow fork``: the issue's proof, in real processes, with calls counted in files.

A workflow of a counted step and two worker sessions (a scripted model, two tools). A
fork after an edited step, and a fork out of a resume refused for drift: in both, the
steps before the fork point make no step, model or tool call, and the changed step and
everything after it run anew.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.runtime.agent_flows import HERE as AGENT_FLOWS
from tests.runtime.agent_flows import Tools, slots
from tests.runtime.support import cli, ev, read_calls, runtime

FORK_TWO = AGENT_FLOWS / "fork_two.yaml"
SETUP = ("--setup", "tests.runtime.agent_flows:setup")
ADA = json.dumps({"who": "Ada"})


class Counts:
    """Step, model and tool calls, each appended to its own file by the child processes."""

    def __init__(self, folder: Path) -> None:
        self.steps, self.models, self.tools = (folder / n for n in ("steps", "models", "tools"))
        self.env = {
            "LW_TEST_CALLS": str(self.steps),
            "LW_TEST_MODEL_CALLS": str(self.models),
            "LW_TEST_TOOL_CALLS": str(self.tools),
        }

    def take(self) -> tuple[list[str], list[str], list[str]]:
        """(step paths, model call lines, tool call lines) since the last take."""
        steps = [path for _, path, _ in read_calls(self.steps)]
        models = self.models.read_text().splitlines() if self.models.exists() else []
        tools = self.tools.read_text().splitlines() if self.tools.exists() else []
        for path in (self.steps, self.models, self.tools):
            path.unlink(missing_ok=True)
        return steps, models, tools


SECOND_SESSION = ["worker-model 0", "worker-model 1", "worker-model 2"]


def test_a_fork_after_an_edited_step_replays_everything_before_it(tmp_path: Path) -> None:
    data_dir, counts = tmp_path / "data", Counts(tmp_path)
    ran = cli(
        data_dir, *SETUP, "run", str(FORK_TWO), "--input", ADA, "--run-id", "src", env=counts.env
    )
    assert ran.returncode == 0, ran.stderr
    source = json.loads(ran.stdout)
    assert counts.take() == (
        ["fetch"],
        SECOND_SESSION * 2,
        ['lookup "Ada"', "score 7", 'lookup "Grace"', "score 9"],
    )
    changed = tmp_path / "fork_two.yaml"
    changed.write_text(
        FORK_TWO.read_text().replace(
            'prompt: "Score Grace"', 'prompt: "Raw Grace"\n    output: json'
        )
    )

    refused = cli(
        data_dir, *SETUP, "run", str(changed), "--input", ADA, "--run-id", "src", env=counts.env
    )
    assert refused.returncode == 3
    assert "run_id_conflict" in refused.stderr
    too_late = cli(
        data_dir, *SETUP, "fork", "src", "--at", "out", "--workflow", str(changed), env=counts.env
    )
    assert too_late.returncode == 3
    assert "fork_step_changed" in too_late.stderr
    assert "fork at 'second'" in too_late.stderr
    assert counts.take() == ([], [], [])

    forked = cli(
        data_dir,
        *SETUP,
        "fork",
        "src",
        "--at",
        "second",
        "--workflow",
        str(changed),
        "--run-id",
        "fork_1",
        "--json",
        env=counts.env,
    )
    assert forked.returncode == 0, forked.stderr
    # fetch and the first session: kept, not one call; the edited second: all anew.
    assert counts.take() == ([], SECOND_SESSION, ['lookup "Grace"', "score 9"])
    result = json.loads(forked.stdout)
    assert result == {
        "runId": "fork_1",
        "forkedFrom": {"runId": "src", "at": "second"},
        "status": "completed",
        "keptSteps": 2,
        "executedSteps": 1,
        "output": {"first": source["first"], "second": {"who": "Grace", "score": 90}},
        "error": None,
        "steps": {"replayed": 2, "executed": 1},
        # The edited session's model and tool calls, made anew; the kept steps are
        # replayed whole, not call by call.
        "calls": {"replayed": 0, "made": len(SECOND_SESSION) + 2},
    }

    shown = cli(data_dir, "replay", "fork_1", "--json")
    assert json.loads(shown.stdout)["unreached"] == []


async def test_a_resume_refused_for_drift_names_the_fork_that_keeps_the_work(
    tmp_path: Path,
) -> None:
    data_dir, counts = tmp_path / "data", Counts(tmp_path)
    async with runtime(tmp_path / "ref", model_slots=slots(), tools=Tools().all()) as rt:
        await rt.run(FORK_TWO, {"who": "Ada"}, run_id="src")
        log = await rt.events.read("src")
    # Killed inside the second session, after its first model answer was committed.
    cut = next(
        record.seq
        for record in log
        if record.type == "harness.model.responded" and ev(record).session_id == "second"
    )
    crashed = cli(
        data_dir,
        *SETUP,
        "run",
        str(FORK_TWO),
        "--input",
        ADA,
        "--run-id",
        "src",
        env=counts.env,
        crash=cut,
    )
    assert crashed.returncode == 86, crashed.stderr
    assert counts.take()[1] == [*SECOND_SESSION, "worker-model 0"]

    drifted_env = {**counts.env, "LW_TEST_WORKER_MODEL": "worker-model-2"}
    refused = cli(data_dir, *SETUP, "resume", "src", env=drifted_env)
    assert refused.returncode == 3
    assert refused.stderr.startswith("CapabilityDriftError: Run 'src' was started with")
    assert refused.stderr.endswith(
        "To keep the work done before the first changed step, fork at 'second':\n"
        "  little-workflow fork src --at second\n"
    )
    assert counts.take() == ([], [], [])

    forked = cli(data_dir, *SETUP, "fork", "src", "--at", "second", env=drifted_env)
    assert forked.returncode == 0, forked.stderr
    assert counts.take() == (
        [],
        ["worker-model-2 0", "worker-model-2 1", "worker-model-2 2"],
        ['lookup "Grace"', "score 9"],
    )
    assert json.loads(forked.stdout) == {"first": "Ada scores 70", "second": "Grace scores 90"}
    assert "(forked from src at second) completed: 2 step(s) kept, 1 executed" in forked.stderr
