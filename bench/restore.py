"""Restoring a step ledger of 1,000 entries: one ``get_many`` against a ``get`` per key.

Run: ``python -m bench.restore [--rounds 7] [--entries 1000] [--postgres URL]``

A resumed execution reads its whole ledger before it runs (``StepLedger.load``): one
``list`` of the keys under ``execution:<id>:ledger:``, then the values. An adapter with
``get_many`` reads them in one query; without it the framework falls back to a
concurrent ``get`` per key (``read_many``), which is what a wrapper hiding ``get_many``
measures here. Each entry is shaped like a real one: the output of a model call
(a response of about 600 bytes of JSON), with its path, identity and kind.

For each backend, the ledger is written once, then the two reads alternate round by
round (batch, per key, batch, per key, ...) so that cache and CPU noise hit both alike;
the table shows the median milliseconds per restore and the ratio per-key / batch.

* SQLite: a file under ``.bench-data/`` in the repository (the real disk, never tmpfs),
  WAL; reads run on the event loop's thread, so per-key ``get``s are 1,000 statements
  back to back.
* PostgreSQL: a fresh schema at ``--postgres`` (default: ``LITTLE_WORKFLOW_TEST_POSTGRES_URL``
  or ``postgresql://postgres@127.0.0.1:5432/test``), dropped afterwards; per-key
  ``get``s share the pool's connections, one round trip each. Skipped, with a line
  saying so, when no server answers.
"""

from __future__ import annotations

import argparse
import asyncio
import builtins
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from little_workflow.codec import JsonValue
from little_workflow.durable import DEFAULT_STEP_LEDGER_RETENTION, StepLedger, Unit
from little_workflow.storage import ManagedStorage, StorageAdapter, open_storage

EXECUTION = "exec_bench"


class PerKey:
    """The adapter without ``get_many``: restores fall back to a ``get`` per key."""

    def __init__(self, inner: StorageAdapter) -> None:
        self.inner = inner

    async def get(self, key: str) -> JsonValue | None:
        return await self.inner.get(key)

    async def set(self, key: str, value: JsonValue) -> None:
        await self.inner.set(key, value)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        return await self.inner.list(prefix)


def output(index: int) -> JsonValue:
    """A model response as the ledger records it (about 600 bytes of JSON)."""
    return {
        "id": f"resp_{index:06d}",
        "model": "m1",
        "message": {
            "role": "assistant",
            "content": f"Turn {index}: " + "the candidate has relevant experience. " * 10,
            "toolCalls": [{"id": f"c_{index}", "name": "lookup", "arguments": {"n": index}}],
        },
        "finishReason": "tool_calls",
        "usage": {"inputTokens": 1200 + index, "outputTokens": 80},
    }


async def write_ledger(storage: StorageAdapter, entries: int) -> None:
    ledger = await StepLedger.load(storage, EXECUTION, DEFAULT_STEP_LEDGER_RETENTION)
    for index in range(entries):
        unit = Unit(
            path=f"agent.turns[{index}].model", kind="model", step_id="model", identity="sha256:m"
        )
        await ledger.succeeded(unit, output(index))
    assert ledger.recorded == entries, "retention dropped entries: raise --entries' caps"


async def restore_ms(storage: StorageAdapter, entries: int) -> float:
    start = time.perf_counter()
    ledger = await StepLedger.load(storage, EXECUTION, DEFAULT_STEP_LEDGER_RETENTION)
    elapsed = (time.perf_counter() - start) * 1e3
    assert len(ledger) == entries
    return elapsed


async def compare(name: str, storage: ManagedStorage, entries: int, rounds: int) -> None:
    await write_ledger(storage, entries)
    per_key = PerKey(storage)
    await restore_ms(storage, entries)  # warm-up: caches, the pool's connections
    await restore_ms(per_key, entries)
    batch_times: list[float] = []
    key_times: list[float] = []
    for _ in range(rounds):
        batch_times.append(await restore_ms(storage, entries))
        key_times.append(await restore_ms(per_key, entries))
    batch, keyed = statistics.median(batch_times), statistics.median(key_times)
    print(f"{name}: restore of {entries} ledger entries, median of {rounds} interleaved rounds")
    print(f"  get_many (one query)       {batch:8.2f} ms")
    print(f"  concurrent get per key     {keyed:8.2f} ms   ratio {keyed / batch:.1f}x")


async def sqlite(base: Path, entries: int, rounds: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="restore-", dir=base))
    try:
        # NORMAL only speeds up writing the ledger; what is measured is reading it.
        storage = await open_storage(f"sqlite:///{root}/ledger.db?synchronous=NORMAL")
        try:
            await compare("SQLite", storage, entries, rounds)
        finally:
            await storage.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def postgres(url: str, entries: int, rounds: int) -> None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"PostgreSQL: skipped (not reachable at {url}: {reason})")
        return
    schema = f"lwbench_{uuid.uuid4().hex[:12]}"
    separator = "&" if "?" in url else "?"
    try:
        storage = await open_storage(f"{url}{separator}schema={schema}")
        try:
            await compare("PostgreSQL", storage, entries, rounds)
        finally:
            await storage.close()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "LITTLE_WORKFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
        ),
    )
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    await sqlite(base, args.entries, args.rounds)
    await postgres(args.postgres, args.entries, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
