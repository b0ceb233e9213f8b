from __future__ import annotations

import re
from pathlib import Path

import pydantic
import pytest

from little_workflow import events
from little_workflow.errors import CorruptDataError, UnknownEventTypeError
from little_workflow.events import (
    EVENT_TYPES,
    RunStarted,
    RunStatus,
    StepCompleted,
    decode_event,
    encode_event,
)

SEED = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "000_c694f38e8bba8e77.txt"

# Every event type the seed names, exactly as written there.
SEED_TYPES = {
    "StepCompleted",
    "StepAttemptStarted",
    "OuterLoopCycleCompleted",
    "harness.session.started",
    "harness.session.completed",
    "harness.model.called",
    "harness.model.responded",
    "harness.tool_call.started",
    "harness.tool_call.succeeded",
    "harness.tool_call.failed",
    "harness.execute_step.succeeded",
}


def test_every_seed_event_type_has_one_model() -> None:
    assert set(EVENT_TYPES) >= SEED_TYPES
    assert len({id(model) for model in EVENT_TYPES.values()}) == len(EVENT_TYPES)
    for type_name, model in EVENT_TYPES.items():
        assert type_name == model.TYPE


@pytest.mark.skipif(not SEED.exists(), reason="the seed document is not beside this checkout")
def test_the_seed_names_no_event_we_lack() -> None:
    text = SEED.read_text()
    named = set(re.findall(r"\bharness\.[a-z_]+\.[a-z_]+\b", text))
    named |= set(re.findall(r"\b(?:Step|Run|OuterLoop)[A-Z][A-Za-z]+\b", text))
    named -= {"RunFailedError"}
    assert named <= set(EVENT_TYPES), named - set(EVENT_TYPES)


def test_fields_are_stored_in_camel_case() -> None:
    event = StepCompleted(step_path="m[k].w.visit[0]", step_id="w", kind="execute", visit=0)
    assert encode_event(event).startswith('{"stepPath":"m[k].w.visit[0]","stepId":"w"')
    assert decode_event("StepCompleted", encode_event(event), where="x") == event


def test_unknown_type_is_a_typed_error_naming_the_place() -> None:
    with pytest.raises(UnknownEventTypeError, match=r"run 'run_1' seq 7.*'Teleported'") as info:
        decode_event("Teleported", "{}", where="run 'run_1' seq 7")
    assert info.value.code == "unknown_event_type"


@pytest.mark.parametrize(
    "data",
    [
        '{"stepPath": 1, "stepId": "a", "kind": "execute"}',
        '{"stepPath": "a", "stepId": "a", "kind": "execute", "surprise": 1}',
        '{"stepPath": "a"',
        "[]",
    ],
)
def test_bad_data_is_corrupt_data(data: str) -> None:
    with pytest.raises(CorruptDataError, match="run 'r' seq 2: stored StepCompleted"):
        decode_event("StepCompleted", data, where="run 'r' seq 2")


def test_events_are_frozen_and_refuse_nan() -> None:
    event = StepCompleted(step_path="a", step_id="a", kind="execute")
    with pytest.raises(pydantic.ValidationError):
        event.step_path = "b"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        StepCompleted(step_path="a", step_id="a", kind="execute", output=float("nan"))


def test_lifecycle_events_drive_the_run_index() -> None:
    started = RunStarted(
        workflow_name="w", definition_hash="sha256:x", workflow_version_id="wv", parent_run_id="p"
    )
    update = started.run_index_update()
    assert update is not None
    assert (update.status, update.workflow, update.parent_run_id) == (RunStatus.RUNNING, "w", "p")
    assert events.RunCompleted().run_index_update().status is RunStatus.COMPLETED  # type: ignore[union-attr]
    assert StepCompleted(step_path="a", step_id="a", kind="x").run_index_update() is None


def test_forked_from_is_optional_and_omitted_when_unset() -> None:
    # A RunStarted stored before forks existed still loads, and one that is not a fork
    # is stored without the field, so an older reader still loads it too.
    old = '{"workflowName":"w","definitionHash":"sha256:x","workflowVersionId":"wv_1"}'
    started = decode_event("RunStarted", old, where="x")
    assert isinstance(started, RunStarted)
    assert started.forked_from is None
    assert "forkedFrom" not in encode_event(started)
    forked = RunStarted(
        workflow_name="w",
        definition_hash="sha256:x",
        workflow_version_id="wv_1",
        forked_from=events.ForkOrigin(run_id="run_a", at="m[k].w.visit[1]"),
    )
    stored = encode_event(forked)
    assert '"forkedFrom":{"runId":"run_a","at":"m[k].w.visit[1]"}' in stored
    assert decode_event("RunStarted", stored, where="x") == forked
