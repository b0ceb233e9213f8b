"""Pinning a workflow and everything it calls, so a run is reproducible from its store.

When a run starts, its workflow and every sub-workflow it can reach (files named
relative to the referring file, or workflows registered by name) are resolved once and
stored in the KV store under ``workflows/<workflowVersionId>``. A record holds the
canonical definition and ``refs``: each ``workflow:`` reference of the document mapped
to the version id it resolved to.

Keyed by version id, not by definition hash: one definition may refer to different
sub-workflows at different times (``child.yaml`` edited between two runs), and a record
keyed by the definition alone would be overwritten by the later run, silently changing
what the earlier one resumes with.

A resumed run loads this closure from the store and never looks at the files again:
editing ``child.yaml`` after a crash cannot change what a resumed run does (to run the
new version, start a new run). The run's ``workflowVersionId`` identifies the closure:
``wv_`` + 16 hex digits of the hash of the definition hash and the version ids of what
it refers to, so two runs with the same version id ran exactly the same workflows.

Records are written children first, so a reader never finds a parent whose child is
missing; they are immutable, so writing one twice is harmless.

A record also holds ``identities``: every step's identity (``WorkflowVersion.identity``),
in the order ``walk_steps`` visits the steps, so a resumed process takes them from the record
instead of dumping and hashing every step again. They are derived data, never part of the
version id: a record without them (pinned before they were stored) loads as before and
its identities are computed on first use; one whose list does not fit its definition is
rejected as corrupt.

A version also says who wrote it (``trusted``). One resolved from a file or a
``Workflow`` a program gave is the developer's code; one computed at run time (the
document a ``definition:`` step evaluates to, such as a planner's answer) is data a model
may have written, and its ``fn`` reaches only registered functions (README, "Trust
model"). A computed version's record says ``"computed": true`` and its version id hashes
that too, so the flag is pinned with the definition: a resume on any machine, a worker's
or a fork's, loads the version with the trust it started with, and a record whose flag
was flipped no longer hashes to its id. A trusted version's id and record are what they
were before the flag existed. A computed version's sub-workflows are registered ones
(it has no file to be relative to), which are the developer's, so they stay trusted; a
``definition:`` inside a computed workflow is computed again, so it stays untrusted.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from pydantic import ValidationError

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import ConfigError, CorruptDataError, LwirError
from little_workflow.events import RunStarted
from little_workflow.lwir import (
    AgentStep,
    MapStep,
    Step,
    StepBase,
    SubWorkflowStep,
    Workflow,
    canonical_definition,
    definition_hash,
    load_workflow,
)
from little_workflow.lwir._hash import hash_definition
from little_workflow.lwir._models import TRUSTED_GRAPH
from little_workflow.storage import StorageAdapter

__all__ = ["WorkflowCatalog", "WorkflowVersion", "edited_version", "walk_steps"]

#: 2: keyed by version id, ``refs`` hold version ids (format 1 held definition hashes).
_RECORD_FORMAT = 2
_MAX_DEPTH = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowVersion:
    """A workflow with its sub-workflows resolved: what one run executes."""

    workflow: Workflow
    definition_hash: str
    version_id: str
    #: ``workflow:`` reference text → the resolved sub-workflow.
    children: Mapping[str, WorkflowVersion] = field(default_factory=dict)
    #: The file it was loaded from, when it was (to find its references again, on
    #: resume, for the capability manifest of an orchestrator).
    source: str | None = None
    #: Step identities computed so far, by ``id()`` of the step model (see ``identity``).
    _identities: dict[int, str] = field(default_factory=dict, compare=False, repr=False)
    #: ``False`` for a workflow computed at run time (a model may have written it): its
    #: functions must be registered ones (see the module docstring).
    trusted: bool = True
    #: The canonical definition, when resolving computed it already (what a record holds).
    _definition: dict[str, JsonValue] | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The workflow's name."""
        return self.workflow.name

    def identity(self, step: StepBase) -> str:
        """The identity of ``step``: the hash of its canonical definition (kind included).

        Memoized here, on the version, so each step is hashed once per process, not once
        per visit or per run.
        """
        identity = self._identities.get(id(step))
        if identity is None:
            dumped = step.model_dump(mode="json", by_alias=True, exclude_defaults=True)
            dumped["kind"] = step.kind
            identity = self._identities[id(step)] = sha256_digest(dumped, trusted=True)
        return identity

    def identities(self) -> list[str]:
        """Every step's identity, in ``walk_steps`` order (what a record stores)."""
        return [self.identity(step) for step in walk_steps(self.workflow.steps)]

    def run_started(
        self,
        input: JsonValue,
        *,
        parent_run_id: str | None = None,
        parent_step_path: str | None = None,
        outer_loop: tuple[str, int] | None = None,
    ) -> RunStarted:
        """The first event of a run of this version with ``input``."""
        return RunStarted(
            workflow_name=self.name,
            definition_hash=self.definition_hash,
            workflow_version_id=self.version_id,
            input=input,
            parent_run_id=parent_run_id,
            parent_step_path=parent_step_path,
            outer_loop_id=None if outer_loop is None else outer_loop[0],
            cycle_number=None if outer_loop is None else outer_loop[1],
        )

    def child(self, reference: str) -> WorkflowVersion:
        """The sub-workflow a ``workflow:`` step names."""
        try:
            return self.children[reference]
        except KeyError:
            raise ConfigError(
                f"workflow {self.name!r} has no resolved sub-workflow {reference!r}"
            ) from None


def edited_version(version: WorkflowVersion, workflow: Workflow) -> WorkflowVersion:
    """``workflow``, an edit of ``version``'s that names the same sub-workflows, pinned to them.

    The sub-workflows stay the ones ``version`` pinned, not the files as they are now: an
    edit of one step's prompt must not also pick up an edit of ``child.yaml``.
    """
    references = {reference for reference, _ in _workflow_references(workflow.steps)}
    if references != set(version.children):
        raise ConfigError(
            f"an edit of workflow {version.name!r} may not change the workflows it refers to"
        )
    digest = definition_hash(workflow)
    return WorkflowVersion(
        workflow=workflow,
        definition_hash=digest,
        version_id=_version_id(digest, version.children, trusted=version.trusted),
        children=version.children,
        source=version.source,
        trusted=version.trusted,
    )


def _workflow_references(steps: tuple[Step, ...]) -> Iterator[tuple[str, str]]:
    """``(reference, step id)`` of every workflow a step may run: ``workflow`` steps, and
    the workflows an orchestrator may start."""
    for step in steps:
        if isinstance(step, SubWorkflowStep):
            if step.workflow is not None:
                yield step.workflow, step.id
        elif isinstance(step, AgentStep):
            for reference in step.workflows:
                yield reference, step.id
        elif isinstance(step, MapStep):
            yield from _workflow_references(step.body)


def walk_steps(steps: tuple[Step, ...]) -> Iterator[Step]:
    """Every step, nested scopes (a map's body) right after the step that holds them."""
    for step in steps:
        yield step
        yield from walk_steps(step.body_steps())


def _is_file(reference: str) -> bool:
    return reference.endswith((".json", ".yaml", ".yml")) or "/" in reference


def _version_id(
    digest: str, children: Mapping[str, WorkflowVersion], *, trusted: bool = True
) -> str:
    identity: dict[str, JsonValue] = {
        "definitionHash": digest,
        "refs": {ref: child.version_id for ref, child in sorted(children.items())},
    }
    if not trusted:
        # Only when computed: a trusted version's id is what it was before trust existed.
        identity["computed"] = True
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
        return await self.store(self.resolve(workflow, source=source))

    def resolve(
        self, workflow: Workflow, *, source: Path | None = None, computed: bool = False
    ) -> WorkflowVersion:
        """Resolve ``workflow``'s sub-workflows without storing anything (see ``store``).

        ``computed``: the workflow was computed at run time (a model may have written it),
        so the version is untrusted; its sub-workflows are the registered ones it names.
        """
        version = self._resolve(workflow, source, stack=())
        if not computed:
            return version
        return replace(
            version,
            trusted=False,
            version_id=_version_id(version.definition_hash, version.children, trusted=False),
        )

    async def store(self, version: WorkflowVersion) -> WorkflowVersion:
        """Store a resolved version and its sub-workflows; return the one to run."""
        known = self._loaded.get(version.version_id)
        if known is not None:
            return known  # keeps its memoized step identities
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
        for reference, step_id in _workflow_references(workflow.steps):
            if reference in children:
                continue
            child, child_source = self.find(reference, source, where=f"{label} step {step_id!r}")
            children[reference] = self._resolve(child, child_source, stack=(*stack, label))
        # One dump for the definition hash, the record's definition and every step's
        # identity: for a long workflow, pinning was mostly dumping the same steps again.
        hashed = hash_definition(workflow)
        return WorkflowVersion(
            workflow=workflow,
            definition_hash=hashed.digest,
            version_id=_version_id(hashed.digest, children),
            children=children,
            source=None if source is None else str(source),
            _identities={
                id(step): identity
                for step, identity in zip(
                    walk_steps(workflow.steps), hashed.step_hashes, strict=True
                )
            },
            _definition=hashed.definition,
        )

    def find(
        self, reference: str, source: Path | None, *, where: str
    ) -> tuple[Workflow, Path | None]:
        """The workflow ``reference`` names now: a file next to ``source``, or a registered name.

        ``where`` names the referring step in errors.
        """
        if _is_file(reference):
            if source is None:
                raise ConfigError(
                    f"{where} names the file {reference!r}, but its workflow was not loaded "
                    "from a file; register the sub-workflow by name instead"
                )
            path = (source.parent / reference).resolve()
            try:
                return load_workflow(path), path
            except LwirError as exc:
                raise ConfigError(
                    f"{where}: sub-workflow {reference!r}: {exc}", code=exc.code
                ) from exc
        registered = self._registered.get(reference)
        if registered is None:
            known = ", ".join(sorted(self._registered)) or "none"
            raise ConfigError(
                f"{where} names workflow {reference!r}, which is not registered "
                f"(registered: {known}); register it with Runtime(workflows=[...]), or on the "
                "command line with --setup module:attr naming a RuntimeSetup whose workflows "
                "has it"
            )
        return registered, None

    async def _store(self, version: WorkflowVersion) -> None:
        for child in version.children.values():
            await self._store(child)
        key = f"workflows/{version.version_id}"
        record: dict[str, JsonValue] = {
            "format": _RECORD_FORMAT,
            "definition": (
                canonical_definition(version.workflow)
                if version._definition is None
                else version._definition
            ),
            "refs": {ref: child.version_id for ref, child in version.children.items()},
            "source": version.source,
            "identities": list[JsonValue](version.identities()),
        }
        if not version.trusted:
            record["computed"] = True
        existing = await self._kv.get(key)
        if existing != record:
            await self._kv.set(key, record)
        self._loaded[version.version_id] = version

    # --- loading a recorded run's workflow --------------------------------------------

    async def load(self, version_id: str, *, depth: int = 0) -> WorkflowVersion:
        """The pinned version ``version_id`` (a run's ``workflowVersionId``), from the store."""
        cached = self._loaded.get(version_id)
        if cached is not None:
            return cached
        if depth > _MAX_DEPTH:
            raise CorruptDataError(f"stored workflow {version_id}: sub-workflows nest too deep")
        key = f"workflows/{version_id}"
        record = await self._kv.get(key)
        if record is None:
            raise CorruptDataError(
                f"the store has no workflow version {version_id} (key {key!r}); the run "
                "cannot be resumed without it"
            )
        if not isinstance(record, dict) or record.get("format") != _RECORD_FORMAT:
            raise CorruptDataError(
                f"stored workflow {key!r} is not a version-{_RECORD_FORMAT} record"
            )
        definition, refs = record.get("definition"), record.get("refs")
        if not isinstance(definition, dict) or not isinstance(refs, dict):
            raise CorruptDataError(f"stored workflow {key!r} lacks its definition or refs")
        # The record holds the canonical definition, so its hash is the definition hash:
        # an altered record is caught before it is even parsed, and the graph, validated
        # when the run pinned it, need not be walked again.
        digest = sha256_digest(definition, trusted=True)
        try:
            workflow = Workflow.model_validate(definition, context={TRUSTED_GRAPH: True})
        except (ValidationError, LwirError) as exc:
            raise CorruptDataError(f"stored workflow {key!r} does not validate: {exc}") from exc
        children: dict[str, WorkflowVersion] = {}
        for reference, child_version in refs.items():
            if not isinstance(child_version, str):
                raise CorruptDataError(f"stored workflow {key!r}: bad ref {reference!r}")
            children[reference] = await self.load(child_version, depth=depth + 1)
        computed = record.get("computed", False)
        if not isinstance(computed, bool):
            raise CorruptDataError(f"stored workflow {key!r}: 'computed' is not a boolean")
        # The version id is a hash of the definition's hash, its children's ids and
        # whether it was computed, so an altered definition, ref or flag shows here.
        found = _version_id(digest, children, trusted=not computed)
        if found != version_id:
            raise CorruptDataError(f"stored workflow {key!r} hashes to {found}: it was altered")
        source = record.get("source")
        version = WorkflowVersion(
            workflow=workflow,
            definition_hash=digest,
            version_id=version_id,
            children=children,
            source=source if isinstance(source, str) else None,
            trusted=not computed,
            _identities=_stored_identities(key, workflow, record.get("identities")),
        )
        self._loaded[version_id] = version
        return version


def _stored_identities(key: str, workflow: Workflow, stored: JsonValue) -> dict[int, str]:
    """A record's step identities, keyed as ``WorkflowVersion.identity`` memoizes them."""
    if stored is None:
        return {}  # pinned before identities were stored: computed on first use
    steps = list(walk_steps(workflow.steps))
    identities = (
        [item for item in stored if isinstance(item, str)] if isinstance(stored, list) else []
    )
    if not isinstance(stored, list) or len(identities) != len(stored) or len(stored) != len(steps):
        raise CorruptDataError(f"stored workflow {key!r}: its step identities do not fit it")
    return {id(step): identity for step, identity in zip(steps, identities, strict=True)}
