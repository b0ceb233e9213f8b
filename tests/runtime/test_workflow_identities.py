"""Step identities stored with the pinned workflow version.

A resumed process takes its steps' identities from the record instead of hashing every
step again; recorded logs compare against them, so they must be exactly the values the
steps hash to, and a record pinned before they were stored must still load.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import sha256_digest
from little_workflow.errors import CorruptDataError, LwirError
from little_workflow.lwir import (
    ExecuteStep,
    MapStep,
    OutputStep,
    StepBase,
    Workflow,
    canonical_definition,
    definition_hash,
    load_workflow,
)
from little_workflow.lwir._hash import hash_definition
from little_workflow.runtime._workflows import WorkflowCatalog, WorkflowVersion
from little_workflow.storage import MemoryStorage


def _workflow() -> Workflow:
    return Workflow(
        name="ids",
        steps=[
            ExecuteStep(id="a", fn="m:f", with_={"x": 1}),
            MapStep(
                id="m",
                items=[1, 2],
                body=[
                    ExecuteStep(id="b", fn="m:g", with_={"item": "${item}"}),
                    OutputStep(id="o", value="${steps.b.output}"),
                ],
            ),
            OutputStep(id="out", value="${steps.a.output}"),
        ],
    )


def _hashed(step: StepBase) -> str:
    # The identity as recorded logs hold it, written out independently of the code under
    # test: the step's JSON dump without defaults, with its kind, hashed.
    dumped = step.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    dumped["kind"] = step.kind
    return sha256_digest(dumped)


def _steps(workflow: Workflow) -> list[StepBase]:
    top = list(workflow.steps)
    body = list(top[1].body_steps())
    return [top[0], top[1], *body, top[2]]


async def _pinned() -> tuple[MemoryStorage, WorkflowVersion, dict[str, Any]]:
    kv = MemoryStorage()
    version = await WorkflowCatalog(kv, {}).pin(_workflow())
    record = await kv.get(f"workflows/{version.version_id}")
    assert isinstance(record, dict)
    return kv, version, record


async def test_the_record_stores_every_steps_identity_as_hashed() -> None:
    _, version, record = await _pinned()
    expected = [_hashed(step) for step in _steps(_workflow())]
    assert record["identities"] == expected
    assert len(set(expected)) == len(expected)
    assert [version.identity(step) for step in _steps(version.workflow)] == expected


async def test_a_loaded_version_takes_the_stored_identities_without_hashing() -> None:
    kv, pinned, record = await _pinned()
    loaded = await WorkflowCatalog(kv, {}).load(pinned.version_id)
    steps = _steps(loaded.workflow)
    # Memoized at load, before any lookup: nothing is dumped or hashed for them.
    assert loaded._identities == {
        id(step): value for step, value in zip(steps, record["identities"], strict=True)
    }
    assert [loaded.identity(step) for step in steps] == [_hashed(step) for step in steps]


async def test_a_record_pinned_before_identities_were_stored_still_loads() -> None:
    kv, pinned, record = await _pinned()
    del record["identities"]
    await kv.set(f"workflows/{pinned.version_id}", record)
    loaded = await WorkflowCatalog(kv, {}).load(pinned.version_id)
    assert loaded._identities == {}
    steps = _steps(loaded.workflow)
    assert [loaded.identity(step) for step in steps] == [_hashed(step) for step in steps]
    # Pinning it again (a new run of the same version) completes the record.
    await WorkflowCatalog(kv, {}).pin(_workflow())
    again = await kv.get(f"workflows/{pinned.version_id}")
    assert isinstance(again, dict)
    assert again["identities"] == [_hashed(step) for step in steps]


@pytest.mark.parametrize(
    "identities", [[], ["sha256:00"] * 3, [1, 2, 3, 4, 5], "sha256:00", {"a": "sha256:00"}]
)
async def test_stored_identities_that_do_not_fit_the_definition_are_corrupt(
    identities: Any,
) -> None:
    kv, pinned, record = await _pinned()
    record["identities"] = identities
    await kv.set(f"workflows/{pinned.version_id}", record)
    with pytest.raises(CorruptDataError, match="step identities"):
        await WorkflowCatalog(kv, {}).load(pinned.version_id)


def _walk(steps: tuple[Any, ...]) -> list[StepBase]:
    found: list[StepBase] = []
    for step in steps:
        found.append(step)
        found.extend(_walk(step.body_steps()))
    return found


def _workflow_files() -> list[Path]:
    root = Path(__file__).resolve().parents[2]
    files = [
        path
        for folder in ("examples", "tests")
        for suffix in ("*.yaml", "*.yml", "*.json")
        for path in (root / folder).rglob(suffix)
        if "hostile" not in path.parts  # inputs built to be refused, some of them slowly
    ]
    loaded = []
    for path in sorted(files):
        try:
            load_workflow(path)
        except LwirError:
            continue  # not a workflow, or one that is invalid on purpose
        loaded.append(path)
    return loaded


@pytest.mark.parametrize(
    "path", _workflow_files(), ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_one_dump_gives_the_hashes_of_the_whole_and_of_each_step(path: Path) -> None:
    workflow = load_workflow(path)
    hashed = hash_definition(workflow)
    assert hashed.digest == definition_hash(workflow)
    assert hashed.definition == canonical_definition(workflow)
    assert list(hashed.step_hashes) == [_hashed(step) for step in _walk(workflow.steps)]


def test_the_examples_are_among_the_files_compared() -> None:
    names = {path.name for path in _workflow_files()}
    assert {"workflow.yaml", "brief.yaml", "research.yaml"} <= names
