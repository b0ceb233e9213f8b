"""``ObjectCache``: once per live object, by identity, dropped with the object."""

from __future__ import annotations

import gc

import pytest

from little_workflow._object_cache import ObjectCache
from little_workflow.lwir import ExecuteStep, OutputStep, Workflow
from little_workflow.lwir._hash import hash_definition
from little_workflow.lwir._input import input_reads


class Thing:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Thing) and other.name == self.name

    __hash__ = object.__hash__


def test_computed_once_per_object_by_identity_not_equality() -> None:
    calls: list[str] = []

    def compute(thing: Thing) -> str:
        calls.append(thing.name)
        return thing.name.upper()

    cache: ObjectCache[Thing, str] = ObjectCache(compute)
    first, twin = Thing("a"), Thing("a")
    assert cache(first) == "A"
    assert cache(first) == "A"
    assert cache(twin) == "A"
    assert calls == ["a", "a"]  # equal is not the same object: computed again
    assert len(cache) == 2


def test_an_entry_goes_with_its_object() -> None:
    cache: ObjectCache[Thing, str] = ObjectCache(lambda thing: thing.name)
    thing = Thing("gone")
    cache(thing)
    assert len(cache) == 1
    del thing
    gc.collect()
    assert len(cache) == 0


def test_a_computation_that_raises_caches_nothing() -> None:
    outcomes = iter([ValueError("first"), "second"])

    def compute(_: Thing) -> str:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    cache: ObjectCache[Thing, str] = ObjectCache(compute)
    thing = Thing("x")
    with pytest.raises(ValueError, match="first"):
        cache(thing)
    assert len(cache) == 0
    assert cache(thing) == "second"


def _workflow() -> Workflow:
    return Workflow(
        name="cached",
        steps=(
            ExecuteStep(id="a", fn="m:f", with_={"q": "${input.q}"}),
            OutputStep(id="out", value="${steps.a.output}"),
        ),
    )


def test_a_workflow_is_hashed_and_analysed_once_per_object() -> None:
    workflow = _workflow()
    assert hash_definition(workflow) is hash_definition(workflow)
    assert input_reads(workflow) is input_reads(workflow)
    # Another object with the same definition: the same answers, computed afresh.
    other = _workflow()
    assert hash_definition(other) is not hash_definition(workflow)
    assert hash_definition(other) == hash_definition(workflow)
    assert [str(ref) for _, ref in input_reads(other)] == ["${input.q}"]
