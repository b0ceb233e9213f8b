"""Reading a big store: the runs list, ``show``, ``events`` and the UI at 100,000 runs and more.

Run: ``python -m bench.scale build --runs 100000`` then ``python -m bench.scale measure``;
``python -m bench.scale big --events 100000`` for one run with that many events.

``build`` makes ``--runs`` finished one-step runs (``bench.datadir``'s workflow) through
``Runtime.run`` on SQLite with ``synchronous=NORMAL``, in ``--processes`` processes at once
(each its own ``Runtime`` on the same file, runs ``run_<process>_<n>``); a store that
already holds some of them is topped up, not made again. ``measure`` then times, on that
store:

* the raw baseline: ``SELECT … FROM runs ORDER BY created_at DESC LIMIT 50`` on the file;
* ``RunReader.summaries(limit=50)`` in-process, cold (a new reader) and warm (the same
  reader again): the query and fold time a ``runs`` command or the UI spends;
* the UI's ``GET /api/runs`` through httpx's ASGI transport (server time, no socket);
* ``little-workflow runs``, ``runs --json``, ``show`` of one run and ``gc --older-than 30d``
  (which deletes nothing here: every run is newer) as processes, wall time and peak RSS,
  next to ``little-workflow --version`` (the interpreter and the CLI's start-up);
* ``du -s`` of the data directory, per run.

``big`` makes one run of a ``map`` over items (each branch an ``execute`` step: two
events a branch) until it has at least ``--events`` events, then times ``show``,
``show --all``, ``show --json``, ``events --json`` (processes: wall time and peak RSS)
and the UI's ``GET /api/runs/{id}``, ``/events`` and ``/steps`` pages (in-process: time
and ``tracemalloc`` peak).

Files live under ``.bench-data/scale/`` (the real disk, never tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from little_workflow.events import RunStatus
from little_workflow.lwir import ExecuteStep, MapStep, OutputStep, Workflow
from little_workflow.runtime import Runtime
from little_workflow.storage._dirs import make_private_dirs
from little_workflow.views import RunReader

PLAIN = Workflow(name="plain", steps=(OutputStep(id="out", value="${input.n}"),))
DEFAULT_DIR = Path(".bench-data") / "scale"
_BASE = "http://127.0.0.1"


async def trivial(index: int) -> dict[str, int]:
    """A map branch's step: as cheap as a step can be."""
    return {"index": index}


def wide(branches: int) -> Workflow:
    """One map of ``branches`` execute steps, then the output."""
    body = (ExecuteStep(id="s", fn="bench.scale:trivial", with_={"index": "${item}"}),)
    return Workflow(
        name=f"wide-{branches}",
        steps=(
            MapStep(id="m", items=list(range(branches)), body=body, concurrency=64),
            OutputStep(id="out", value="done"),
        ),
    )


def store_url(data_dir: Path) -> str:
    """The SQLite store in ``data_dir``, without fsync at each commit."""
    return f"sqlite:///{data_dir.resolve() / 'little-workflow.db'}?synchronous=NORMAL"


# --- build ------------------------------------------------------------------------------


async def _build_slice(data_dir: Path, worker: int, start: int, stop: int) -> None:
    async with Runtime(data_dir, store=store_url(data_dir)) as rt:
        for n in range(start, stop):
            await rt.run(PLAIN, {"n": n}, run_id=f"run_{worker}_{n:07d}")


def _existing(data_dir: Path, worker: int) -> int:
    """How many of ``worker``'s runs the store holds (they are made in order)."""
    path = data_dir / "little-workflow.db"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        (found,) = conn.execute(
            "SELECT COUNT(*) FROM runs WHERE run_id >= ? AND run_id < ?",
            (f"run_{worker}_", f"run_{worker}`"),
        ).fetchone()
    return int(found)


def build(data_dir: Path, runs: int, processes: int) -> None:
    """Top the store up to ``runs`` runs, ``processes`` processes at once."""
    if not data_dir.exists():
        make_private_dirs(data_dir)
    share = -(-runs // processes)
    started = time.perf_counter()
    children = []
    made = 0
    for worker in range(processes):
        stop = min(share, runs - worker * share)
        start = _existing(data_dir, worker)
        if start >= stop:
            continue
        made += stop - start
        code = (
            "import asyncio, sys; from pathlib import Path; from bench.scale import _build_slice; "
            f"asyncio.run(_build_slice(Path(sys.argv[1]), {worker}, {start}, {stop}))"
        )
        children.append(subprocess.Popen([sys.executable, "-c", code, str(data_dir)]))
    for child in children:
        if child.wait() != 0:
            raise SystemExit(f"a build process failed ({child.returncode})")
    seconds = time.perf_counter() - started
    if made:
        print(f"made {made:,} runs in {seconds:.1f} s ({made / seconds:,.0f} runs/s)")
    print(f"the store holds {sum(_existing(data_dir, w) for w in range(processes)):,} runs")


# --- measuring ----------------------------------------------------------------------------


def _process(args: list[str]) -> tuple[float, int, int]:
    """Wall seconds, peak RSS (KiB) and stdout bytes of one process."""
    with tempfile.NamedTemporaryFile() as rss, tempfile.TemporaryFile() as out:
        # Through /usr/bin/time: a child's ru_maxrss starts at its parent's peak (Linux
        # keeps it across fork and exec), and this process is large by now.
        timed = ["/usr/bin/time", "-f", "%M", "-o", rss.name, *args]
        started = time.perf_counter()
        done = subprocess.run(timed, stdout=out, stderr=subprocess.PIPE, check=False)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed: {done.stderr[-2000:].decode()}")
        return seconds, int(Path(rss.name).read_text().split()[-1]), out.tell()


def _cli(data_dir: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "little_workflow",
        "--data-dir",
        str(data_dir),
        "--store",
        store_url(data_dir),
        *args,
    ]


def _best(rounds: int, call: Callable[[], float]) -> float:
    return min(call() for _ in range(rounds))


def _raw_page(data_dir: Path, where: str = "", index: str | None = None) -> float:
    """Seconds of a raw page of the run index (``INDEXED BY index``, if given)."""
    hint = "" if index is None else f" INDEXED BY {index}"
    with sqlite3.connect(data_dir / "little-workflow.db") as conn:
        started = time.perf_counter()
        conn.execute(
            f"SELECT run_id, status, workflow, parent_run_id, created_at FROM runs{hint} "
            f"{where} ORDER BY created_at DESC, run_id DESC LIMIT 50"
        ).fetchall()
        return time.perf_counter() - started


async def _in_process(data_dir: Path, rounds: int) -> dict[str, float]:
    import httpx

    from little_workflow.ui import create_app

    figures: dict[str, float] = {}
    async with Runtime(data_dir, store=store_url(data_dir), import_functions=False) as rt:
        cold = []
        for _ in range(rounds):
            reader = RunReader(rt.events, interrupted=rt.interrupted_runs, waiting=rt.waiting_runs)
            started = time.perf_counter()
            await reader.summaries(limit=50)
            cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        await reader.summaries(limit=50)
        figures["summaries warm"] = time.perf_counter() - started
        figures["summaries cold"] = min(cold)
        started = time.perf_counter()
        await RunReader(rt.events).summaries(status=RunStatus.FAILED, limit=50)
        figures["summaries --status failed"] = time.perf_counter() - started
    app = create_app(data_dir, store=store_url(data_dir))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as ui,
    ):
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            response = await ui.get("/api/runs")
            times.append(time.perf_counter() - started)
            response.raise_for_status()
        figures["UI /api/runs (warm reader)"] = min(times)
    return figures


async def _open_once(data_dir: Path) -> None:
    async with Runtime(data_dir, store=store_url(data_dir), import_functions=False):
        pass


def measure(data_dir: Path, rounds: int) -> None:
    """Time the reads of a store ``build`` made."""
    # Opened once first: a store of an older schema is migrated (timed), not raw-read.
    started = time.perf_counter()
    asyncio.run(_open_once(data_dir))
    print(f"open (migrating if older):        {(time.perf_counter() - started) * 1000:8.0f} ms")
    with sqlite3.connect(data_dir / "little-workflow.db") as conn:
        (runs,) = conn.execute("SELECT COUNT(*) FROM runs").fetchone()
        (one,) = conn.execute("SELECT run_id FROM runs ORDER BY created_at LIMIT 1").fetchone()
    print(f"store: {runs:,} runs")
    raw = _best(rounds, lambda: _raw_page(data_dir))
    print(f"raw SELECT … LIMIT 50:            {raw * 1000:8.2f} ms")
    failed = "WHERE status = 'failed' AND parent_run_id IS NULL"
    # What the store had for this filter before migration 8: the (created_at, run_id)
    # index, filtered row by row.
    scanned = _best(rounds, lambda: _raw_page(data_dir, failed, "runs_by_created"))
    print(f"raw, status failed, by created:   {scanned * 1000:8.2f} ms")
    indexed = _best(rounds, lambda: _raw_page(data_dir, failed))
    print(f"raw, status failed, its index:    {indexed * 1000:8.2f} ms")
    for name, seconds in asyncio.run(_in_process(data_dir, rounds)).items():
        print(f"{name + ':':34}{seconds * 1000:8.2f} ms  ({seconds / raw:,.0f}x raw)")
    for label, args in (
        ("--version", ["--version"]),
        ("runs", ["runs"]),
        ("runs --json", ["runs", "--json"]),
        ("show (oldest run)", ["show", one]),
        ("gc --older-than 30d", ["gc", "--older-than", "30d"]),
    ):
        results = [_process(_cli(data_dir, *args)) for _ in range(rounds if label != "gc" else 1)]
        seconds = min(r[0] for r in results)
        rss = results[-1][1]
        print(f"{label + ':':34}{seconds * 1000:8.0f} ms  peak RSS {rss / 1024:,.0f} MiB")
    du = subprocess.run(["du", "-sk", str(data_dir)], capture_output=True, text=True, check=True)
    kib = int(du.stdout.split()[0])
    print(f"du -s: {kib:,} KiB ({kib * 1024 / runs:,.0f} B per run)")


# --- one big run --------------------------------------------------------------------------


async def _big_run(data_dir: Path, events: int) -> str:
    run_id = f"wide_{events}"
    async with Runtime(data_dir, store=store_url(data_dir)) as rt:
        if await rt.events.get_run(run_id) is None:
            # Two events a branch (its attempt started, its step completed).
            await rt.run(wide(events // 2 + 1), {}, run_id=run_id)
        print(f"run {run_id}: {await rt.events.last_seq(run_id):,} events")
    return run_id


async def _ui_get(data_dir: Path, path: str, *, traced: bool) -> tuple[float, float, int]:
    """Seconds of a first and a second ``GET path`` on a new app, and the first's body
    size; with ``traced``, the first's ``tracemalloc`` peak (bytes) instead of seconds."""
    import httpx

    from little_workflow.ui import create_app

    app = create_app(data_dir, store=store_url(data_dir))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=_BASE) as ui,
    ):
        if traced:
            tracemalloc.start()
        started = time.perf_counter()
        response = await ui.get(path)
        first = time.perf_counter() - started
        if traced:
            first = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        response.raise_for_status()
        started = time.perf_counter()
        (await ui.get(path)).raise_for_status()
        return first, time.perf_counter() - started, len(response.content)


async def _ui_run_page(data_dir: Path, run_id: str, rounds: int) -> None:
    for label, path in (
        ("UI /api/runs/{id}", f"/api/runs/{run_id}"),
        ("UI /api/runs/{id}/events", f"/api/runs/{run_id}/events"),
        # A page of the step tree (after the view's first): it needs the fold too.
        ("UI /api/runs/{id}/steps", f"/api/runs/{run_id}/steps?after=m%5B249%5D.s"),
    ):
        timed = [await _ui_get(data_dir, path, traced=False) for _ in range(rounds)]
        cold, warm, size = min(t[0] for t in timed), min(t[1] for t in timed), timed[0][2]
        peak, _, _ = await _ui_get(data_dir, path, traced=True)
        print(
            f"{label + ':':34}{cold * 1000:8.0f} ms  again {warm * 1000:,.0f} ms  "
            f"tracemalloc peak {peak / 2**20:,.1f} MiB  body {size / 2**20:,.1f} MiB"
        )


def big(data_dir: Path, events: int, rounds: int = 1) -> None:
    """Make (once) and read one run of at least ``events`` events; each figure the best
    of ``rounds`` (peak memory: the last round's)."""
    if not data_dir.exists():
        make_private_dirs(data_dir)
    started = time.perf_counter()
    run_id = asyncio.run(_big_run(data_dir, events))
    print(f"(made or found in {time.perf_counter() - started:.1f} s)")
    for label, args in (
        ("show", ["show", run_id]),
        ("show --all", ["show", "--all", run_id]),
        ("show --json", ["show", "--json", run_id]),
        ("events --json", ["events", "--json", run_id]),
    ):
        results = [_process(_cli(data_dir, *args)) for _ in range(rounds)]
        seconds, (_, rss, out) = min(r[0] for r in results), results[-1]
        print(
            f"{label + ':':34}{seconds * 1000:8.0f} ms  peak RSS {rss / 1024:,.0f} MiB"
            f"  stdout {out / 2**20:,.1f} MiB"
        )
    asyncio.run(_ui_run_page(data_dir, run_id, rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("build", "measure", "big"))
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--events", type=int, default=100_000)
    options = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(Path.cwd()))
    if options.what == "build":
        build(options.data_dir or DEFAULT_DIR / "runs", options.runs, options.processes)
    elif options.what == "measure":
        measure(options.data_dir or DEFAULT_DIR / "runs", options.rounds)
    else:
        big(options.data_dir or DEFAULT_DIR / "big", options.events, options.rounds)


if __name__ == "__main__":
    main()
