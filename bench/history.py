"""How a long agent session's log grows: linearly, not with the square of its turns.

Run: ``python -m bench.history [--turns 200] [--turn-bytes 1024]`` (one size, against the
naive journal and LangGraph), or ``python -m bench.history --sweep [--sizes 100,1024,4096,65536]
[--postgres URL] [--inline-bytes N]`` (issue 23: bytes on disk per byte of conversation at
each message size, with where the SQLite bytes go).

A workflow with one ``agent`` step runs a session of ``--turns`` model calls against a
scripted model: each turn the model asks for a tool call and the tool answers, adding
about ``--turn-bytes`` of messages to the conversation (half the assistant's message,
half the tool's result), and the last turn answers. Every model request carries the
whole conversation so far, as a provider's API requires.

Reported, after the runtime is closed (the SQLite WAL folded into the database):

* **ours**: bytes on disk of the run store: the SQLite database plus the blob files
  (apparent sizes, and blocks allocated, which round each small file up to a block);
* **naive**: the sum of the JSON sizes of every model request, what a log that journals
  each call's request in full stores (Temporal's history, a per-call checkpoint);
* **final**: the JSON size of the last request, the conversation itself;
* **LangGraph**: the SqliteSaver database of a ``MessagesState`` graph replaying the same
  conversation one checkpoint per turn, if ``langgraph`` and
  ``langgraph-checkpoint-sqlite`` are importable here (otherwise said so).

The target: ours <= 3x final. Files live under ``.bench-data/`` (the real disk).

With ``--sweep``, one session per message size (each turn adds a message of that size:
``--turn-bytes`` split between the assistant's message and the tool's result), and for
each: the SQLite file plus its WAL after ``wal_checkpoint(TRUNCATE)``, the blob files, and
their sum per byte of the final conversation; the ``events`` table's pages by kind from
``dbstat`` (leaf, interior, overflow) and the bytes of them left unused, which is where
a layout wastes space. With ``--postgres URL``, the same session on a fresh schema of that
server: ``pg_total_relation_size`` of ``events`` and ``blobs`` (the schema is dropped after).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sqlite3
import tempfile
import uuid
from pathlib import Path
from typing import Any

from little_workflow.events import HarnessModelCalled
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import AgentStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

TURNS = 200
TURN_BYTES = 1024


_LETTERS = "etaoinshrdlucmfwypvbgkjqxz"
_VOCABULARY = [
    "".join(random.Random(index).choices(_LETTERS, weights=range(26, 0, -1), k=3 + index % 7))
    for index in range(3000)
]


def _filler(turn: int, length: int, word: str) -> str:
    # Words drawn at random from a large vocabulary: text that compresses no better than
    # prose does (a repeated word would flatter any store that compresses).
    chooser = random.Random(f"{word}{turn}")
    text = f"{word} {turn}:"
    while len(text) < length:
        text += " " + chooser.choice(_VOCABULARY)
    return text[:length]


def reply(request: ModelRequest) -> Any:
    """The scripted model: a tool call each turn, an answer after ``TURNS`` of them."""
    turn = sum(1 for message in request.messages if message.role == "assistant")
    if turn >= TURNS:
        return f"done after {turn} turns"
    return {
        "content": _filler(turn, TURN_BYTES // 2 - 120, "thinking"),
        "tool_calls": [{"id": f"call_{turn}", "name": "observe", "arguments": {"turn": turn}}],
    }


def observe(turn: int) -> str:
    """What the tool saw at a turn.

    Args:
        turn: The turn number.
    """
    return _filler(turn, TURN_BYTES // 2, "observed")


def workflow() -> Workflow:
    """One agent step running the whole session."""
    return Workflow(
        name="history",
        steps=(
            AgentStep(
                id="agent",
                slot="model",
                prompt="Observe until you are done.",
                tools=("observe",),
                max_turns=TURNS + 1,
            ),
            OutputStep(id="out", value="${steps.agent.output}"),
        ),
    )


def disk_bytes(paths: list[Path]) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the files under ``paths``."""
    apparent = allocated = 0
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            stat = path.stat()
            apparent += stat.st_size
            allocated += stat.st_blocks * 512
    return apparent, allocated


async def ours(root: Path) -> tuple[list[dict[str, Any]], tuple[int, int], int]:
    """Run the session; the requests as recorded, the store's bytes, the blob count."""
    runtime = Runtime(
        root,
        model_slots={"model": ModelSlot(provider=scripted(reply), model="scripted")},
        tools=[tool(observe)],
    )
    async with runtime:
        result = await runtime.run(workflow(), None, run_id="run_history")
        assert result.output == f"done after {TURNS} turns", result.output
        requests = [
            record.event.request
            for record in await runtime.events.read("run_history")
            if isinstance(record.event, HarnessModelCalled)
        ]
    assert all(isinstance(request, dict) for request in requests)
    blobs = root / "blobs"
    count = sum(1 for path in blobs.rglob("*") if path.is_file())
    store = [p for p in root.iterdir() if p.name.startswith("little-workflow.db")]
    return [r for r in requests if isinstance(r, dict)], disk_bytes([*store, blobs]), count


def sqlite_store_bytes(root: Path) -> tuple[int, int, int, int]:
    """(database + WAL after a checkpoint, blob files, blob count, all of it allocated)."""
    database = root / "little-workflow.db"
    connection = sqlite3.connect(database)
    try:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        connection.close()
    store = [p for p in root.iterdir() if p.name.startswith("little-workflow.db")]
    blobs = root / "blobs"
    blob_files = [p for p in blobs.rglob("*") if p.is_file()] if blobs.exists() else []
    allocated = disk_bytes(store)[1] + disk_bytes(blob_files)[1]
    blob_bytes = sum(p.stat().st_size for p in blob_files)
    return disk_bytes(store)[0], blob_bytes, len(blob_files), allocated


def events_pages(database: Path) -> dict[str, tuple[int, int]]:
    """The ``events`` table's pages by kind: {kind: (pages, unused bytes)}, from ``dbstat``."""
    connection = sqlite3.connect(database)
    try:
        rows = connection.execute(
            "SELECT pagetype, count(*), sum(unused) FROM dbstat WHERE name = 'events' "
            "GROUP BY pagetype"
        ).fetchall()
    finally:
        connection.close()
    return {str(kind): (int(pages), int(unused or 0)) for kind, pages, unused in rows}


async def sweep_one(
    root: Path, turn_bytes: int, inline_bytes: int | None, store: str | None
) -> tuple[list[dict[str, Any]], Runtime]:
    """Run one session of ``TURNS`` turns adding ``turn_bytes`` each; its requests."""
    # The scripted model and the tool read the size from the module, as main() sets it.
    global TURN_BYTES  # noqa: PLW0603
    TURN_BYTES = turn_bytes
    extra: dict[str, Any] = {} if inline_bytes is None else {"inline_payload_bytes": inline_bytes}
    runtime = Runtime(
        root,
        store=store,
        model_slots={"model": ModelSlot(provider=scripted(reply), model="scripted")},
        tools=[tool(observe)],
        **extra,
    )
    async with runtime:
        result = await runtime.run(workflow(), None, run_id="run_history")
        assert result.output == f"done after {TURNS} turns", result.output
        requests = [
            record.event.request
            for record in await runtime.events.read("run_history")
            if isinstance(record.event, HarnessModelCalled)
        ]
    return [r for r in requests if isinstance(r, dict)], runtime


def postgres_bytes(url: str, schema: str) -> tuple[int, int]:
    """(events, blobs) ``pg_total_relation_size`` in ``schema``, after a VACUUM of both."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        sizes = []
        for table in ("events", "blobs"):
            conn.execute(f'VACUUM "{schema}".{table}')
            row = conn.execute(
                "SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}".{table}',)
            ).fetchone()
            sizes.append(int(row[0]) if row else 0)
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    return sizes[0], sizes[1]


def _size(value: int) -> str:
    return f"{value} B" if value < 1024 else f"{value / 1024:g} KiB"


async def sweep(sizes: list[int], inline_bytes: int | None, postgres: str | None) -> None:
    """The issue-23 table: bytes on disk per byte of final conversation at each size."""
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    inline = "default" if inline_bytes is None else str(inline_bytes)
    print(f"{TURNS} turns, inline_payload_bytes {inline}; x = bytes on disk / final conversation")
    print(
        "| message | final conversation | SQLite db+WAL | blobs | SQLite x | allocated x "
        "| events table | events pages (leaf / overflow) | unused in events pages |"
        + (" Postgres events+blobs | Postgres x |" if postgres else "")
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if postgres else ""))
    for size in sizes:
        root = Path(tempfile.mkdtemp(prefix="history-sweep-", dir=base))
        try:
            requests, _ = await sweep_one(root / "data", size, inline_bytes, None)
            final = len(json.dumps(requests[-1], ensure_ascii=False, separators=(",", ":")))
            database, blobs, count, allocated = sqlite_store_bytes(root / "data")
            pages = events_pages(root / "data" / "little-workflow.db")
            leaf = pages.get("leaf", (0, 0))
            overflow = pages.get("overflow", (0, 0))
            unused = sum(u for _, u in pages.values())
            total_pages = sum(n for n, _ in pages.values())
            page_size = 4096
            connection = sqlite3.connect(root / "data" / "little-workflow.db")
            try:
                page_size = int(connection.execute("PRAGMA page_size").fetchone()[0])
            finally:
                connection.close()
            line = (
                f"| {_size(size)} | {_kib(final)} | {_kib(database)} | {_kib(blobs)} ({count}) "
                f"| {(database + blobs) / final:.2f}x | {allocated / final:.2f}x "
                f"| {_kib(total_pages * page_size)} | {leaf[0]} / {overflow[0]} "
                f"| {unused / max(1, total_pages * page_size):.0%} |"
            )
            if postgres:
                schema = f"lwbench_{uuid.uuid4().hex[:12]}"
                separator = "&" if "?" in postgres else "?"
                await sweep_one(
                    root / "pg", size, inline_bytes, f"{postgres}{separator}schema={schema}"
                )
                pg_events, pg_blobs = postgres_bytes(postgres, schema)
                line += f" {_kib(pg_events + pg_blobs)} | {(pg_events + pg_blobs) / final:.2f}x |"
            print(line, flush=True)
        finally:
            shutil.rmtree(root, ignore_errors=True)


def langgraph_bytes(root: Path, requests: list[dict[str, Any]]) -> tuple[int, int] | None:
    """SqliteSaver's bytes for the same conversation, one checkpoint per turn, or None."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found]
        from langgraph.graph import START, MessagesState, StateGraph  # type: ignore[import-not-found]
    except ImportError:
        return None
    turns = [request["messages"] for request in requests]

    def model(state: Any) -> dict[str, Any]:
        # Each invocation adds what the conversation gained since the previous request.
        done = len(state["messages"])
        following = next((m for m in turns if len(m) > done), turns[-1])
        return {
            "messages": [
                {"role": "assistant" if m["role"] == "assistant" else "user", "content": str(m)}
                for m in following[done:]
            ]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    path = root / "langgraph.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(connection))
        config = {"configurable": {"thread_id": "history"}}
        for _ in turns:
            graph.invoke({"messages": []}, config)
    finally:
        connection.close()
    return disk_bytes([p for p in root.iterdir() if p.name.startswith("langgraph.sqlite")])


def _kib(value: int) -> str:
    return f"{value / 1024:,.0f} KiB"


async def main() -> None:
    global TURNS, TURN_BYTES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--turn-bytes", type=int, default=TURN_BYTES)
    parser.add_argument("--sweep", action="store_true", help="one session per --sizes")
    parser.add_argument("--sizes", default="100,1024,4096,65536", help="bytes added per turn")
    parser.add_argument("--inline-bytes", type=int, default=None, help="inline_payload_bytes")
    parser.add_argument("--postgres", default=None, help="also on this server (a new schema)")
    args = parser.parse_args()
    TURNS, TURN_BYTES = args.turns, args.turn_bytes
    if args.sweep:
        sizes = [int(part) for part in args.sizes.split(",") if part.strip()]
        await sweep(sizes, args.inline_bytes, args.postgres)
        return
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="history-", dir=base))
    try:
        requests, (apparent, allocated), blob_count = await ours(root / "data")
        sizes = [len(json.dumps(r, ensure_ascii=False, separators=(",", ":"))) for r in requests]
        naive, final = sum(sizes), sizes[-1]
        print(f"{len(requests)} model calls, each turn adding about {TURN_BYTES} bytes:")
        print(f"  final conversation (last request)  {_kib(final):>12}")
        print(
            f"  naive: every request in full       {_kib(naive):>12}   {naive / final:7.2f}x final"
        )
        print(
            f"  little-workflow (db + {blob_count} blobs)   {_kib(apparent):>12}   "
            f"{apparent / final:7.2f}x final   ({_kib(allocated)} allocated, "
            f"{allocated / final:.1f}x)"
        )
        peer = langgraph_bytes(root, requests)
        if peer is None:
            print("  LangGraph SqliteSaver              not installed in this environment")
        else:
            print(
                f"  LangGraph SqliteSaver              {_kib(peer[0]):>12}   "
                f"{peer[0] / final:7.2f}x final"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
