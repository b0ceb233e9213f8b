"""Payloads by reference: the large values of events live once, in the blob store.

An event's payload fields (``PAYLOAD_FIELDS``: a step's output, a tool's arguments and
result, a model request and response, a run's input and output) are written in one of
three **stored forms**:

* the value itself, when its JSON is at most ``inline_bytes`` (4 KiB by default): the
  common case, which costs one JSON encoding to measure;
* a **reference** ``{"$blob": "<sha256 hex>", "size": <bytes>}``: the value's compact
  JSON is the blob's content;
* ``{"$lit": <value>}``: a value that would itself read as a stored form (a dict with a
  ``"$blob"`` or ``"$lit"`` key), escaped, so that every value reads back exactly as it
  was written.

Only the top of a payload field is ever interpreted: a ``"$blob"`` deeper inside a
value is the user's data and is left alone, which is why escaping one level suffices.

**Model requests** are stored as a chain, so that a conversation's repeated prefix is
stored once. A request (``{"model", "messages", "tools", ...}``) whose JSON is larger
than ``inline_bytes`` becomes a *conversation node*, a blob referenced with
``{"$blob": ..., "size": ..., "kind": "conversation"}``::

    {"v": 1, "prev": <the digest of the session's previous node, or null>, "keep": <k>,
     "add": [<messages after the first k of the previous request>],
     "request": <the request with "messages": null; a stored form itself>}

(stored zlib-compressed: nodes are read only by this module) so the messages of a
request are those of ``prev`` cut to ``keep``, plus ``add``: an
agent's 200-turn session stores each turn's new messages once, and its log grows with
the conversation instead of with its square. The request minus its messages (model,
tools) is the same on every turn and, content-addressed, is stored once too.

**Media parts** (an image or a file sent with a message) larger than ``inline_bytes``
are blobs of their own: the part's decoded bytes, so one photo sent by a hundred
sessions (a map of reviewers over one document) is stored once, not once a session. In
``add`` such a part's ``data`` is a reference, and the node says ``"v": 2``; a node
without one stays ``"v": 1``, byte for byte what earlier versions wrote and read (a
version that predates media references refuses a ``v: 2`` node as unreadable, typed,
rather than misreading it).

**Size limit.** A payload whose stored blob would exceed ``max_payload_bytes`` (64 MiB
by default) raises ``PayloadTooLargeError`` naming the step, before anything of the
append is written (blobs included). A conversation node holds one turn's new
messages, so the limit bounds what a turn adds, not the conversation.

**Order of writes.** Every blob of an append is put (durably) before the events that
refer to them are appended, so a committed event never points at a missing blob. A
crash in between leaves blobs nothing refers to, which garbage collection removes. Blobs
that go through the event log's own write-ahead log (a SQLite store's rows:
``LoggedBlobStore``) are committed just before the append without an fsync of their own:
the WAL is a prefix after any crash, so the append's fsync makes them durable first.

**Reading.** ``PayloadLog.read`` resolves every reference: resume, replay, the CLI's
``events`` and the UI see the values as written. A blob whose bytes do not hash to its
name is a ``CorruptDataError``, a missing one a ``BlobNotFoundError``, both naming the
run, the event and the blob: never skipped. ``read_stored`` returns the stored forms,
for readers that need only what is small (a runs list folds without fetching a blob)
and resolve the few values they show with ``resolve``.

Rejected: a conversation node per event referring to the previous *event* (by call id)
instead of a blob: cheaper for tiny turns, but a reader could then not resolve an event
without the events before it, and a forked run that copies a prefix of a log would need
the events it did not copy. Rejected too: resolving lazily by handing out proxy objects
for payload values; every consumer of a value would have to know about them.
"""

from __future__ import annotations

import base64
import builtins
import json
import json.encoder as _json_encoder
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from little_workflow.codec import JsonValue
from little_workflow.errors import (
    BlobNotFoundError,
    CorruptDataError,
    InvalidValueError,
    PayloadTooLargeError,
)
from little_workflow.events import (
    Event,
    EventReceived,
    HarnessExecuteStepSucceeded,
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessSessionCompleted,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    RecordedEvent,
    RunCompleted,
    RunStarted,
    RunStatus,
    StepCompleted,
)
from little_workflow.storage._blobs import BlobStore, LoggedBlobStore, blob_digest, is_digest
from little_workflow.storage._deflate import inflated
from little_workflow.storage._protocols import EventLog, RunInfo

__all__ = [
    "DEFAULT_INLINE_BYTES",
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "LITERAL_KEY",
    "PAYLOAD_FIELDS",
    "REF_KEY",
    "PayloadLog",
    "PayloadRef",
    "payload_refs",
    "referenced_digests",
]

#: Payloads whose JSON is larger than this many bytes go to the blob store. Just under the
#: 1,002 bytes of a row that SQLite keeps on a 4 KiB page of the ``WITHOUT ROWID`` events
#: table: an event with a larger payload inline spilled the rest into an overflow page of
#: its own, mostly empty (docs/performance.md, "Bytes on disk per message size").
DEFAULT_INLINE_BYTES: Final = 1000
#: The largest payload stored; a larger one raises ``PayloadTooLargeError``.
DEFAULT_MAX_PAYLOAD_BYTES: Final = 64 * 1024 * 1024

REF_KEY: Final = "$blob"
LITERAL_KEY: Final = "$lit"
_CONVERSATION: Final = "conversation"
_NODE_VERSION: Final = 1
#: A node whose ``add`` refers to media blobs (see the module docstring).
_MEDIA_NODE_VERSION: Final = 2
_MEDIA_TYPES: Final = frozenset({"image", "file"})

#: The fields of each event type that hold payloads (and so may hold a stored form).
PAYLOAD_FIELDS: Final[dict[type[Event], tuple[str, ...]]] = {
    RunStarted: ("input",),
    RunCompleted: ("output",),
    StepCompleted: ("output",),
    HarnessExecuteStepSucceeded: ("result",),
    HarnessModelCalled: ("request",),
    HarnessModelResponded: ("response",),
    HarnessToolCallStarted: ("arguments",),
    HarnessToolCallSucceeded: ("result",),
    HarnessSessionCompleted: ("output",),
    EventReceived: ("data",),
}

# The keys of a model response kept in its event when the response itself is a blob: all a
# runs list's usage fold reads of it, so the list reads no blob (``views/_usage.py``).
_SUMMARY_KEYS: Final = ("model", "usage")

# The same settings as ``codec``'s: compact, non-ASCII kept, NaN refused.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The C encoder itself, built once: ``JSONEncoder.encode`` builds one per call, which is
# most of the cost of measuring the small payload of a step. No cycle check: payloads
# come out of validated events, which cannot hold a cycle.
_MAKE_ENCODER: Any = getattr(_json_encoder, "c_make_encoder", None)
_C_ENCODER: Final = (
    None
    if _MAKE_ENCODER is None
    else _MAKE_ENCODER(
        None,
        _ENCODER.default,
        _json_encoder.encode_basestring,
        None,
        ":",
        ",",
        False,
        False,
        False,
    )
)
_SCALARS: Final = (bool, int, float)
# A string of n characters is at most 6n + 2 bytes of JSON (``\u0001``): below this
# many characters it is inline without being encoded.
_SHORT_STRING_FACTOR: Final = 6
# A reference is some 90 bytes: a request's rest larger than this is shared by reference.
_REST_INLINE_BYTES: Final = 192
_NODE_CACHE_SIZE: Final = 256
# Nodes are our own format, read only by us: compressed, since a conversation's text is
# what a long session's log is made of. A node inflating past this is refused (a bomb).
_NODE_COMPRESSION: Final = 6
_NODE_MAX_BYTES: Final = 1 << 30
_SESSION_CACHE_SIZE: Final = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class PayloadRef:
    """A reference to a blob, as found in a stored payload or a conversation node."""

    digest: str
    size: int
    #: ``value`` (the blob is a value's JSON) or ``conversation`` (a conversation node,
    #: which refers to further blobs: ``referenced_digests`` follows them).
    kind: Literal["value", "conversation"] = "value"

    def to_json(self) -> dict[str, JsonValue]:
        """The reference as stored."""
        stored: dict[str, JsonValue] = {REF_KEY: self.digest, "size": self.size}
        if self.kind != "value":
            stored["kind"] = self.kind
        return stored


def _parse_ref(value: dict[str, Any], where: str) -> PayloadRef:
    digest, size, kind = value.get(REF_KEY), value.get("size"), value.get("kind", "value")
    if (
        not isinstance(digest, str)
        or not is_digest(digest)
        or type(size) is not int
        or size < 0
        or kind not in ("value", _CONVERSATION)
        or not set(value) <= {REF_KEY, "size", "kind"}
    ):
        raise CorruptDataError(f"{where}: malformed blob reference {value!r}")
    return PayloadRef(digest=digest, size=size, kind=kind)


def _stored_ref(value: object, where: str) -> PayloadRef | None:
    """The reference ``value`` is, if it is one (top level of a stored payload)."""
    if type(value) is dict and REF_KEY in value:
        return _parse_ref(value, where)
    return None


def payload_refs(item: Event | JsonValue) -> list[PayloadRef]:
    """The blobs an event (or one stored payload value) refers to directly.

    Conversation nodes refer to further blobs; ``referenced_digests`` follows them.
    This is what garbage collection marks from, and what a copy of an event carries.
    """
    if isinstance(item, Event):
        names = PAYLOAD_FIELDS.get(type(item), ())
        found: list[PayloadRef] = []
        for name in names:
            ref = _stored_ref(getattr(item, name), f"{item.TYPE}.{name}")
            if ref is not None:
                found.append(ref)
        return found
    ref = _stored_ref(item, "stored payload")
    return [] if ref is None else [ref]


def _node_refs(node: dict[str, Any], where: str) -> list[PayloadRef]:
    found = []
    prev = node.get("prev")
    if prev is not None:
        found.append(PayloadRef(digest=_node_digest(prev, where), size=0, kind=_CONVERSATION))
    rest = _stored_ref(node.get("request"), where)
    if rest is not None:
        found.append(rest)
    if node["v"] == _MEDIA_NODE_VERSION:
        found.extend(_parse_ref(part["data"], where) for part in _media_refs(node["add"]))
    return found


def _media_parts(messages: Sequence[JsonValue]) -> Iterable[dict[str, Any]]:
    """The image and file parts of ``messages`` (stored messages: JSON, by alias)."""
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if type(content) is list:
            for part in content:
                if type(part) is dict and part.get("type") in _MEDIA_TYPES:
                    yield part


def _media_refs(messages: Sequence[JsonValue]) -> Iterable[dict[str, Any]]:
    """The media parts of a ``v: 2`` node's ``add`` whose ``data`` is a reference."""
    return (part for part in _media_parts(messages) if type(part.get("data")) is dict)


async def referenced_digests(refs: Iterable[PayloadRef], blobs: BlobStore) -> set[str]:
    """Every blob ``refs`` reach, following conversation nodes (read from ``blobs``)."""
    seen: set[str] = set()
    pending = list(refs)
    while pending:
        ref = pending.pop()
        if ref.digest in seen:
            continue
        seen.add(ref.digest)
        if ref.kind == _CONVERSATION:
            where = f"conversation node {ref.digest}"
            pending.extend(_node_refs(_parse_node(await blobs.get(ref.digest), where), where))
    return seen


def _with_parts(message: JsonValue, replaced: dict[int, dict[str, JsonValue]]) -> JsonValue:
    """``message`` with the content parts in ``replaced`` (by ``id``) swapped, copied only
    where one is: the messages given are shared with the session's chain."""
    content = message.get("content") if type(message) is dict else None
    if type(content) is not list or not any(id(part) in replaced for part in content):
        return message
    assert type(message) is dict
    parts: list[JsonValue] = [replaced.get(id(part), part) for part in content]
    return {**message, "content": parts}


def _encode(value: object, event: Event, name: str) -> bytes:
    try:
        if _C_ENCODER is not None:
            return "".join(_C_ENCODER(value, 0)).encode("utf-8")
        return _ENCODER.encode(value).encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError) as exc:
        raise InvalidValueError(
            f"the {name} of {_describe(event)[1]} cannot be stored as JSON: {exc}"
        ) from exc


def _node_digest(prev: object, where: str) -> str:
    if not isinstance(prev, str) or not is_digest(prev):
        raise CorruptDataError(f"{where}: malformed conversation node (prev {prev!r})")
    return prev


def _parse_node(data: bytes, where: str) -> dict[str, Any]:
    try:
        node = json.loads(inflated(data, limit=_NODE_MAX_BYTES))
    except ValueError as exc:  # InflateError included
        raise CorruptDataError(f"{where} is not a compressed JSON node: {exc}") from exc
    if (
        type(node) is not dict
        or node.get("v") not in (_NODE_VERSION, _MEDIA_NODE_VERSION)
        or type(node.get("keep")) is not int
        or type(node.get("add")) is not list
        or "request" not in node
    ):
        raise CorruptDataError(f"{where} is not a conversation node this version can read")
    return node


def _describe(event: Event) -> tuple[str, str]:
    """(the step path, a phrase naming what produced the payload) for error messages."""
    match event:
        case StepCompleted() | HarnessExecuteStepSucceeded():
            return event.step_path, f"step {event.step_path!r}"
        case HarnessToolCallStarted() | HarnessToolCallSucceeded():
            return event.session_id, f"tool call {event.call_id!r} of step {event.session_id!r}"
        case HarnessModelCalled() | HarnessModelResponded():
            return event.session_id, f"model call {event.call_id!r} of step {event.session_id!r}"
        case HarnessSessionCompleted():
            return event.session_id, f"step {event.session_id!r}"
        case RunStarted():
            return "(input)", "the run's input"
        case _:
            return "(output)", "the run's output"


@dataclass(slots=True)
class _Chain:
    """The last conversation node of a session: its messages and its reference."""

    messages: list[JsonValue]
    ref: PayloadRef


class _Batch:
    """The blobs and chain heads one append produces, applied only once it succeeds."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.blobs: dict[str, bytes] = {}
        self.chains: dict[tuple[str, str], _Chain] = {}
        #: Values measured so far, with their stored forms: a step's result is usually
        #: its output too (equal, though pydantic copied it), and is encoded once.
        self.measured: list[tuple[JsonValue, JsonValue]] = []


class PayloadLog:
    """An ``EventLog`` that stores large payloads in a ``BlobStore`` (module docstring).

    Wraps the store's own log: ``inner`` holds the stored forms, and copying events as
    stored (a fork) appends to ``inner`` directly.
    """

    def __init__(
        self,
        inner: EventLog,
        blobs: BlobStore,
        *,
        inline_bytes: int = DEFAULT_INLINE_BYTES,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
    ) -> None:
        if inline_bytes < 0 or max_payload_bytes < 1:
            raise ValueError("inline_bytes must be >= 0 and max_payload_bytes >= 1")
        self.inner = inner
        self.blobs = blobs
        # Blobs that share the log's WAL are put behind: the append's fsync covers them.
        self._behind = (
            blobs if isinstance(blobs, LoggedBlobStore) and blobs.shares_log_with(inner) else None
        )
        self.inline_bytes = inline_bytes
        self.max_payload_bytes = max_payload_bytes
        self._short = inline_bytes // _SHORT_STRING_FACTOR
        # The session heads of the chains this process wrote or read last, so the next
        # call of a session (in this process, or after a resume that read the log)
        # continues its chain instead of storing the whole conversation again.
        self._heads: OrderedDict[tuple[str, str], _Chain] = OrderedDict()
        # Resolved nodes: (messages, request) by node digest.
        self._nodes: OrderedDict[str, tuple[list[JsonValue], JsonValue]] = OrderedDict()

    # --- writing ----------------------------------------------------------------------

    async def append(
        self,
        run_id: str,
        events: Sequence[Event],
        *,
        sync: bool = True,
        expected_seq: int | None = None,
    ) -> list[int]:
        """Put the blobs of ``events``' large payloads, then append the events with
        references; see ``EventLog.append``. ``PayloadTooLargeError`` writes nothing."""
        stored, batch = self._stored(run_id, events)
        if batch is not None and self._behind is not None:
            await self._behind.put_behind(batch.blobs.values())
        elif batch is not None:
            for data in batch.blobs.values():
                await self.blobs.put(data)
        seqs = await self.inner.append(run_id, stored, sync=sync, expected_seq=expected_seq)
        if batch is not None:
            for key, chain in batch.chains.items():
                self._remember_head(key, chain)
        return seqs

    def _stored(
        self, run_id: str, events: Sequence[Event]
    ) -> tuple[Sequence[Event], _Batch | None]:
        """``events`` in their stored forms, and the blobs and chain heads they need.

        ``events`` itself, and no batch, when nothing in it is large: the common case
        costs a dict lookup per event and one encoding per small container payload.
        """
        batch: _Batch | None = None
        stored: Sequence[Event] = events
        for index, event in enumerate(events):
            for name in PAYLOAD_FIELDS.get(type(event), ()):
                value = getattr(event, name)
                if value is None or type(value) in _SCALARS:
                    continue
                if batch is None:
                    batch = _Batch(run_id)
                if isinstance(event, HarnessModelCalled):
                    form = self._store_request(event, value, batch)
                else:
                    form = self._store(value, batch, event, name)
                if form is not value:
                    if stored is events:
                        stored = list(events)
                    assert isinstance(stored, list)
                    update: dict[str, object] = {name: form}
                    if (
                        type(event) is HarnessModelResponded
                        and isinstance(value, dict)
                        and type(form) is dict
                        and REF_KEY in form
                    ):
                        update["summary"] = {
                            key: value[key] for key in _SUMMARY_KEYS if key in value
                        }
                    stored[index] = stored[index].model_copy(update=update)
        return stored, batch

    def _check_limit(self, size: int, event: Event, name: str) -> None:
        if size > self.max_payload_bytes:
            path, what = _describe(event)
            raise PayloadTooLargeError(
                f"the {name} of {what} is {size} bytes of JSON, over the limit of "
                f"{self.max_payload_bytes} bytes; nothing of it was written. Raise the limit "
                "(Runtime(max_payload_bytes=...), --max-payload-bytes) and resume the run, "
                "or make the step return less (a file, an artifact)",
                where=path,
                size=size,
                limit=self.max_payload_bytes,
            )

    def _store(
        self,
        value: JsonValue,
        batch: _Batch,
        event: Event,
        name: str,
        inline_bytes: int | None = None,
    ) -> JsonValue:
        """The stored form of one payload value (see the module docstring)."""
        if isinstance(value, str) and len(value) <= self._short:
            return value
        for seen, seen_form in batch.measured:
            if seen is value:
                return seen_form
            # Equal is not identical (``1 == True``): only the decision to keep a value
            # inline carries over, never a blob, whose bytes are the other value's JSON.
            if seen_form is seen and type(seen) is type(value) and seen == value:
                return value
        data = _encode(value, event, name)
        form: JsonValue = value
        if len(data) > (self.inline_bytes if inline_bytes is None else inline_bytes):
            # The blob holds the value itself: only an inline form needs escaping.
            self._check_limit(len(data), event, name)
            form = self._put(data, batch).to_json()
        elif type(value) is dict and (REF_KEY in value or LITERAL_KEY in value):
            form = {LITERAL_KEY: value}
        batch.measured.append((value, form))
        return form

    def _put(
        self, data: bytes, batch: _Batch, kind: Literal["value", "conversation"] = "value"
    ) -> PayloadRef:
        digest = blob_digest(data)
        batch.blobs.setdefault(digest, data)
        return PayloadRef(digest=digest, size=len(data), kind=kind)

    def _store_request(
        self, event: HarnessModelCalled, request: JsonValue, batch: _Batch
    ) -> JsonValue:
        """A model request as a conversation node (or as any payload, if it is small)."""
        messages = request.get("messages") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not isinstance(messages, list):
            return self._store(request, batch, event, "request")
        if REF_KEY in request or LITERAL_KEY in request:
            return self._store(request, batch, event, "request")
        key = (batch.run_id, event.session_id)
        head = batch.chains.get(key) or self._heads.get(key)
        if head is None:
            # No chain yet: a small request stays inline. Measuring it means encoding the
            # whole conversation, but only until the session's first node.
            size = len(_encode(request, event, "request"))
            if size <= self.inline_bytes:
                return request
        keep = 0
        if head is not None:
            previous = head.messages
            limit = min(len(previous), len(messages))
            while keep < limit and previous[keep] == messages[keep]:
                keep += 1
        rest = {name: (None if name == "messages" else item) for name, item in request.items()}
        added = messages[keep:]
        with_media = self._store_media(added, batch, event)
        node: dict[str, JsonValue] = {
            "v": _NODE_VERSION if with_media is None else _MEDIA_NODE_VERSION,
            "prev": head.ref.digest if head is not None and keep else None,
            "keep": keep,
            "add": added if with_media is None else with_media,
            # The rest of a request (model, tool specs) is the same on every turn: as
            # a blob of its own it is stored once, not once a node.
            "request": self._store(rest, batch, event, "request", _REST_INLINE_BYTES),
        }
        data = _encode(node, event, "request")
        self._check_limit(len(data), event, "request")
        ref = self._put(zlib.compress(data, _NODE_COMPRESSION), batch, _CONVERSATION)
        batch.chains[key] = _Chain(messages=messages, ref=ref)
        return ref.to_json()

    def _store_media(
        self, messages: list[JsonValue], batch: _Batch, event: HarnessModelCalled
    ) -> list[JsonValue] | None:
        """``messages`` with each large media part's bytes put as a blob and its ``data``
        a reference; ``None`` when no part is that large (the node stays ``v: 1``)."""
        large = [
            part
            for part in _media_parts(messages)
            if type(part.get("data")) is str and len(part["data"]) > self.inline_bytes
        ]
        if not large:
            return None
        replaced: dict[int, dict[str, JsonValue]] = {}
        for part in large:
            try:
                data = base64.b64decode(part["data"], validate=True)
            except ValueError:
                continue  # not base64 (the part's own check is elsewhere): kept as it is
            self._check_limit(len(data), event, "request")
            replaced[id(part)] = {**part, "data": self._put(data, batch).to_json()}
        if not replaced:
            return None
        return [_with_parts(message, replaced) for message in messages]

    def _remember_head(self, key: tuple[str, str], chain: _Chain) -> None:
        self._heads[key] = chain
        self._heads.move_to_end(key)
        while len(self._heads) > _SESSION_CACHE_SIZE:
            self._heads.popitem(last=False)

    # --- reading ----------------------------------------------------------------------

    async def read(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> builtins.list[RecordedEvent]:
        """The run's events with every payload resolved; see ``EventLog.read``."""
        records = await self.inner.read(run_id, after=after, limit=limit)
        resolved = records
        for index, record in enumerate(records):
            # Checked here, without a call per event: a resume reads thousands of them,
            # and only the few holding a stored form need the (async) resolver.
            for name in PAYLOAD_FIELDS.get(type(record.event), ()):
                value = getattr(record.event, name)
                if type(value) is dict and (REF_KEY in value or LITERAL_KEY in value):
                    event = await self.resolve_event(record)
                    if resolved is records:  # the inner log's list is not ours to change
                        resolved = list(records)
                    resolved[index] = RecordedEvent(
                        run_id=record.run_id, seq=record.seq, ts=record.ts, event=event
                    )
                    break
        return resolved

    async def read_stored(
        self, run_id: str, *, after: int = 0, limit: int | None = None
    ) -> builtins.list[RecordedEvent]:
        """The run's events as stored: payload fields may hold references."""
        return await self.inner.read(run_id, after=after, limit=limit)

    async def resolve_event(self, record: RecordedEvent) -> Event:
        """``record``'s event with its payload fields resolved (itself if none refers)."""
        event = record.event
        names = PAYLOAD_FIELDS.get(type(event))
        if names is None:
            return event
        updates: dict[str, JsonValue] = {}
        for name in names:
            value = getattr(event, name)
            if type(value) is dict and (REF_KEY in value or LITERAL_KEY in value):
                where = f"run {record.run_id!r} seq {record.seq} ({record.type}.{name})"
                updates[name] = await self._resolve(value, where, record.run_id, event)
        return event.model_copy(update=updates) if updates else event

    async def resolve(self, value: JsonValue, *, where: str = "stored payload") -> JsonValue:
        """The value a stored payload form stands for (any other value is itself)."""
        if type(value) is dict and (REF_KEY in value or LITERAL_KEY in value):
            return await self._resolve(value, where, None, None)
        return value

    async def _resolve(
        self, value: dict[str, JsonValue], where: str, run_id: str | None, event: Event | None
    ) -> JsonValue:
        if REF_KEY not in value:
            if len(value) != 1:
                raise CorruptDataError(f"{where}: malformed escaped value")
            return value[LITERAL_KEY]
        ref = _parse_ref(value, where)
        if ref.kind == _CONVERSATION:
            messages, request = await self._conversation(ref, where)
            if run_id is not None and isinstance(event, HarnessModelCalled):
                # A resume reads the log before it appends: the session's next call
                # continues this chain.
                self._remember_head((run_id, event.session_id), _Chain(messages=messages, ref=ref))
            if not isinstance(request, dict):
                raise CorruptDataError(f"{where}: conversation node {ref.digest} has no request")
            # A list of its own: the cached one is shared by the nodes after it.
            return {
                name: (list(messages) if name == "messages" else item)
                for name, item in request.items()
            }
        data = await self._get(ref, where)
        try:
            result: JsonValue = json.loads(data)
        except ValueError as exc:
            raise CorruptDataError(f"{where}: blob {ref.digest} is not valid JSON: {exc}") from exc
        return result

    async def _get(self, ref: PayloadRef, where: str) -> bytes:
        try:
            return await self.blobs.get(ref.digest)
        except BlobNotFoundError as exc:
            raise BlobNotFoundError(
                f"{where} refers to blob {ref.digest} ({ref.size} bytes), which is missing: "
                f"{exc.message}"
            ) from exc
        except CorruptDataError as exc:
            raise CorruptDataError(f"{where}: {exc.message}") from exc

    async def _conversation(self, ref: PayloadRef, where: str) -> tuple[list[JsonValue], JsonValue]:
        """The messages and request (``messages`` null) a node stands for.

        Walks back to the first node it has already resolved (or the chain's start),
        without recursion: a chain is as long as its session.
        """
        pending: list[tuple[str, dict[str, Any]]] = []
        digest: str | None = ref.digest
        while digest is not None and digest not in self._nodes:
            node_where = f"{where}: conversation node {digest}"
            node = _parse_node(
                await self._get(PayloadRef(digest=digest, size=0), where), node_where
            )
            pending.append((digest, node))
            prev = node.get("prev")
            digest = None if prev is None else _node_digest(prev, node_where)
        messages: list[JsonValue] = [] if digest is None else self._nodes[digest][0]
        request: JsonValue = None if digest is None else self._nodes[digest][1]
        for node_digest, node in reversed(pending):
            keep = node["keep"]
            if not 0 <= keep <= len(messages) or (keep and node.get("prev") is None):
                raise CorruptDataError(
                    f"{where}: conversation node {node_digest} keeps {keep} messages of "
                    f"{len(messages)}"
                )
            added = node["add"]
            if node["v"] == _MEDIA_NODE_VERSION:
                added = await self._media(added, f"{where}: node {node_digest}")
            messages = messages[:keep] + added
            request = await self.resolve(node["request"], where=f"{where}: node {node_digest}")
            self._nodes[node_digest] = (messages, request)
            self._nodes.move_to_end(node_digest)
        while len(self._nodes) > _NODE_CACHE_SIZE:
            self._nodes.popitem(last=False)
        # The walk ended at ``ref``'s own node (the last one resolved, or a cached one).
        return messages, request

    async def _media(self, added: list[JsonValue], where: str) -> list[JsonValue]:
        """A ``v: 2`` node's ``add`` with every media reference read back into base64."""
        replaced: dict[int, dict[str, JsonValue]] = {}
        for part in _media_refs(added):
            ref = _parse_ref(part["data"], where)
            data = await self._get(ref, where)
            replaced[id(part)] = {**part, "data": base64.b64encode(data).decode("ascii")}
        return [_with_parts(message, replaced) for message in added]

    # --- the rest of EventLog ---------------------------------------------------------

    async def last_seq(self, run_id: str) -> int:
        """See ``EventLog.last_seq``."""
        return await self.inner.last_seq(run_id)

    async def get_run(self, run_id: str) -> RunInfo | None:
        """See ``EventLog.get_run``."""
        return await self.inner.get_run(run_id)

    async def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        parent_run_id: str | None = None,
        top_level: bool = False,
        before: tuple[float, str] | None = None,
        limit: int | None = None,
    ) -> builtins.list[RunInfo]:
        """See ``EventLog.list_runs``."""
        return await self.inner.list_runs(
            status=status,
            workflow=workflow,
            parent_run_id=parent_run_id,
            top_level=top_level,
            before=before,
            limit=limit,
        )

    async def delete_runs(self, run_ids: Iterable[str]) -> int:
        """See ``EventLog.delete_runs``. Blobs stay: others may share them; ``Runtime.gc``
        sweeps those no remaining event reaches."""
        wanted = list(run_ids)
        deleted = await self.inner.delete_runs(wanted)
        # A deleted run's chain heads must not seed a later run that reuses its id.
        gone = set(wanted)
        for key in [key for key in self._heads if key[0] in gone]:
            del self._heads[key]
        return deleted

    async def close(self) -> None:
        """Close the wrapped log (the blob store belongs to whoever opened it)."""
        await self.inner.close()
