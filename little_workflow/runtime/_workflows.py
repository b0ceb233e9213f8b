"""Pinning a workflow and everything it calls, so a run is reproducible from its store.

When a run starts, its workflow and every sub-workflow it can reach (files named
relative to the referring file, or workflows registered by name) are resolved once and
stored, content-addressed, in the KV store under ``workflows/<definitionHash>``. A
record holds the canonical definition and ``refs``: each ``workflow:`` reference of the
document mapped to the definition hash it resolved to.

A resumed run loads this closure from the store and never looks at the files again:
editing ``child.yaml`` after a crash cannot change what a resumed run does (to run the
new version, start a new run). The run's ``workflowVersionId`` identifies the closure:
``wv_`` + 16 hex digits of the hash of the definition hash and the version ids of what
it refers to, so two runs with the same version id ran exactly the same workflows.

Records are written children first, so a reader never finds a parent whose child is
missing; they are immutable, so writing one twice is harmless.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import ConfigError, CorruptDataError, LwirError
from little_workflow.lwir import (
    MapStep,
    Step,
    SubWorkflowStep,
    Workflow,
    canonical_definition,
    definition_hash,
    load_workflow,
    parse_workflow,
)
from little_workflow.storage import StorageAdapter

__all__ = ["WorkflowCatalog", "WorkflowVersion"]

_RECORD_FORMAT = 1
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowVersion:
    """A workflow with its sub-workflows resolved: what one run executes."""

    workflow: Workflow
    definition_hash: str
    version_id: str
    #: ``workflow:`` reference text → the resolved sub-workflow.
    children: Mapping[str, WorkflowVersion] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The workflow's name."""
        return self.workflow.name

    def child(self, reference: str) -> WorkflowVersion:
        """The sub-workflow a ``workflow:`` step names."""
        try:
            return self.children[reference]
        except KeyError:
            raise ConfigError(
                f"workflow {self.name!r} has no resolved sub-workflow {reference!r}"
            ) from None


def _sub_workflow_steps(steps: tuple[Step, ...]) -> Iterator[SubWorkflowStep]:
    for step in steps:
        if isinstance(step, SubWorkflowStep):
            yield step
        elif isinstance(step, MapStep):
            yield from _sub_workflow_steps(step.body)


def _version_id(digest: str, children: Mapping[str, WorkflowVersion]) -> str:
    identity: dict[str, JsonValue] = {
        "definitionHash": digest,
        "refs": {ref: child.version_id for ref, child in sorted(children.items())},
    }
    return "wv_" + sha256_digest(identity).removeprefix("sha256:")[:16]


class WorkflowCatalog:
    """Resolves, stores and loads pinned workflow versions."""

    def __init__(self, kv: StorageAdapter, registered: Mapping[str, Workflow]) -> None:
        self._kv = kv
        self._registered = dict(registered)
        self._loaded: dict[str, WorkflowVersion] = {}

    # --- pinning a new run's workflow -------------------------------------------------

    async def pin(self, workflow: Workflow, *, source: Path | None = None) -> WorkflowVersion:
        """Resolve ``workflow``'s sub-workflows (``source``: the file it came from), store all."""
        version = self._resolve(workflow, source, stack=())
        await self._store(version)
        return version

    def _resolve(
        self, workflow: Workflow, source: Path | None, *, stack: tuple[str, ...]
    ) -> WorkflowVersion:
        label = str(source) if source is not None else f"workflow {workflow.name!r}"
        if label in stack:
            chain = " -> ".join((*stack, label))
            raise ConfigError(f"workflows refer to each other in a cycle: {chain}")
        if len(stack) >= _MAX_DEPTH:
            raise ConfigError(f"sub-workflows nest deeper than {_MAX_DEPTH}: {label}")
        children: dict[str, WorkflowVersion] = {}
        for step in _sub_workflow_steps(workflow.steps):
            if step.workflow in children:
                continue
            if step.is_file:
                if source is None:
                    raise ConfigError(
                        f"workflow {workflow.name!r} step {step.id!r} names the file "
                        f"{step.workflow!r}, but the workflow was not loaded from a file; "
                        "register the sub-workflow by name instead"
                    )
                path = (source.parent / step.workflow).resolve()
                try:
                    child = load_workflow(path)
                except LwirError as exc:
                    raise ConfigError(
                        f"sub-workflow {step.workflow!r} of {label}: {exc}", code=exc.code
                    ) from exc
                children[step.workflow] = self._resolve(child, path, stack=(*stack, label))
            else:
                registered = self._registered.get(step.workflow)
                if registered is None:
                    known = ", ".join(sorted(self._registered)) or "none"
                    raise ConfigError(
                        f"{label} step {step.id!r} names workflow {step.workflow!r}, which is "
                        f"not registered (registered: {known})"
                    )
                children[step.workflow] = self._resolve(registered, None, stack=(*stack, label))
        digest = definition_hash(workflow)
        return WorkflowVersion(
            workflow=workflow,
            definition_hash=digest,
            version_id=_version_id(digest, children),
            children=children,
        )

    async def _store(self, version: WorkflowVersion) -> None:
        for child in version.children.values():
            await self._store(child)
        key = f"workflows/{version.definition_hash}"
        record: dict[str, JsonValue] = {
            "format": _RECORD_FORMAT,
            "definition": canonical_definition(version.workflow),
            "refs": {ref: child.definition_hash for ref, child in version.children.items()},
        }
        existing = await self._kv.get(key)
        if existing != record:
            await self._kv.set(key, record)
        self._loaded[version.definition_hash] = version

    # --- loading a recorded run's workflow --------------------------------------------

    async def load(self, digest: str, *, depth: int = 0) -> WorkflowVersion:
        """The pinned version whose definition hash is ``digest``, from the store."""
        cached = self._loaded.get(digest)
        if cached is not None:
            return cached
        if depth > _MAX_DEPTH:
            raise CorruptDataError(f"stored workflow {digest}: sub-workflows nest too deep")
        key = f"workflows/{digest}"
        record = await self._kv.get(key)
        if record is None:
            raise CorruptDataError(
                f"the store has no workflow definition {digest} (key {key!r}); the run cannot "
                "be resumed without it"
            )
        if not isinstance(record, dict) or record.get("format") != _RECORD_FORMAT:
            raise CorruptDataError(f"stored workflow {key!r} is not a version-1 record")
        definition, refs = record.get("definition"), record.get("refs")
        if not isinstance(definition, dict) or not isinstance(refs, dict):
            raise CorruptDataError(f"stored workflow {key!r} lacks its definition or refs")
        try:
            workflow = parse_workflow(definition, source=key)
        except LwirError as exc:
            raise CorruptDataError(f"stored workflow {key!r} does not validate: {exc}") from exc
        if definition_hash(workflow) != digest:
            raise CorruptDataError(
                f"stored workflow {key!r} hashes to {definition_hash(workflow)}: it was altered"
            )
        children: dict[str, WorkflowVersion] = {}
        for reference, child_digest in refs.items():
            if not isinstance(child_digest, str):
                raise CorruptDataError(f"stored workflow {key!r}: bad ref {reference!r}")
            children[reference] = await self.load(child_digest, depth=depth + 1)
        version = WorkflowVersion(
            workflow=workflow,
            definition_hash=digest,
            version_id=_version_id(digest, children),
            children=children,
        )
        self._loaded[digest] = version
        return version
