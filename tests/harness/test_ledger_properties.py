"""Property tests: the ledger against a reference model of its retention and identity rules.

1. Random sequences of records, lookups and reloads on one execution's ``StepLedger``,
   under random caps, must agree with ``ModelLedger`` (a dict and the seed's rules):
   what replays, how many entries are held, which warnings are logged, and what a new
   process finds in the store.
2. Random agent graphs (nested sequences of code steps) are cut short at a random
   step, edited at random (a step's function swapped), and resumed: the steps that run
   again must be exactly those the model says: a recorded step with the same identity
   replays (a composite without descending), a changed one runs fresh with its subtree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.durable import StepLedger, StepLedgerRetention, Unit
from little_workflow.harness import GraphStep, run_code, sequence, step_identity
from little_workflow.storage import create_in_memory_storage
from tests.harness.durable_support import Crash, durable_harness

PATHS = ["a", "a.b", "a.b.c", "a[0]", "a[0].x", "a[1]", "ab", "a.bc", "z", "z.a"]
IDENTITIES = ["sha256:one", "sha256:two"]
SETTINGS = settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def under(path: str, root: str) -> bool:
    return path == root or path.startswith((f"{root}.", f"{root}["))


class ModelLedger:
    """The rules, on a dict: what the ledger must do."""

    def __init__(self, retention: StepLedgerRetention) -> None:
        self.retention = retention
        self.entries: dict[str, tuple[str, JsonValue]] = {}
        #: What the store holds: the entries as of the last write (discards are
        #: deleted at the next write, so a reload before it finds them again).
        self.durable: dict[str, tuple[str, JsonValue]] = {}
        self.warned: set[str] = set()

    def record(self, path: str, identity: str, value: JsonValue) -> None:
        self.durable = dict(self.entries)
        size = len(codec.dumps(value, where="model").encode("utf-8"))
        if size > self.retention.max_entry_bytes:
            self.warned.add("bytes")
        elif len(self.entries) >= self.retention.max_entries and path not in self.entries:
            self.warned.add("entries")
        else:
            self.entries[path] = self.durable[path] = (identity, value)

    def lookup(self, path: str, identity: str) -> JsonValue | None:
        entry = self.entries.get(path)
        if entry is None:
            return None
        if entry[0] == identity:
            return entry[1]
        for doomed in [p for p in self.entries if under(p, path)]:
            del self.entries[doomed]
        return None

    def reload(self) -> None:
        self.entries = dict(self.durable)
        self.warned = set()


class Warnings(logging.Handler):
    """Collects the kinds of the ledger's drop warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        self.seen.append("bytes" if "max_entry_bytes" in message else "entries")


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("record"),
            st.sampled_from(PATHS),
            st.sampled_from(IDENTITIES),
            st.text(alphabet="aé€", max_size=12),
        ),
        st.tuples(st.just("lookup"), st.sampled_from(PATHS), st.sampled_from(IDENTITIES)),
        st.tuples(st.just("reload")),
    ),
    max_size=40,
)
caps = st.sampled_from([math.inf, 1, 2, 3, 6])
byte_caps = st.sampled_from([math.inf, 8, 14, 24])


@SETTINGS
@given(ops=operations, max_entries=caps, max_entry_bytes=byte_caps)
def test_the_ledger_follows_the_model(
    ops: list[tuple[Any, ...]], max_entries: float, max_entry_bytes: float
) -> None:
    retention = StepLedgerRetention(max_entries=max_entries, max_entry_bytes=max_entry_bytes)
    asyncio.run(check_operations(ops, retention))


async def check_operations(ops: list[tuple[Any, ...]], retention: StepLedgerRetention) -> None:
    storage = create_in_memory_storage()
    model = ModelLedger(retention)
    handler = Warnings()
    logger = logging.getLogger("little_workflow.durable")
    logger.addHandler(handler)
    try:
        ledger = await StepLedger.load(storage, "exec_p", retention)
        for op in ops:
            if op[0] == "record":
                _, path, identity, text = op
                unit = Unit(path=path, kind="code", step_id=path, identity=identity)
                await ledger.succeeded(unit, {"t": text})
                model.record(path, identity, {"t": text})
            elif op[0] == "lookup":
                _, path, identity = op
                unit = Unit(path=path, kind="code", step_id=path, identity=identity)
                found = ledger.replay(unit)
                expected = model.lookup(path, identity)
                assert (None if found is None else found.value) == expected, op
            else:
                ledger = await StepLedger.load(storage, "exec_p", retention)
                model.reload()
                handler.seen.clear()
            assert len(ledger) == len(model.entries)
            assert sorted(handler.seen) == sorted(model.warned)  # once per kind
        # A new process finds what the model says the store holds.
        fresh = await StepLedger.load(storage, "exec_p", retention)
        stored = {entry.path: (entry.identity, entry.value) for entry in fresh.memo}
        assert stored == model.durable
    finally:
        logger.removeHandler(handler)


# --- graphs -----------------------------------------------------------------------------


@dataclass
class Node:
    id: str
    children: list[Node] | None = None  # None: a code step
    variant: int = 0

    def leaves(self) -> Iterator[Node]:
        if self.children is None:
            yield self
        else:
            for child in self.children:
                yield from child.leaves()


class Journal:
    """What ran, and where to die."""

    def __init__(self, crash_at: int | None) -> None:
        self.ran: list[str] = []
        self.crash_at = crash_at


def variant0(journal: Journal, leaf_id: str) -> Any:
    def leaf(ctx: Any, _input: Any) -> JsonValue:
        return step(journal, leaf_id, 0)

    return leaf


def variant1(journal: Journal, leaf_id: str) -> Any:
    def leaf(ctx: Any, _input: Any) -> JsonValue:
        return step(journal, leaf_id, 1)

    return leaf


def step(journal: Journal, leaf_id: str, variant: int) -> JsonValue:
    if journal.crash_at is not None and len(journal.ran) == journal.crash_at:
        journal.ran.append(leaf_id)
        raise Crash
    journal.ran.append(leaf_id)
    return f"{leaf_id}:{variant}"


def build(node: Node, journal: Journal) -> GraphStep:
    if node.children is None:
        factory = variant0 if node.variant == 0 else variant1
        return run_code(factory(journal, node.id), id=node.id)
    return sequence([build(child, journal) for child in node.children], id=node.id)


def identities(step: GraphStep, path: str, into: dict[str, str]) -> dict[str, str]:
    into[path] = step_identity(step)
    for child in getattr(step, "steps", ()):
        identities(child, f"{path}.{child.id}", into)
    return into


@st.composite
def trees(draw: st.DrawFn) -> Node:
    counter = iter(range(1000))

    def grow(depth: int) -> Node:
        name = f"n{next(counter)}"
        if depth >= 3 or draw(st.booleans()):
            return Node(name)
        return Node(name, [grow(depth + 1) for _ in range(draw(st.integers(1, 3)))])

    return Node("root", [grow(1) for _ in range(draw(st.integers(1, 4)))])


def predict(tree: Node, first: dict[str, str], crash_at: int, second: dict[str, str]) -> list[str]:
    """The leaves a resume runs, by the model: record run 1, then replay run 2."""
    model = ModelLedger(StepLedgerRetention(max_entries=math.inf, max_entry_bytes=math.inf))
    done = {leaf.id for index, leaf in enumerate(tree.leaves()) if index < crash_at}

    def completed(node: Node) -> bool:
        return all(leaf.id in done for leaf in node.leaves())

    def record(node: Node, path: str) -> None:
        if node.children is not None:
            for child in node.children:
                record(child, f"{path}.{child.id}")
        if completed(node):
            model.record(path, first[path], True)

    record(tree, "root")
    ran: list[str] = []

    def visit(node: Node, path: str) -> None:
        if model.lookup(path, second[path]) is not None:
            return  # replayed: a composite without descending
        if node.children is None:
            ran.append(node.id)
        else:
            for child in node.children:
                visit(child, f"{path}.{child.id}")
        model.record(path, second[path], True)

    visit(tree, "root")
    return ran


@SETTINGS
@given(tree=trees(), data=st.data())
def test_a_resume_replays_what_the_model_replays(tree: Node, data: st.DataObject) -> None:
    leaves = list(tree.leaves())
    crash_at = data.draw(st.integers(0, len(leaves)), label="crash_at")
    edited = data.draw(st.sets(st.sampled_from([leaf.id for leaf in leaves])), label="edited")
    asyncio.run(check_resume(tree, crash_at, edited))


async def check_resume(tree: Node, crash_at: int, edited: set[str]) -> None:
    storage = create_in_memory_storage()
    first_journal = Journal(crash_at if crash_at < len(list(tree.leaves())) else None)
    first_graph = build(tree, first_journal)
    harness = durable_harness(storage, graph=first_graph)
    ctx = harness.create_context(id="exec_tree")
    with contextlib.suppress(Crash):
        await harness.execute(ctx, "go")
    for leaf in tree.leaves():
        leaf.variant = 1 if leaf.id in edited else 0
    second_journal = Journal(None)
    second_graph = build(tree, second_journal)
    outcome = await durable_harness(storage, graph=second_graph).resume("exec_tree")
    assert outcome is not None
    expected = predict(
        tree,
        identities(first_graph, "root", {}),
        crash_at,
        identities(second_graph, "root", {}),
    )
    assert second_journal.ran == expected
