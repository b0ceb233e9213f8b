"""The identity of a workflow definition: ``definitionHash`` and ``workflowVersionId``.

``definitionHash`` is ``sha256:`` + the SHA-256 of the canonical JSON (sorted keys, no
spaces, UTF-8) of the *canonical definition*: the model dumped with camelCase names and
without fields equal to their defaults, plus ``lwir`` and each step's ``kind`` (always
kept), and without a ``next`` that names the step that follows anyway.

Why defaults are left out: equivalent spellings must hash equally (``maxVisits: 1``
written or not, JSON or YAML, any key order), and a later version of this library that
adds an optional field must not change the hash of every existing workflow, which would
fail every resume with a drift error. The price is that changing a default's value is a
format change: it needs a new ``lwir`` version, never a silent edit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from little_workflow._object_cache import ObjectCache
from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.lwir._models import StepBase, Workflow

__all__ = [
    "HashedDefinition",
    "canonical_definition",
    "definition_hash",
    "hash_definition",
    "workflow_version_id",
]


def canonical_definition(workflow: Workflow) -> dict[str, JsonValue]:
    """The normalized JSON form of ``workflow`` that its hash is computed from.

    It parses back to an equivalent workflow (same hash); it is also the form to show
    in a drift diff, since it holds no noise from defaults.
    """
    dumped = workflow.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    dumped["lwir"] = workflow.lwir
    _normalize(workflow.steps, dumped["steps"])
    return cast(dict[str, JsonValue], dumped)


def definition_hash(workflow: Workflow) -> str:
    """``sha256:<hex>`` of the canonical definition (see the module docstring)."""
    return sha256_digest(canonical_definition(workflow))


@dataclass(frozen=True, slots=True)
class HashedDefinition:
    """A workflow's canonical definition, its hash and its steps' hashes, from one dump."""

    definition: dict[str, JsonValue]
    #: ``definition_hash(workflow)``.
    digest: str
    #: Each step's own hash, in document order with a nested scope right after the step
    #: holding it: the SHA-256 of the step dumped as in the definition (camelCase, no
    #: defaults) plus its ``kind``, before the definition's normalization.
    step_hashes: tuple[str, ...]


def hash_definition(workflow: Workflow) -> HashedDefinition:
    """What pinning a workflow needs, computed once per ``Workflow`` object while it lives.

    The result is shared by every run of that object: its ``definition`` must not be
    changed (it is stored and compared, never edited).
    """
    return _HASHED(workflow)


def _hash_definition(workflow: Workflow) -> HashedDefinition:
    """What pinning a workflow needs, from one ``model_dump`` rather than one per step.

    A step's sub-dump within the workflow's dump is the step's own dump (pydantic drops
    defaults at every level alike), so each step hash equals hashing
    ``step.model_dump(...)`` on its own, at a fraction of the cost for a long workflow.
    """
    dumped = workflow.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    step_hashes: list[str] = []
    # Before _normalize, which edits these dicts in place.
    _hash_steps(workflow.steps, dumped["steps"], step_hashes)
    dumped["lwir"] = workflow.lwir
    _normalize(workflow.steps, dumped["steps"])
    definition = cast(dict[str, JsonValue], dumped)
    return HashedDefinition(
        definition=definition, digest=sha256_digest(definition), step_hashes=tuple(step_hashes)
    )


_HASHED: ObjectCache[Workflow, HashedDefinition] = ObjectCache(_hash_definition)


def _hash_steps(
    steps: Sequence[StepBase], dumped: list[dict[str, JsonValue]], out: list[str]
) -> None:
    for step, own in zip(steps, dumped, strict=True):
        out.append(sha256_digest({**own, "kind": step.kind}, trusted=True))
        body = step.body_steps()
        if body:
            nested = own["body"]
            assert isinstance(nested, list)
            _hash_steps(body, cast(list[dict[str, JsonValue]], nested), out)


def workflow_version_id(workflow: Workflow) -> str:
    """``wv_`` + the first 16 hex digits of the definition hash."""
    return "wv_" + definition_hash(workflow).removeprefix("sha256:")[:16]


def _normalize(steps: Sequence[StepBase], dumped: list[dict[str, object]]) -> None:
    for index, (step, out) in enumerate(zip(steps, dumped, strict=True)):
        out["kind"] = step.kind
        following = steps[index + 1].id if index + 1 < len(steps) else None
        if "next" in out and step.falls_through and out["next"] == following:
            # An explicit next naming the following step is the default spelled out.
            del out["next"]
        body = step.body_steps()
        if body:
            body_dumped = out["body"]
            assert isinstance(body_dumped, list)
            _normalize(body, body_dumped)
