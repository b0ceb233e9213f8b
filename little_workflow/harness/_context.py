"""``Context``: what an agent execution knows, and the item log its model calls read.

A context carries the execution id, thread and resource ids, the **item log** (the
conversation: user messages, the model's answers with their tool calls, tool results),
**layers** that turn the context into a model request (``instructions``, ``scratchpad``,
``history``), the working directory, the ask-user queue, the caller's ``state`` (never
persisted) and the ``parent`` context of a spawned agent. ``await ctx.checkpoint()``
persists a snapshot on demand.

The item log deduplicates model answers by response id: a turn re-issued after a crash
that yields the identical response is not recorded twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from little_workflow.codec import JsonValue
from little_workflow.durable._checkpoints import V1_LAYER_IDS
from little_workflow.errors import ConfigError
from little_workflow.harness.models import Message
from little_workflow.ids import new_id

if TYPE_CHECKING:
    from little_workflow.artifacts import StepArtifacts
    from little_workflow.memory import MemoryStore

__all__ = [
    "STANDARD_LAYERS",
    "AskUserPrompt",
    "Context",
    "ContextLayer",
    "HistoryLayer",
    "InstructionsLayer",
    "Item",
    "ItemLog",
    "ScratchpadLayer",
    "check_layer_ids",
    "default_layers",
    "run_append_pipeline",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One entry of the item log: a message, and the response that produced it (if any)."""

    message: Message
    response_id: str | None = None
    #: For a tool result: the path of the call it answers (unique in the execution).
    call_path: str | None = None

    def to_json(self) -> dict[str, JsonValue]:
        """The item as plain JSON (for snapshots and the UI)."""
        value: dict[str, JsonValue] = {
            "message": self.message.model_dump(mode="json", by_alias=True)
        }
        if self.response_id is not None:
            value["responseId"] = self.response_id
        if self.call_path is not None:
            value["callPath"] = self.call_path
        return value

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Item:
        """Rebuild an item from ``to_json``'s form."""
        return cls(
            message=Message.model_validate(value["message"]),
            response_id=value.get("responseId"),
            call_path=value.get("callPath"),
        )


class ItemLog:
    """The conversation, in order; model answers deduplicated by response id.

    A resumed execution replays its steps into a log restored with everything they
    appended the first time. While it does, the log has a **replay position**: the
    items the replay has reached (an item appended again moves it to where that item
    already is). ``messages`` and ``last_assistant()`` read up to it, so a step sees
    the conversation as it was when the step first ran, not the restored end of it. An
    item the log does not hold yet is appended at the end, and ends the replay. A step
    replayed whole from its record (a composite, whose children do not run) moves the
    position with ``reach`` to where the log stood when it first ended.
    """

    def __init__(self, items: Iterable[Item] = ()) -> None:
        self._items: list[Item] = []
        #: Dedupe key (response id, or the call path of a tool result) → position.
        self._keys: dict[str, int] = {}
        #: The replay position, or ``None`` when the replay (if any) reached the end.
        self._cursor: int | None = None
        for item in items:
            self.append(item)

    @staticmethod
    def _key(item: Item) -> str | None:
        if item.response_id is not None:
            return item.response_id
        if item.call_path is not None:
            return f"tool-result:{item.call_path}"
        return None

    def append(self, item: Item) -> bool:
        """Add ``item``; ``False`` (and nothing added) if it is already here.

        A model answer is known by its response id, a tool result by the path of the call
        it answers: a resumed execution that replays them does not append them twice.
        """
        key = self._key(item)
        if key is not None:
            position = self._keys.get(key)
            if position is not None:
                self.reach(position + 1)
                return False
            self._keys[key] = len(self._items)
        self._items.append(item)
        self._cursor = None
        return True

    def replay_from(self, position: int | None) -> None:
        """Start a replay at ``position`` (the items before it are its past); ``None`` ends it."""
        if position is None or position >= len(self._items):
            self._cursor = None
        else:
            self._cursor = max(0, position)

    def reach(self, position: int) -> None:
        """Move a replay forward to ``position`` (never back); no-op when not replaying."""
        if self._cursor is not None:
            self._cursor = max(self._cursor, position)
            if self._cursor >= len(self._items):
                self._cursor = None

    @property
    def position(self) -> int:
        """The replay position: the number of items the conversation so far holds."""
        return len(self._items) if self._cursor is None else self._cursor

    @property
    def items(self) -> Sequence[Item]:
        """Every item, oldest first (beyond the replay position too)."""
        return tuple(self._items)

    @property
    def messages(self) -> list[Message]:
        """The messages of the conversation so far (up to the replay position), oldest first."""
        return [item.message for item in self._items[: self.position]]

    def last_assistant(self) -> Message | None:
        """The latest assistant message of the conversation so far, if any."""
        for item in reversed(self._items[: self.position]):
            if item.message.role == "assistant":
                return item.message
        return None

    def __len__(self) -> int:
        return len(self._items)

    def to_json(self) -> dict[str, JsonValue]:
        """``{"items": [...]}``, the snapshot form."""
        return {"items": [item.to_json() for item in self._items]}


@runtime_checkable
class ContextLayer(Protocol):
    """A part of the context that contributes messages to a model request.

    ``id`` is stable (``instructions``, ``scratchpad``, ``history``): snapshots store
    each layer's ``state()`` under it. The ids of version-1 snapshots' layers are
    reserved (``check_layer_ids``). ``on_append`` sees every item appended through
    ``run_append_pipeline`` (a history window may trim, a scratchpad may take notes).
    """

    id: str

    def render(self, ctx: Context) -> list[Message]:
        """The messages this layer puts into the next model request."""
        ...

    def on_append(self, ctx: Context, items: Sequence[Item]) -> None:
        """Called after ``items`` were appended to the item log."""
        ...

    def state(self) -> JsonValue:
        """The layer's own state, as JSON (for snapshots)."""
        ...

    def load_state(self, state: JsonValue) -> None:
        """Restore ``state()``'s value."""
        ...


class InstructionsLayer:
    """The system prompt."""

    id = "instructions"

    def __init__(self, text: str | None = None) -> None:
        self.text = text

    def render(self, ctx: Context) -> list[Message]:
        """One system message, when there are instructions."""
        return [] if not self.text else [Message(role="system", content=self.text)]

    def on_append(self, ctx: Context, items: Sequence[Item]) -> None:
        """Instructions do not change with the conversation."""

    def state(self) -> JsonValue:
        """The instructions' text."""
        return {"text": self.text}

    def load_state(self, state: JsonValue) -> None:
        """Restore the text."""
        if isinstance(state, dict):
            text = state.get("text")
            self.text = text if isinstance(text, str) else None


class ScratchpadLayer:
    """Working notes the agent (or its code) keeps, shown to the model after the instructions."""

    id = "scratchpad"

    def __init__(self) -> None:
        self.notes: list[str] = []

    def render(self, ctx: Context) -> list[Message]:
        """One system message with the notes, when there are any."""
        if not self.notes:
            return []
        return [Message(role="system", content="Notes so far:\n" + "\n".join(self.notes))]

    def on_append(self, ctx: Context, items: Sequence[Item]) -> None:
        """Notes are written explicitly, not taken from the conversation."""

    def state(self) -> JsonValue:
        """The notes."""
        return {"notes": list(self.notes)}

    def load_state(self, state: JsonValue) -> None:
        """Restore the notes."""
        if isinstance(state, dict) and isinstance(state.get("notes"), list):
            self.notes = [str(note) for note in state["notes"]]  # type: ignore[union-attr]


class HistoryLayer:
    """The conversation from the item log; ``window`` keeps only the latest messages.

    A window never starts with a tool result whose call it cut off: providers refuse a
    tool message without its assistant message.
    """

    id = "history"

    def __init__(self, window: int | None = None) -> None:
        self.window = window

    def render(self, ctx: Context) -> list[Message]:
        """The item log's messages (the last ``window`` of them)."""
        messages = ctx.items.messages
        if self.window is not None and len(messages) > self.window:
            # Not ``[-window:]``: a window of 0 would keep everything.
            messages = messages[len(messages) - self.window :]
            while messages and messages[0].role == "tool":
                messages = messages[1:]
        return messages

    def on_append(self, ctx: Context, items: Sequence[Item]) -> None:
        """The window is applied when rendering; nothing to do here."""

    def state(self) -> JsonValue:
        """The window size."""
        return {"window": self.window}

    def load_state(self, state: JsonValue) -> None:
        """Restore the window size."""
        if isinstance(state, dict):
            window = state.get("window")
            self.window = window if isinstance(window, int) else None


def default_layers(instructions: str | None = None) -> list[ContextLayer]:
    """``instructions``, ``scratchpad``, ``history``: the standard agent's context."""
    return [InstructionsLayer(instructions), ScratchpadLayer(), HistoryLayer()]


#: The built-in layers by id, each built empty (a restore loads its state into it).
STANDARD_LAYERS: dict[str, type[InstructionsLayer | ScratchpadLayer | HistoryLayer]] = {
    "instructions": InstructionsLayer,
    "scratchpad": ScratchpadLayer,
    "history": HistoryLayer,
}


def check_layer_ids(layers: Iterable[ContextLayer], *, where: str) -> None:
    """Refuse a layer whose id is reserved: ``ConfigError``, code ``reserved_layer_id``.

    ``working-context``, ``static-content`` and ``history-window`` are the layer ids of
    schema-version-1 snapshots, which a restore refuses (``CHECKPOINT_SCHEMA_MISMATCH``):
    a layer of the same id would be saved, and every restore of it refused.
    """
    for layer in layers:
        if layer.id in V1_LAYER_IDS:
            raise ConfigError(
                f"{where}: layer {layer.id!r} ({type(layer).__name__}) has an id reserved for "
                f"the layers of version-1 snapshots ({', '.join(sorted(V1_LAYER_IDS))}); a "
                "snapshot holding it would be refused on every restore. Give the layer "
                "another id",
                code="reserved_layer_id",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class AskUserPrompt:
    """A question to the person, waiting for an answer."""

    id: str
    input: JsonValue
    created_at: float


@dataclass(slots=True, kw_only=True)
class Context:
    """One agent execution's context (see the module docstring)."""

    id: str = field(default_factory=lambda: new_id("exec"))
    thread_id: str | None = None
    resource_id: str | None = None
    items: ItemLog = field(default_factory=ItemLog)
    layers: list[ContextLayer] = field(default_factory=default_layers)
    cwd: str | None = None
    previous_cwd: str | None = None
    ask_user: list[AskUserPrompt] = field(default_factory=list)
    #: The caller's own state; never persisted, never sent to a model.
    state: Any = None
    parent: Context | None = None
    #: The steps in flight, as ``(path, input)``, outermost first (the first one's input
    #: is the execution's): set by a restore, and when an execution raises; emptied when
    #: one completes. ``execute()`` without input continues from here.
    frontier: list[tuple[str, JsonValue]] = field(default_factory=list)
    #: Called with the items each append added (after the layers saw them); never
    #: persisted. An agent running in a child process streams its log to the host so.
    item_listeners: list[Callable[[Sequence[Item]], Awaitable[None]]] = field(default_factory=list)
    #: The artifacts and memory the execution's tools reach through ``ctx.artifacts`` and
    #: ``ctx.memory`` (a workflow run sets them; a spawned agent uses its parent's); never
    #: persisted.
    artifacts: StepArtifacts | None = None
    memory: MemoryStore | None = None
    #: Saves the execution's snapshot (set by the harness that runs or built this
    #: context; see ``checkpoint``); never persisted.
    checkpointer: Callable[[], Awaitable[bool]] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_layer_ids(self.layers, where=f"context {self.id!r}")

    async def checkpoint(self) -> bool:
        """Persist a snapshot of this execution now; whether one was saved.

        The manual trigger of ``harness.checkpoint(ctx)``, for code that changed the
        context (a layer's state, the working directory) and wants it durable before
        going on. A context built or run by a harness with a checkpoint store saves the
        execution's snapshot (a spawned agent's context, its execution's: it has none of
        its own); otherwise, as every durability hook of a zero-config harness, this is
        a no-op and returns ``False``. A failing save is logged and returns ``False``.
        """
        if self.checkpointer is None:
            return False
        return await self.checkpointer()

    def layer(self, layer_id: str) -> ContextLayer | None:
        """The layer with this id, if the context has one."""
        for layer in self.layers:
            if layer.id == layer_id:
                return layer
        return None

    def render(self) -> list[Message]:
        """The messages of the next model request: every layer's, in order."""
        messages: list[Message] = []
        for layer in self.layers:
            messages.extend(layer.render(self))
        return messages


def run_append_pipeline(ctx: Context, items: Iterable[Item]) -> list[Item]:
    """Append ``items`` to the item log and let every layer see them; return those added.

    Items whose response id is already in the log are skipped (not added, not shown to
    the layers).
    """
    added = [item for item in items if ctx.items.append(item)]
    if added:
        for layer in ctx.layers:
            layer.on_append(ctx, added)
    return added
