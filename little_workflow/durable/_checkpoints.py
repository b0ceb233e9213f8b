"""``CheckpointStore``: one snapshot per execution, overwritten, validated on load.

A snapshot records what a restored context needs: the item log, each layer's state, the
working directory, the pending ask-user prompts, and the frontier (the steps in flight
when it was taken, never which finished: the step ledger knows that). Schema version 2
only; anything else (a version-1 snapshot with the old layer ids included) is refused
with ``ConfigError`` code ``CHECKPOINT_SCHEMA_MISMATCH``: there is no migration, and
silently restoring a snapshot with missing layer state would be worse than starting over.
"""

from __future__ import annotations

from typing import Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

from little_workflow.errors import ConfigError, CorruptDataError
from little_workflow.ids import validate_id
from little_workflow.storage import StorageAdapter

__all__ = [
    "CHECKPOINT_SCHEMA_VERSION",
    "AskUserRecord",
    "CheckpointSnapshot",
    "CheckpointStore",
    "CwdRecord",
    "FrontierEntry",
    "create_checkpoint_store",
    "snapshot_key",
]

CHECKPOINT_SCHEMA_VERSION = 2
#: Layer ids of schema version 1 (renamed since): a snapshot carrying them is refused.
V1_LAYER_IDS = frozenset({"working-context", "static-content", "history-window"})


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        defer_build=True,  # built on first use, not at import: see ``little_workflow.events``
    )


class FrontierEntry(_Model):
    """A step in flight when the snapshot was taken."""

    step_id: str
    input: JsonValue = None
    state: JsonValue = None


class CwdRecord(_Model):
    """The working directory and the one before it."""

    current: str | None = None
    previous: str | None = None


class AskUserRecord(_Model):
    """A question to the person, not answered yet."""

    id: str
    input: JsonValue = None
    created_at: float


class ItemLogRecord(_Model):
    """The item log: ``{"items": [...]}``."""

    items: list[JsonValue] = Field(default_factory=list)


class CheckpointSnapshot(_Model):
    """Schema version 2 of a checkpoint, the seed's fields by name."""

    schema_version: Literal[2] = 2
    execution_id: str
    thread_id: str | None = None
    resource_id: str | None = None
    frontier: list[FrontierEntry] = Field(default_factory=list)
    #: layer id → the layer's serialized state.
    layers: dict[str, JsonValue] = Field(default_factory=dict)
    cwd: CwdRecord | None = None
    ask_user: list[AskUserRecord] = Field(default_factory=list)
    item_log: ItemLogRecord = Field(default_factory=ItemLogRecord)
    #: ISO-8601.
    captured_at: str


def snapshot_key(execution_id: str) -> str:
    """The storage key of an execution's snapshot."""
    return f"execution:{validate_id(execution_id, what='execution id')}:snapshot"


class CheckpointStore:
    """Saves and loads per-execution snapshots in a ``StorageAdapter``."""

    def __init__(self, storage: StorageAdapter) -> None:
        self.storage = storage

    async def save(self, snapshot: CheckpointSnapshot) -> None:
        """Store ``snapshot``, replacing the execution's previous one."""
        value: Any = snapshot.model_dump(mode="json", by_alias=True)
        await self.storage.set(snapshot_key(snapshot.execution_id), value)

    async def load(self, execution_id: str) -> CheckpointSnapshot | None:
        """The execution's snapshot, ``None`` if none; refuses an unknown schema version."""
        key = snapshot_key(execution_id)
        value = await self.storage.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise CorruptDataError(f"checkpoint {key!r} is not an object")
        version = value.get("schemaVersion")
        layers = value.get("layers")
        if version != CHECKPOINT_SCHEMA_VERSION or (
            isinstance(layers, dict) and V1_LAYER_IDS & set(layers)
        ):
            raise ConfigError(
                f"checkpoint of execution {execution_id!r} has schema version {version!r}"
                + (
                    " (version-1 layer ids)"
                    if isinstance(layers, dict) and V1_LAYER_IDS & set(layers)
                    else ""
                )
                + f"; this program reads version {CHECKPOINT_SCHEMA_VERSION} only and does not "
                "migrate. Discard it with clear_checkpoint() and start fresh.",
                code="CHECKPOINT_SCHEMA_MISMATCH",
            )
        try:
            return CheckpointSnapshot.model_validate(value)
        except pydantic.ValidationError as exc:
            raise CorruptDataError(
                f"checkpoint {key!r} does not validate: {exc.error_count()} error(s), first: "
                f"{exc.errors(include_url=False)[0]['msg']}"
            ) from exc

    async def clear(self, execution_id: str) -> None:
        """Remove the execution's snapshot (not its ledger: see ``clear_checkpoint``)."""
        await self.storage.delete(snapshot_key(execution_id))


def create_checkpoint_store(*, storage: StorageAdapter) -> CheckpointStore:
    """A ``CheckpointStore`` over ``storage``."""
    return CheckpointStore(storage)
