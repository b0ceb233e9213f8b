"""``CapabilityDriftError``: a session resumed with another configuration fails closed.

Each test stops a run inside a session (a tool raises ``Crash``: the work stops with
only the committed events in the log, as after a kill), changes one thing the session's
manifest records, and resumes. The resume must refuse before any model or tool call and
without writing an event, with the seed's message to the letter; restored, the run
resumes and completes.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import CapabilityDriftError
from little_workflow.events import RunStatus
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import Tool, tool
from little_workflow.harness.models import ModelOptions, ModelRequest, scripted
from little_workflow.lwir import definition_hash, load_workflow
from little_workflow.runtime import CRASH_EXIT_CODE, Runtime
from little_workflow.runtime._state import unfinished_sub_runs
from tests.runtime.agent_flows import (
    ORCHESTRATE,
    ORCHESTRATOR_MODEL,
    SCORE_ONE,
    WORKER_MODEL,
    Tools,
    lookup_v2,
    orchestrator_workflow,
    script,
    slots,
    worker_workflow,
)
from tests.runtime.support import Crash, cli, ev, runtime

ADA = {"who": "Ada"}
RUN = "run_x"


class Config:
    """One runtime configuration: its provider and tools count the calls made under it."""

    def __init__(
        self,
        *,
        worker: str = WORKER_MODEL,
        orchestrator: str = ORCHESTRATOR_MODEL,
        drop_slot: str | None = None,
        tools: Sequence[str] = ("lookup", "score", "check"),
        lookup: Tool[..., Any] | None = None,
        workflows: bool = True,
        worker_options: ModelOptions | None = None,
    ) -> None:
        self.requests: list[ModelRequest] = []

        def answer(request: ModelRequest) -> Any:
            self.requests.append(request)
            return script(request)

        self.provider = scripted(answer)
        self.slots = slots(self.provider, worker=worker, orchestrator=orchestrator)
        if worker_options is not None:
            self.slots["worker"] = replace(self.slots["worker"], options=worker_options)
        if drop_slot is not None:
            del self.slots[drop_slot]
        self.tools = Tools()
        offered = {"lookup": lookup or self.tools.lookup, "score": self.tools.score}
        offered["check"] = self.tools.check
        self.offered = [offered[name] for name in tools]
        self.workflows = [worker_workflow()] if workflows else []

    def runtime(self, data_dir: Path) -> Runtime:
        return runtime(
            data_dir, model_slots=self.slots, tools=self.offered, workflows=self.workflows
        )

    @property
    def calls(self) -> tuple[int, int]:
        """(model calls, tool calls) made under this configuration."""
        return self.provider.calls, len(self.tools.calls)


def drift_message(role: str, *changes: str, run_id: str = RUN, fork_at: str = "worker") -> str:
    """The seed's message, and the fork that keeps the work before the drifted step (of
    the run that was resumed, ``RUN``, even when the drift is in one of its sub-runs)."""
    return "\n".join(
        [
            f"Run '{run_id}' was started with a different {role} config.",
            "",
            "Changes detected:",
            *changes,
            "",
            "To resume cleanly, restore the prior state.",
            "To start fresh, run with a new runId.",
            f"To keep the work done before the first changed step, fork at '{fork_at}':",
            f"  little-workflow fork {RUN} --at {fork_at}",
        ]
    )


async def crash_in_session(data_dir: Path, workflow: Any) -> None:
    """Run ``workflow`` until the worker's ``score`` call, which stops the process's work.

    The worker's turns 0 and 1 and its lookup are committed by then (and an
    orchestrator's first turn, which started the worker's sub-run).
    """
    config = Config()
    config.tools.crash_at = "score"
    async with config.runtime(data_dir) as rt:
        with pytest.raises(Crash):
            await rt.run(workflow, ADA, run_id=RUN)
        state = await rt.get_state(RUN)
        orchestrated = bool(await rt.events.list_runs(parent_run_id=RUN))
    assert state.status is RunStatus.RUNNING
    assert config.calls == (3 if orchestrated else 2, 1)


async def event_counts(rt: Runtime) -> dict[str, int]:
    runs = [RUN] + [child.run_id for child in await rt.events.list_runs(parent_run_id=RUN)]
    return {run_id: len(await rt.events.read(run_id)) for run_id in runs}


async def refused(data_dir: Path, config: Config) -> CapabilityDriftError:
    """Resume under ``config``: the drift error, once nothing was called or written."""
    async with config.runtime(data_dir) as rt:
        before = await event_counts(rt)
        with pytest.raises(CapabilityDriftError) as caught:
            await rt.resume(RUN)
        assert await event_counts(rt) == before
    assert config.calls == (0, 0)
    assert caught.value.code == "capability_drift"
    return caught.value


async def resumes(data_dir: Path, expected: Any) -> Config:
    config = Config()
    async with config.runtime(data_dir) as rt:
        result = await rt.resume(RUN)
    assert result.status is RunStatus.COMPLETED
    assert result.output == expected
    return config


# --- a worker session -----------------------------------------------------------------


async def test_a_changed_worker_model_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())

    error = await refused(data_dir, Config(worker="gpt-4o-mini"))
    assert error.message == drift_message(
        "worker", '- workerModelSlotId: "worker-model" → "gpt-4o-mini"'
    )
    assert str(error) == error.message or error.message in str(error)
    assert error.changes == [("workerModelSlotId", WORKER_MODEL, "gpt-4o-mini")]
    assert (error.run_id, error.scope) == (RUN, "worker")

    restored = await resumes(data_dir, "Ada scores 70")
    assert restored.calls == (1, 1)  # turn 2 and the score call that was cut


async def test_changed_slot_options_are_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())

    error = await refused(data_dir, Config(worker_options=ModelOptions(seed=7, top_p=0.5)))
    assert error.changes == [("workerModelOptions", "(absent)", {"topP": 0.5, "seed": 7})]
    assert error.message == drift_message(
        "worker", '- workerModelOptions: (absent) → {"seed": 7, "topP": 0.5}'
    )
    await resumes(data_dir, "Ada scores 70")


async def test_a_slots_options_reach_every_call_and_survive_a_resume(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    options = ModelOptions(seed=7, stop=("END",), extra={"service_tier": "flex"})
    config = Config(worker_options=options)
    config.tools.crash_at = "score"
    async with config.runtime(data_dir) as rt:
        with pytest.raises(Crash):
            await rt.run(worker_workflow(), ADA, run_id=RUN)
    # Started with the options, resumed with the same: no drift, and every call had them.
    again = Config(worker_options=options)
    async with again.runtime(data_dir) as rt:
        result = await rt.resume(RUN)
    assert result.output == "Ada scores 70"
    requests = config.requests + again.requests
    assert len(requests) == 3
    assert {(r.seed, r.stop, r.extra.get("service_tier")) for r in requests} == {
        (7, ("END",), "flex")
    }


async def test_a_removed_worker_slot_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())

    error = await refused(data_dir, Config(drop_slot="worker"))
    assert error.message == drift_message(
        "worker", '- workerModelSlotId: "worker-model" → "(missing)"'
    )
    assert error.changes == [("workerModelSlotId", WORKER_MODEL, "(missing)")]
    await resumes(data_dir, "Ada scores 70")


async def test_a_changed_tool_schema_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())
    old = Tools().lookup.schema_hash
    changed = tool(lookup_v2, name="lookup")
    assert changed.schema_hash != old

    error = await refused(data_dir, Config(lookup=changed))
    assert error.message == drift_message(
        "worker",
        f'- tools[0].schemaHash: "{old}" → "{changed.schema_hash}"',
        "  (lookup tool schema changed)",
    )
    assert error.changes == [("tools[0].schemaHash", old, changed.schema_hash)]
    await resumes(data_dir, "Ada scores 70")


async def test_a_tool_missing_from_the_runtime_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())
    old = Tools().lookup.schema_hash

    error = await refused(data_dir, Config(tools=("score", "check")))
    assert error.message == drift_message(
        "worker",
        f'- tools[0].schemaHash: "{old}" → "(missing)"',
        "  (lookup tool schema changed)",
    )
    assert error.changes == [("tools[0].schemaHash", old, "(missing)")]
    await resumes(data_dir, "Ada scores 70")


async def test_run_with_the_id_of_a_started_run_checks_for_drift_too(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())
    changed = Config(worker="gpt-4o-mini")
    async with changed.runtime(data_dir) as rt:
        before = await event_counts(rt)
        with pytest.raises(CapabilityDriftError) as caught:
            await rt.run(worker_workflow(), ADA, run_id=RUN)
        assert await event_counts(rt) == before
    assert changed.calls == (0, 0)
    assert caught.value.message == drift_message(
        "worker", '- workerModelSlotId: "worker-model" → "gpt-4o-mini"'
    )


async def test_drift_after_a_real_kill_is_refused_by_the_command_line(tmp_path: Path) -> None:
    reference = Config()
    async with reference.runtime(tmp_path / "reference") as rt:
        await rt.run(SCORE_ONE, ADA, run_id=RUN)
        log = await rt.events.read(RUN)
    cut = next(
        record.seq
        for record in log
        if record.type == "harness.model.responded" and ev(record).call_id == "agent.turns[0].model"
    )

    data_dir, model_calls = tmp_path / "data", tmp_path / "model-calls"
    env = {"LW_TEST_MODEL_CALLS": str(model_calls), "LW_TEST_TOOL_CALLS": str(tmp_path / "t")}
    setup = ("--setup", "tests.runtime.agent_flows:setup")
    input_text = json.dumps(ADA)
    command = (*setup, "run", str(SCORE_ONE), "--input", input_text, "--run-id", RUN)
    crashed = cli(data_dir, *command, env=env, crash=cut)
    assert crashed.returncode == CRASH_EXIT_CODE, crashed.stderr
    assert model_calls.read_text().splitlines() == ["worker-model 0"]

    drifted = cli(
        data_dir, *setup, "resume", RUN, env={**env, "LW_TEST_WORKER_MODEL": "gpt-4o-mini"}
    )
    assert drifted.returncode == 3, drifted.stderr
    assert (
        drifted.stderr
        == "CapabilityDriftError: "
        + drift_message("worker", '- workerModelSlotId: "worker-model" → "gpt-4o-mini"')
        + "\n"
    )
    assert model_calls.read_text().splitlines() == ["worker-model 0"]

    resumed = cli(data_dir, *setup, "resume", RUN, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"verdict": "Ada scores 70"}
    assert model_calls.read_text().splitlines() == [
        "worker-model 0",
        "worker-model 1",
        "worker-model 2",
    ]


async def test_several_changes_are_listed_in_manifest_order(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())
    tools = Tools()

    error = await refused(data_dir, Config(worker="gpt-4o-mini", tools=("lookup", "check")))
    assert error.message == drift_message(
        "worker",
        '- workerModelSlotId: "worker-model" → "gpt-4o-mini"',
        f'- tools[1].schemaHash: "{tools.score.schema_hash}" → "(missing)"',
        "  (score tool schema changed)",
    )
    assert len(error.changes) == 2


async def test_an_unchanged_configuration_resumes_without_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, worker_workflow())
    restored = await resumes(data_dir, "Ada scores 70")
    assert restored.calls == (1, 1)


# --- an orchestrator session ----------------------------------------------------------


def shortlist(verdict: Any) -> str:
    text = verdict if isinstance(verdict, str) else json.dumps(verdict)
    return f"Shortlist ready: {text}"


async def test_a_changed_orchestrator_model_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, orchestrator_workflow())

    error = await refused(data_dir, Config(orchestrator="gpt-4o-mini"))
    assert error.message == drift_message(
        "orchestrator",
        '- orchestratorModelSlotId: "orchestrator-model" → "gpt-4o-mini"',
        fork_at="boss",
    )
    assert (error.run_id, error.scope) == (RUN, "orchestrator")
    restored = await resumes(data_dir, shortlist("Ada scores 70"))
    assert restored.calls == (2, 1)


def copy_flows(tmp_path: Path) -> Path:
    folder = tmp_path / "flows"
    folder.mkdir()
    for source in (ORCHESTRATE, SCORE_ONE):
        shutil.copy(source, folder / source.name)
    return folder


async def test_a_changed_available_workflow_is_drift(tmp_path: Path) -> None:
    data_dir, flows = tmp_path / "data", copy_flows(tmp_path)
    child = flows / "score_one.yaml"
    old = definition_hash(load_workflow(child))
    await crash_in_session(data_dir, flows / "orchestrate.yaml")

    original = child.read_text()
    child.write_text(original.replace("Scores one candidate", "Scores a candidate"))
    new = definition_hash(load_workflow(child))
    assert new != old

    error = await refused(data_dir, Config())
    assert error.message == drift_message(
        "orchestrator",
        f'- availableWorkflows[0].definitionHash: "{old}" → "{new}"',
        "  (score-one workflow definition changed)",
        fork_at="boss",
    )
    assert error.changes == [("availableWorkflows[0].definitionHash", old, new)]

    child.write_text(original)
    await resumes(data_dir, shortlist({"verdict": "Ada scores 70"}))


async def test_a_missing_workflow_file_is_drift(tmp_path: Path) -> None:
    data_dir, flows = tmp_path / "data", copy_flows(tmp_path)
    child = flows / "score_one.yaml"
    old = definition_hash(load_workflow(child))
    await crash_in_session(data_dir, flows / "orchestrate.yaml")

    original = child.read_text()
    child.unlink()
    error = await refused(data_dir, Config())
    assert error.message == drift_message(
        "orchestrator",
        f'- availableWorkflows[0].definitionHash: "{old}" → "(missing)"',
        "  (score-one workflow definition changed)",
        fork_at="boss",
    )

    child.write_text(original)
    await resumes(data_dir, shortlist({"verdict": "Ada scores 70"}))


async def test_a_workflow_no_longer_registered_is_drift(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    old = definition_hash(worker_workflow())
    await crash_in_session(data_dir, orchestrator_workflow())

    error = await refused(data_dir, Config(workflows=False))
    assert error.message == drift_message(
        "orchestrator",
        f'- availableWorkflows[0].definitionHash: "{old}" → "(missing)"',
        "  (score-one workflow definition changed)",
        fork_at="boss",
    )
    await resumes(data_dir, shortlist("Ada scores 70"))


async def test_drift_inside_an_unfinished_sub_run_is_caught_when_the_parent_resumes(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    await crash_in_session(data_dir, orchestrator_workflow())
    async with Config().runtime(data_dir) as rt:
        (child,) = await rt.events.list_runs(parent_run_id=RUN)

    # The orchestrator's own manifest is unchanged; its sub-run's worker is not.
    error = await refused(data_dir, Config(worker="gpt-4o-mini"))
    assert error.message == drift_message(
        "worker",
        '- workerModelSlotId: "worker-model" → "gpt-4o-mini"',
        run_id=child.run_id,
        fork_at="boss",
    )
    assert error.run_id == child.run_id
    assert error.fork_at == "boss"  # the parent's step whose sub-run holds the drift

    restored = await resumes(data_dir, shortlist("Ada scores 70"))
    assert restored.calls == (2, 1)  # the worker's turn 2 and score, the orchestrator's turn 1


def reads_back(request: ModelRequest) -> Any:
    """Asks for one lookup, then answers with what came back."""
    if any(message.role == "assistant" for message in request.messages):
        return f"got: {request.messages[-1].content}"
    return {"tool_calls": [{"id": "call_lookup", "name": "lookup", "arguments": {"name": "Ada"}}]}


@pytest.mark.parametrize("sub_run_id", ["../../etc", "run_ref"])
async def test_a_tool_argument_named_sub_run_id_is_not_a_sub_run(
    tmp_path: Path, sub_run_id: str
) -> None:
    # Only start_workflow starts sub-runs. Any other tool's arguments come from the
    # model, which may name any run, or no valid id at all; an in-flight call holding
    # such an argument must not make the resume check (or refuse for) another run.
    lookup = "agent.turns[0].tools[call_lookup]"
    config = Config()
    config.provider = scripted(reads_back)
    config.slots = slots(config.provider)
    async with config.runtime(tmp_path / "data") as rt:
        await rt.run(worker_workflow(), ADA, run_id="run_ref")
        log = await rt.events.read("run_ref")
        cut = next(r.seq for r in log if r.type == "harness.tool_call.started")
        events = [
            record.event.model_copy(update={"arguments": {"name": "Ada", "subRunId": sub_run_id}})
            if getattr(record.event, "call_id", None) == lookup
            else record.event
            for record in log[:cut]
        ]
        await rt.events.append(RUN, events, expected_seq=0)
        assert unfinished_sub_runs(await rt.get_state(RUN)) == []
        result = await rt.resume(RUN)

    assert result.status is RunStatus.COMPLETED
    assert isinstance(result.output, str)
    assert "subRunId" in result.output  # the tool refused the argument it does not take


async def test_a_session_that_completed_is_not_checked(tmp_path: Path) -> None:
    # A finished session will not call anything again: its manifest no longer matters.
    data_dir = tmp_path / "data"
    config = Config()
    async with config.runtime(data_dir) as rt:
        await rt.run(worker_workflow(), ADA, run_id=RUN)
    changed = Config(worker="gpt-4o-mini")
    async with changed.runtime(data_dir) as rt:
        result = await rt.resume(RUN)
    assert result.output == "Ada scores 70"
    assert changed.calls == (0, 0)


def test_slots_are_what_the_manifest_records() -> None:
    slot = ModelSlot(provider=scripted(script), model="m")
    assert slot.slot_id == "m"
