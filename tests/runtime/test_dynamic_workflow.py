"""``workflow`` steps with ``definition``: a sub-run of a document the run computed.

The document (here the output of an ``echo`` step, as it would be a planner's) is
validated, resolved and pinned when the step starts; a document that is not a valid
workflow, or that names what the runtime lacks, fails the step before a sub-run exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import LwirValidationError, RunFailedError
from little_workflow.events import RunStatus
from little_workflow.lwir import (
    ExecuteStep,
    OutputStep,
    SubWorkflowStep,
    Workflow,
    canonical_definition,
    definition_hash,
    parse_workflow,
)
from little_workflow.runtime import Runtime
from tests.runtime.role_support import VALID_PLAN, make
from tests.runtime.support import Crash, ev, of_type, summary

DYNAMIC = Workflow(
    name="dynamic",
    steps=(
        ExecuteStep(id="x", fn="roles:echo", with_={"value": "${input.doc}"}),
        SubWorkflowStep(
            id="run", definition="${steps.x.output}", with_={"years": "${input.years}"}
        ),
        OutputStep(id="out", value="${steps.run.output}"),
    ),
)


def tool_step(tool: str) -> dict[str, Any]:
    return {
        "lwir": 1,
        "name": "planned",
        "steps": [
            {"id": "s", "kind": "tool", "tool": tool, "with": {"years": "${input.years}"}},
            {"id": "out", "kind": "output", "value": "${steps.s.output}"},
        ],
    }


async def failure(rt: Runtime, document: Any) -> tuple[RunFailedError, list[Any]]:
    """Run ``DYNAMIC`` on ``document``: its error and log; no sub-run was started."""
    with pytest.raises(RunFailedError) as caught:
        await rt.run(DYNAMIC, {"doc": document, "years": 4}, run_id="run_d")
    assert await rt.events.list_runs(parent_run_id="run_d") == []
    log = await rt.events.read("run_d")
    # Before any attempt of the step, like a template error: the run fails at its path.
    assert summary(log) == [
        ("RunStarted", None),
        ("StepAttemptStarted", "x"),
        ("StepCompleted", "x"),
        ("RunFailed", "run"),
    ]
    assert ev(log[-1]).cause_code == caught.value.cause_code
    return caught.value, log


async def test_a_definition_is_validated_and_pinned_when_the_step_starts(tmp_path: Path) -> None:
    rt, _, tools, calls = make(tmp_path / "data")
    async with rt:
        result = await rt.run(DYNAMIC, {"doc": VALID_PLAN, "years": 4}, run_id="run_d")
        log = await rt.events.read("run_d")
        (child,) = await rt.events.list_runs(parent_run_id="run_d")
        child_log = await rt.events.read(child.run_id)

    assert result.status is RunStatus.COMPLETED
    assert result.output == 40
    assert tools.calls == [("score", 4)]
    assert calls.arguments() == [{"value": VALID_PLAN}]
    planned = parse_workflow(VALID_PLAN)
    (sub_started,) = of_type(log, "SubRunStarted")
    assert (sub_started.step_path, sub_started.sub_run_id) == ("run", child.run_id)
    assert sub_started.workflow_name == "planned"
    assert sub_started.definition_hash == definition_hash(planned)
    started = ev(child_log[0])
    assert (started.definition_hash, started.input) == (definition_hash(planned), {"years": 4})

    # Pinned: the version the sub-run started with is in the store, for any process.
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        record = await rt.kv.get(f"workflows/{started.workflow_version_id}")
        pinned = await rt.catalog.load(started.workflow_version_id)
    assert isinstance(record, dict)
    assert record["definition"] == canonical_definition(planned)
    assert pinned.workflow == planned


async def test_a_definition_may_name_registered_workflows(tmp_path: Path) -> None:
    document = {
        "lwir": 1,
        "name": "outer",
        "steps": [
            {"id": "w", "kind": "workflow", "workflow": "planned", "with": {"years": 2}},
            {"id": "out", "kind": "output", "value": "${steps.w.output}"},
        ],
    }
    rt, _, tools, _ = make(tmp_path / "data", workflows=(parse_workflow(VALID_PLAN),))
    async with rt:
        result = await rt.run(DYNAMIC, {"doc": document, "years": 4}, run_id="run_d")
    assert result.output == 20
    assert tools.calls == [("score", 2)]


async def test_a_resumed_definition_step_runs_the_version_its_sub_run_pinned(
    tmp_path: Path,
) -> None:
    document = {
        "lwir": 1,
        "name": "outer",
        "steps": [
            {"id": "w", "kind": "workflow", "workflow": "planned", "with": {"years": 2}},
            {"id": "out", "kind": "output", "value": "${steps.w.output}"},
        ],
    }
    data_dir, planned = tmp_path / "data", parse_workflow(VALID_PLAN)
    rt, _, tools, _ = make(data_dir, workflows=(planned,))
    tools.crash_at = "score"  # inside the sub-run's sub-run
    async with rt:
        with pytest.raises(Crash):
            await rt.run(DYNAMIC, {"doc": document, "years": 4}, run_id="run_d")
        (child,) = await rt.events.list_runs(parent_run_id="run_d")

    # "planned" is registered anew with another definition: the sub-run, started with
    # the old one, resumes with it, as a ``workflow: planned`` step's would.
    edited = planned.model_copy(update={"description": "edited"})
    rt, _, tools, _ = make(data_dir, workflows=(edited,))
    async with rt:
        result = await rt.resume("run_d")
        children = await rt.events.list_runs(parent_run_id="run_d")
        (grandchild,) = await rt.events.list_runs(parent_run_id=child.run_id)
        grandchild_log = await rt.events.read(grandchild.run_id)

    assert result.output == 20
    assert tools.calls == [("score", 2)]
    assert [(c.run_id, c.status) for c in children] == [(child.run_id, RunStatus.COMPLETED)]
    assert ev(grandchild_log[0]).definition_hash == definition_hash(planned)


async def test_an_invalid_definition_fails_the_step_pointing_into_the_document(
    tmp_path: Path,
) -> None:
    document = {"lwir": 1, "name": "planned", "steps": [{"id": "s", "kind": "tool"}]}
    rt, _, tools, _ = make(tmp_path / "data")
    async with rt:
        error, _ = await failure(rt, document)
        state = await rt.get_state("run_d")
    assert error.cause_code == "invalid_workflow"
    assert state.failure_message == (
        "invalid LWIR workflow in the definition of step 'run' (1 problem):\n"
        "  steps[0].tool: required field is missing"
    )
    assert tools.calls == []


async def test_a_definition_that_is_not_a_document_fails_the_step(tmp_path: Path) -> None:
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        error, _ = await failure(rt, "a workflow, trust me")
        state = await rt.get_state("run_d")
    assert error.cause_code == "invalid_workflow"
    assert state.failure_message == (
        "step 'run': definition evaluated to str, not an LWIR document"
    )


async def test_a_definition_naming_an_unregistered_tool_is_a_config_error(
    tmp_path: Path,
) -> None:
    rt, _, tools, _ = make(tmp_path / "data")
    async with rt:
        error, _ = await failure(rt, tool_step("teleport"))
        state = await rt.get_state("run_d")
    assert error.cause_code == "runtime_config_error"
    assert state.failure_message == (
        "workflow 'planned' step 's' uses tool 'teleport', which is not registered "
        "(registered: lookup, score, check, div); register it with Runtime(tools=[...]), or on "
        "the command line with --setup module:attr naming a RuntimeSetup whose tools has it"
    )
    assert tools.calls == []


async def test_a_definition_naming_an_unregistered_workflow_is_a_config_error(
    tmp_path: Path,
) -> None:
    document = {
        "lwir": 1,
        "name": "outer",
        "steps": [
            {"id": "w", "kind": "workflow", "workflow": "nowhere"},
            {"id": "out", "kind": "output", "value": "${steps.w.output}"},
        ],
    }
    rt, _, _, _ = make(tmp_path / "data")
    async with rt:
        error, _ = await failure(rt, document)
    assert error.cause_code == "runtime_config_error"
    assert "names workflow 'nowhere', which is not registered" in error.message


@pytest.mark.parametrize(
    "step",
    [
        pytest.param({"id": "run", "kind": "workflow"}, id="neither"),
        pytest.param(
            {"id": "run", "kind": "workflow", "workflow": "planned", "definition": "${input.doc}"},
            id="both",
        ),
    ],
)
def test_a_workflow_step_needs_exactly_one_of_workflow_and_definition(
    step: dict[str, Any],
) -> None:
    document = {
        "lwir": 1,
        "name": "dynamic",
        "steps": [step, {"id": "out", "kind": "output", "value": "${steps.run.output}"}],
    }
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(document, source="dynamic.yaml")
    assert caught.value.message == (
        "invalid LWIR workflow in dynamic.yaml (1 problem):\n"
        "  steps[0]: give exactly one of workflow (a name or file) and definition"
    )
