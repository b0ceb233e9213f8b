"""Ledger retention: the two caps, their defaults, invalid caps, and what a drop costs.

``max_entry_bytes`` (UTF-8 bytes of the output's JSON, default 128 KiB) and
``max_entries`` (per execution, default 1000); ``math.inf`` disables an axis; a cap that
is not positive (or NaN) is refused at construction with ``STEP_LEDGER_RETENTION_INVALID``.
A step without an entry runs again on resume; the first drop of each kind logs a warning.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest

import little_workflow.durable as durable
from little_workflow import codec
from little_workflow.codec import JsonValue
from little_workflow.durable import (
    DEFAULT_STEP_LEDGER_RETENTION,
    StepLedger,
    StepLedgerRetention,
    Unit,
)
from little_workflow.errors import ConfigError
from little_workflow.harness import HarnessStorage, run_code, sequence
from little_workflow.storage import create_in_memory_storage
from tests.harness.durable_support import Crash, Steps, durable_harness, ledger_entries


def test_the_defaults_are_exported() -> None:
    assert StepLedgerRetention() == DEFAULT_STEP_LEDGER_RETENTION
    assert DEFAULT_STEP_LEDGER_RETENTION.max_entry_bytes == 128 * 1024
    assert DEFAULT_STEP_LEDGER_RETENTION.max_entries == 1000
    assert "DEFAULT_STEP_LEDGER_RETENTION" in durable.__all__
    assert HarnessStorage().step_ledger_retention is DEFAULT_STEP_LEDGER_RETENTION
    harness = durable_harness(create_in_memory_storage())
    assert harness.retention is DEFAULT_STEP_LEDGER_RETENTION


@pytest.mark.parametrize("value", [0, -1, -0.5, math.nan, -math.inf, True, "10", None])
@pytest.mark.parametrize("axis", ["max_entry_bytes", "max_entries"])
def test_an_invalid_cap_is_refused_at_construction(axis: str, value: Any) -> None:
    with pytest.raises(ConfigError) as raised:
        StepLedgerRetention(**{axis: value})
    assert raised.value.code == "STEP_LEDGER_RETENTION_INVALID"
    assert axis in raised.value.message


@pytest.mark.parametrize("axis", ["max_entry_bytes", "max_entries"])
def test_infinity_disables_an_axis(axis: str) -> None:
    retention = StepLedgerRetention(**{axis: math.inf})
    assert getattr(retention, axis) == math.inf


def unit(path: str) -> Unit:
    return Unit(path=path, kind="code", step_id=path, identity="sha256:i")


async def test_the_byte_cap_counts_utf8_bytes_of_the_json() -> None:
    storage = create_in_memory_storage()
    value: JsonValue = {"text": "é" * 10}  # 10 characters, 20 bytes
    size = len(codec.dumps(value, where="test").encode("utf-8"))
    assert size > len(codec.dumps(value, where="test"))

    exact = await StepLedger.load(storage, "exec_b", StepLedgerRetention(max_entry_bytes=size))
    await exact.succeeded(unit("fits"), value)
    assert exact.recorded == 1
    tight = await StepLedger.load(storage, "exec_b", StepLedgerRetention(max_entry_bytes=size - 1))
    await tight.succeeded(unit("too-big"), value)
    assert (tight.recorded, tight.dropped) == (0, 1)
    assert [e["path"] for e in await ledger_entries(storage, "exec_b")] == ["fits"]

    unbounded = await StepLedger.load(
        storage, "exec_b", StepLedgerRetention(max_entry_bytes=math.inf)
    )
    await unbounded.succeeded(unit("huge"), "x" * (256 * 1024))
    assert unbounded.recorded == 1


async def test_the_entry_cap_counts_entries_per_execution() -> None:
    storage = create_in_memory_storage()
    ledger = await StepLedger.load(storage, "exec_c", StepLedgerRetention(max_entries=3))
    for index in range(5):
        await ledger.succeeded(unit(f"s{index}"), index)
    assert (ledger.recorded, ledger.dropped) == (3, 2)
    # Re-recording a path already held is not a new entry.
    await ledger.succeeded(unit("s1"), "again")
    assert ledger.recorded == 4
    other = await StepLedger.load(storage, "exec_other", StepLedgerRetention(max_entries=3))
    await other.succeeded(unit("s0"), 0)
    assert other.recorded == 1  # another execution has its own count
    reloaded = await StepLedger.load(storage, "exec_c", StepLedgerRetention(max_entries=3))
    assert len(reloaded) == 3
    assert reloaded.replay(unit("s1")) is not None
    assert reloaded.replay(unit("s3")) is None

    free = await StepLedger.load(storage, "exec_c", StepLedgerRetention(max_entries=math.inf))
    await free.succeeded(unit("s4"), 4)
    assert free.recorded == 1


def graph(steps: Steps) -> Any:
    return sequence(
        [
            run_code(steps.a, id="a"),
            run_code(steps.big, id="big"),
            run_code(steps.b, id="b"),
            run_code(steps.c, id="c"),
            run_code(steps.d, id="d"),
        ],
        id="flow",
    )


async def test_a_dropped_step_runs_again_on_resume_and_each_kind_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage = create_in_memory_storage()
    retention = StepLedgerRetention(max_entry_bytes=100, max_entries=2)
    steps = Steps(crash="d")
    harness = durable_harness(storage, graph=graph(steps), retention=retention)
    with caplog.at_level(logging.WARNING, logger="little_workflow.durable"), pytest.raises(Crash):
        await harness.execute(harness.create_context(id="exec_drop"), "go")
    # a: recorded; big: too big; b: recorded (2 entries: full); c: no room.
    assert [e["path"] for e in await ledger_entries(storage, "exec_drop")] == [
        "flow.a",
        "flow.b",
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2
    assert "max_entry_bytes" in warnings[0]
    assert "max_entries" in warnings[1]

    caplog.clear()
    steps.runs.clear()
    resumed = durable_harness(storage, graph=graph(steps), retention=retention)
    with caplog.at_level(logging.WARNING, logger="little_workflow.durable"):
        outcome = await resumed.resume("exec_drop")
    assert outcome is not None
    assert outcome[1] == "d"
    # What has an entry replays; what has none runs again (big, c, and d that died).
    assert steps.runs == ["big", "c", "d"]
    # A new process warns again, once per kind: big (bytes); c, d, flow (entries).
    kinds = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(kinds) == 2


@pytest.mark.parametrize(
    "mapping",
    [
        {"maxEntryBytes": 100, "maxEntries": 2},
        {"max_entry_bytes": 100, "max_entries": 2},
    ],
)
async def test_the_seed_mapping_is_accepted_and_applied(mapping: dict[str, Any]) -> None:
    storage = create_in_memory_storage()
    harness = durable_harness(storage, graph=graph(Steps(crash="d")), retention=mapping)  # type: ignore[arg-type]
    assert harness.retention == StepLedgerRetention(max_entry_bytes=100, max_entries=2)
    with pytest.raises(Crash):
        await harness.execute(harness.create_context(id="exec_map"), "go")
    # The caps of the mapping held: big was too big, c found the ledger full.
    assert [e["path"] for e in await ledger_entries(storage, "exec_map")] == ["flow.a", "flow.b"]
    # One axis left out keeps its default.
    only = HarnessStorage(step_ledger_retention={"maxEntries": math.inf})
    assert only.step_ledger_retention == StepLedgerRetention(max_entries=math.inf)


@pytest.mark.parametrize(
    ("retention", "named"),
    [
        ({"maxBytes": 100, "maxEntries": 2}, "'maxBytes'"),
        ({"maxEntryBytes": 0}, "max_entry_bytes"),
        ({"maxEntries": "many"}, "max_entries"),
        ({"maxEntries": 2, "max_entries": 3}, "max_entries twice"),
        ({"maxEntries": None}, "max_entries"),
        (1000, "int"),
        ([100, 2], "list"),
    ],
)
def test_an_invalid_retention_is_refused_at_construction(retention: Any, named: str) -> None:
    with pytest.raises(ConfigError) as raised:
        durable_harness(create_in_memory_storage(), retention=retention)
    assert raised.value.code == "STEP_LEDGER_RETENTION_INVALID"
    assert named in raised.value.message
