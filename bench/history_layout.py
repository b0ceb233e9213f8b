"""Throwaway measurement for issue 23: which SQLite layout stores a conversation compactly.

Run: ``python -m bench.history_layout [--turns 200] [--sizes 100,1024,4096,65536]
[--inline 1024,4096,16384] [--steps 1000] [--rounds 2]``

Not a library change: the layouts are built here, beside the store the library wrote.

1. **Bytes.** For each ``inline_payload_bytes`` value, the ``bench.history`` session runs
   once per message size on the library as it is. Its database is then rebuilt in each
   layout (the ``events`` table ``WITHOUT ROWID`` as today, or a rowid table with the
   same primary key as its index; page size 4096, 8192 or 16384): every table of the
   store created from its own SQL, rows copied in key order. Reported: (database + the
   run's blob files) / final conversation, and the ``events`` table's overflow pages
   (``dbstat``). The rebuilt default layout is checked against the store as written.
2. **Time.** 1,000 trivial steps (``bench.steps.chain``) on the library with each layout
   (the events DDL swapped in ``MIGRATIONS`` for this process, the page size set on the
   empty file before the store opens it), as a ratio to raw ``sqlite3`` insert + commit
   (``bench.steps.raw_commits``) measured in the same round, medians over rounds;
   ``synchronous`` FULL and NORMAL. The inline threshold changes nothing for trivial
   steps (their payloads are tens of bytes), so it is not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from bench import history
from bench.steps import chain, raw_commits, runtime_steps
from little_workflow.runtime import Runtime
from little_workflow.storage import _sqlite_db

KINDS = ("without rowid", "rowid")
PAGES = (4096, 8192, 16384)
EVENTS_DDL = next(s for s in _sqlite_db.MIGRATIONS[0] if "CREATE TABLE events" in s)


def rowid_ddl(sql: str) -> str:
    """The events DDL as a rowid table (its primary key becomes an automatic index)."""
    return sql.replace(") WITHOUT ROWID", ")")


def rebuild(
    source: Path, target: Path, kind: str, page_size: int, blobs: Path | None = None
) -> tuple[int, int]:
    """Copy a store into ``target`` in one layout; (file bytes, events overflow pages).

    With ``blobs``, the blob files go into a ``blobs`` table of the same file too (one
    small file per blob costs a whole filesystem block each).
    """
    conn = sqlite3.connect(target)
    try:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("ATTACH DATABASE ? AS src", (str(source),))
        objects = conn.execute(
            "SELECT type, name, sql FROM src.sqlite_master "
            "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
        for _, name, sql in objects:
            conn.execute(rowid_ddl(sql) if name == "events" and kind == "rowid" else sql)
        for object_type, name, _ in objects:
            if object_type == "table":
                order = " ORDER BY run_id, seq" if name == "events" else ""
                conn.execute(f'INSERT INTO main."{name}" SELECT * FROM src."{name}"{order}')
        if blobs is not None:
            conn.execute("CREATE TABLE blobs (digest TEXT PRIMARY KEY, data BLOB NOT NULL)")
            conn.executemany(
                "INSERT INTO blobs VALUES (?, ?)",
                ((p.name, p.read_bytes()) for p in sorted(blobs.rglob("*")) if p.is_file()),
            )
        conn.commit()
        conn.execute("DETACH DATABASE src")
        (overflow,) = conn.execute(
            "SELECT count(*) FROM dbstat WHERE name = 'events' AND pagetype = 'overflow'"
        ).fetchone()
    finally:
        conn.close()
    return target.stat().st_size, int(overflow)


async def bytes_table(sizes: list[int], inlines: list[int], base: Path) -> None:
    print("bytes on disk (database + blobs) / final conversation; events overflow pages")
    header = " | ".join(history._size(size) for size in sizes)
    print(f"| inline | layout | {header} |")
    print("|---:|---|" + "---:|" * len(sizes))
    for inline in inlines:
        results: dict[tuple[str, int], list[str]] = {(k, p): [] for k in KINDS for p in (*PAGES, 0)}
        for size in sizes:
            root = Path(tempfile.mkdtemp(prefix="layout-", dir=base))
            try:
                requests, _ = await history.sweep_one(root / "data", size, inline, None)
                final = len(json.dumps(requests[-1], ensure_ascii=False, separators=(",", ":")))
                written, blobs, _, _ = history.sqlite_store_bytes(root / "data")
                source = root / "data" / "little-workflow.db"
                for kind in KINDS:
                    for page in PAGES:
                        target = root / f"{kind.replace(' ', '_')}-{page}.db"
                        db, overflow = rebuild(source, target, kind, page)
                        if kind == KINDS[0] and page == 4096 and abs(db - written) > 0.1 * written:
                            print(f"  (rebuilt {db} B against {written} B written, size {size})")
                        results[kind, page].append(f"{(db + blobs) / final:.2f}x ({overflow})")
                    # Blob files in the database: the disk holds one file, no block per blob.
                    target = root / f"{kind.replace(' ', '_')}-blobs.db"
                    db, overflow = rebuild(source, target, kind, 4096, root / "data" / "blobs")
                    results[kind, 0].append(f"{db / final:.2f}x ({overflow})")
            finally:
                shutil.rmtree(root, ignore_errors=True)
        for (kind, page), cells in results.items():
            shown = f"{kind}, {page}" if page else f"{kind}, 4096, blobs in the db"
            print(f"| {inline} | {shown} | " + " | ".join(cells) + " |", flush=True)


def _precreate(database: Path, page_size: int) -> None:
    database.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(database)
    try:
        conn.execute(f"PRAGMA page_size = {page_size}")
        conn.execute("CREATE TABLE lw_bench_pad (x)")
        conn.execute("DROP TABLE lw_bench_pad")
        conn.commit()
    finally:
        conn.close()


async def layout_steps(root: Path, kind: str, page: int, steps: int, sync: str) -> float:
    """µs per step of the chain on a fresh store in one layout."""
    ddl = EVENTS_DDL if kind == KINDS[0] else rowid_ddl(EVENTS_DDL)
    original = _sqlite_db.MIGRATIONS
    first = tuple(ddl if s == EVENTS_DDL else s for s in original[0])
    _sqlite_db.MIGRATIONS = (first, *original[1:])
    try:
        _precreate(root / "little-workflow.db", page)
        store = f"sqlite:///{root}/?synchronous={sync}"
        async with Runtime(root, store=store) as runtime:
            await runtime.run(chain(steps), None, run_id="warm")
            elapsed = await runtime_steps(runtime, chain(steps), "timed")
        conn = sqlite3.connect(root / "little-workflow.db")
        try:
            actual = int(conn.execute("PRAGMA page_size").fetchone()[0])
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
        finally:
            conn.close()
        assert actual == page, (actual, page)
        assert ("WITHOUT ROWID" in sql) == (kind == KINDS[0]), sql
        return elapsed
    finally:
        _sqlite_db.MIGRATIONS = original


def raw(path: Path, steps: int, sync: str) -> float:
    """µs per raw insert + commit (``bench.steps.raw_commits``, its pragma set to ``sync``)."""
    if sync == "FULL":
        return raw_commits(path, steps)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {sync}")
    conn.execute(
        "CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, "
        "type TEXT NOT NULL, ts REAL NOT NULL, data TEXT NOT NULL, "
        "PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
    )
    start = time.perf_counter()
    for seq in range(1, steps + 1):
        payload = {"stepPath": f"s{seq}", "stepId": f"s{seq}", "output": {"index": seq}}
        conn.execute(
            "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
            ("run_raw", seq, "StepCompleted", time.time(), json.dumps(payload)),
        )
        conn.commit()
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / steps * 1e6


async def payload_step(index: int) -> dict[str, object]:
    """A step whose output is about 2 KiB: inline at 4096, a blob at 1000 (the default)."""
    return {"index": index, "text": history._filler(index, 2000, "output")}


async def payload_time(steps: int, rounds: int, base: Path) -> None:
    """The inline threshold's cost: steps with 2 KiB outputs, blob or inline, vs raw FULL."""
    print(f"\n{steps} steps returning 2 KiB, SQLite FULL, ratio to raw sqlite3 in the same round")
    print("| inline_payload_bytes | ratio (median) | rounds |")
    print("|---:|---:|---|")
    ratios: dict[int, list[float]] = {1000: [], 4096: []}
    for _ in range(rounds):
        for inline, values in ratios.items():
            root = Path(tempfile.mkdtemp(prefix="layout-payload-", dir=base))
            try:
                baseline = raw(root / "raw.db", steps, "FULL")
                workflow = chain(steps, "bench.history_layout:payload_step")
                async with Runtime(root / "data", inline_payload_bytes=inline) as runtime:
                    await runtime.run(workflow, None, run_id="warm")
                    ours = await runtime_steps(runtime, workflow, "timed")
                values.append(ours / baseline)
            finally:
                shutil.rmtree(root, ignore_errors=True)
    for inline, values in ratios.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"| {inline} | {statistics.median(values):.2f}x | {shown} |")


async def time_table(steps: int, rounds: int, base: Path) -> None:
    print(f"\n{steps} trivial steps, µs/step as a ratio to raw sqlite3 in the same round")
    print("| synchronous | layout | ratio (median) | rounds |")
    print("|---|---|---:|---|")
    for sync in ("FULL", "NORMAL"):
        ratios: dict[tuple[str, int], list[float]] = {(k, p): [] for k in KINDS for p in PAGES}
        for _ in range(rounds):
            for kind in KINDS:
                for page in PAGES:
                    root = Path(tempfile.mkdtemp(prefix="layout-time-", dir=base))
                    try:
                        baseline = raw(root / "raw.db", steps, sync)
                        ours = await layout_steps(root / "data", kind, page, steps, sync)
                        ratios[kind, page].append(ours / baseline)
                    finally:
                        shutil.rmtree(root, ignore_errors=True)
        for (kind, page), values in ratios.items():
            shown = ", ".join(f"{v:.2f}" for v in values)
            print(f"| {sync} | {kind}, {page} | {statistics.median(values):.2f}x | {shown} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--sizes", default="100,1024,4096,65536")
    parser.add_argument("--inline", default="1024,4096,16384")
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-bytes", action="store_true")
    parser.add_argument("--skip-time", action="store_true")
    args = parser.parse_args()
    history.TURNS = args.turns
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    if not args.skip_bytes:
        sizes = [int(s) for s in args.sizes.split(",")]
        await bytes_table(sizes, [int(s) for s in args.inline.split(",")], base)
    if not args.skip_time:
        await time_table(args.steps, args.rounds, base)
        await payload_time(args.steps // 2, args.rounds, base)


if __name__ == "__main__":
    asyncio.run(main())
