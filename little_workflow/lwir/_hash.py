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
from typing import cast

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.lwir._models import StepBase, Workflow

__all__ = ["canonical_definition", "definition_hash", "workflow_version_id"]


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
