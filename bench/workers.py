"""Issue 11: runs and steps per second with 1, 2 and 4 worker processes on Postgres.

Run: ``python -m bench.workers [--quick] [--rounds 3] [--runs 200] [--processes 1,2,4] ...``
(``--help`` lists every option; ``bench/README.md`` has the figures and what they mean).

Every run is the same small workflow: a map over ``--items`` items (each branch one
trivial ``execute`` step, the map's concurrency 4), then a chain of ``--chain`` trivial
``execute`` steps, then the output. "Steps" below are those ``execute`` steps (the
function calls): ``items + chain`` per run.

Rows, each measured once per round, the order rotated every round (A B C ..., B C ... A)
so machine noise hits every row alike; the table shows medians over rounds:

* **SQLite, one process**: a fresh child process (``--sqlite-child``) opens one
  ``Runtime`` on its own SQLite store and runs the ``--runs`` runs with ``Runtime.run``,
  one after another (``sequential``), or all at once under ``asyncio.gather`` with at most
  ``--concurrency`` in flight (``gather``). The baseline: what one machine does without
  a queue.
* **Postgres, P worker processes**: a fresh schema; the ``--runs`` runs are submitted
  first (``Runtime.submit``, not timed), then P real ``little-workflow worker``
  subprocesses (each its own data directory, like P machines, ``--concurrency`` runs
  each) are started, and the clock runs from their spawn until the queue
  (``run_queue``) says every run is done. Then they get SIGTERM; each must exit 0 and
  report only completed runs, no lease lost, no error.

Reported per row: seconds from spawn to the last run done, of which start-up (spawn
until the first worker registered in the queue, or until the SQLite child's runtime
was open), runs and steps per second over the whole time and once up, the CPU the
measured processes used per run (``RUSAGE_CHILDREN``: the workers or the SQLite child,
not the Postgres server), and how busy the whole machine was meanwhile
(``/proc/stat``, 100% = every core busy; the Postgres server's CPU shows only here).

Checked after each measurement (a failure fails the row, and the exit code is 1): every
run completed, each claimed once, with one ``StepCompleted`` per step (Postgres: counted
in the events table; SQLite: the child checks each run's output).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PG_URL = os.environ.get(
    "LITTLE_WORKFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
#: The prefix of every schema this benchmark creates, so a sweep finds leftovers.
SCHEMA_PREFIX = "bench_workers_"
#: A measurement taking longer than this is stuck (a lost run, a dead worker): fail it.
MEASUREMENT_TIMEOUT = 600.0
#: How often the orchestrator looks at the queue while the workers work.
POLL_SECONDS = 0.01


# -- the workflow and its step functions (imported by every worker process) ------------


def bump(value: int) -> int:
    """A trivial step: ``value + 1``."""
    return value + 1


def total(values: list[int]) -> int:
    """A trivial step: the sum of the map's outputs."""
    return sum(values)


def flow_yaml(chain: int) -> str:
    """The workflow: a map of one ``bump`` per item, ``total``, then ``chain - 1`` bumps."""
    lines = [
        "lwir: 1",
        "name: bench_workers",
        "steps:",
        "  - id: fan",
        "    kind: map",
        '    items: "${input.items}"',
        "    concurrency: 4",
        "    body:",
        '      - {id: one, kind: execute, fn: "bench.workers:bump", with: {value: "${item}"}}',
        '  - {id: s0, kind: execute, fn: "bench.workers:total",'
        ' with: {values: "${steps.fan.output}"}}',
    ]
    for index in range(1, chain):
        lines.append(
            f'  - {{id: s{index}, kind: execute, fn: "bench.workers:bump",'
            f' with: {{value: "${{steps.s{index - 1}.output}}"}}}}'
        )
    lines.append(f'  - {{id: out, kind: output, value: "${{steps.s{chain - 1}.output}}"}}')
    return "\n".join(lines) + "\n"


def run_items(index: int, items: int) -> list[int]:
    """Run ``index``'s items (distinct per run, so no two inputs match)."""
    return [index * items + offset for offset in range(items)]


def run_input(index: int, items: int) -> dict[str, Any]:
    """Run ``index``'s input."""
    return {"items": run_items(index, items)}


def expected_output(index: int, items: int, chain: int) -> int:
    """What run ``index`` returns: the sum of the bumped items, bumped ``chain - 1`` times."""
    return sum(value + 1 for value in run_items(index, items)) + chain - 1


# -- one measurement -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One row of the table."""

    key: str
    setup: str
    #: ``sequential`` or ``gather`` (SQLite, one process), ``workers`` (Postgres).
    mode: str
    processes: int
    concurrency: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The counts and places every measurement of this run shares."""

    rounds: int
    runs: int
    items: int
    chain: int
    concurrency: int
    lease_seconds: float
    poll_interval: float
    root: Path
    pg_url: str

    @property
    def steps_per_run(self) -> int:
        """``execute`` steps (function calls) per run."""
        return self.items + self.chain


class MeasurementFailed(Exception):
    """A measurement did not complete every run as it should; the message says how."""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from ``/proc/stat`` (0, 0 elsewhere)."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return 0, 0
    values = [int(value) for value in fields[:8]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def _postgres_ticks() -> dict[int, int]:
    """CPU jiffies (user + system) of every ``postgres`` process, by pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 :].split(")", 1)
        if name == "postgres":
            fields = rest.split()
            found[int(entry.name)] = int(fields[11]) + int(fields[12])
    return found


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(slots=True)
class _Meter:
    """Machine and child CPU between ``start`` and ``stop``."""

    busy: int = 0
    ticks: int = 0
    cpu: float = 0.0
    postgres: dict[int, int] = field(default_factory=dict)
    postgres_s: float = 0.0

    def start(self) -> None:
        self.busy, self.ticks = _cpu_ticks()
        self.cpu = _children_cpu()
        self.postgres = _postgres_ticks()

    def done(self) -> None:
        """The work is done: read the server's CPU before the workers' backends exit."""
        after = _postgres_ticks()
        ticks = sum(now - self.postgres.get(pid, 0) for pid, now in after.items())
        self.postgres_s = ticks / os.sysconf("SC_CLK_TCK")

    def stop(self) -> dict[str, float]:
        busy, ticks = _cpu_ticks()
        return {
            "machine_busy": (busy - self.busy) / (ticks - self.ticks) if ticks > self.ticks else 0,
            "child_cpu_s": _children_cpu() - self.cpu,
            "postgres_cpu_s": self.postgres_s,
        }


def measure_sqlite(plan: Plan, variant: Variant, folder: Path) -> dict[str, Any]:
    """The SQLite baseline in one fresh child process."""
    flow = folder / "flow.yaml"
    flow.write_text(flow_yaml(plan.chain))
    job = {
        "dir": str(folder / "data"),
        "flow": str(flow),
        "mode": variant.mode,
        "runs": plan.runs,
        "items": plan.items,
        "chain": plan.chain,
        "concurrency": variant.concurrency,
    }
    meter = _Meter()
    meter.start()
    spawned = time.time()
    done = subprocess.run(
        [sys.executable, "-m", "bench.workers", "--sqlite-child", json.dumps(job)],
        cwd=REPO,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=MEASUREMENT_TIMEOUT,
        check=False,
    )
    meter.done()
    cpu = meter.stop()
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise MeasurementFailed(lines[-1])
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "wall_s": answer["done_at"] - spawned,
        "startup_s": answer["ready_at"] - spawned,
        **cpu,
    }


async def _sqlite_child(job: dict[str, Any]) -> dict[str, float]:
    from little_workflow.runtime import Runtime

    runs, items, chain = job["runs"], job["items"], job["chain"]
    async with Runtime(job["dir"]) as runtime:
        await runtime.open()
        ready_at = time.time()
        if job["mode"] == "sequential":
            results = [await runtime.run(job["flow"], run_input(i, items)) for i in range(runs)]
        else:
            gate = asyncio.Semaphore(job["concurrency"])

            async def one(index: int) -> Any:
                async with gate:
                    return await runtime.run(job["flow"], run_input(index, items))

            results = await asyncio.gather(*(one(index) for index in range(runs)))
        done_at = time.time()
    for index, result in enumerate(results):
        if result.status.value != "completed" or result.output != expected_output(
            index, items, chain
        ):
            raise SystemExit(f"run {index}: {result.status.value}, output {result.output!r}")
    return {"ready_at": ready_at, "done_at": done_at}


def _schema_url(pg_url: str, schema: str) -> str:
    return f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}"


def drop_schema(pg_url: str, schema: str) -> None:
    """Drop one measurement's schema (and everything in it)."""
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def _submit(plan: Plan, store: str, flow: Path, folder: Path) -> None:
    from little_workflow.runtime import Runtime

    async with Runtime(folder / "submitter", store=store) as runtime:
        for index in range(plan.runs):
            await runtime.submit(flow, run_input(index, plan.items), run_id=f"run_{index:05d}")


def _start_worker(plan: Plan, store: str, data_dir: Path, worker_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "little_workflow",
            "--data-dir",
            str(data_dir),
            "worker",
            "--store",
            store,
            "--worker-id",
            worker_id,
            "--concurrency",
            str(plan.concurrency),
            "--lease-seconds",
            str(plan.lease_seconds),
            "--poll-interval",
            str(plan.poll_interval),
        ],
        cwd=REPO,
        env=_child_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_workers(workers: list[subprocess.Popen[str]]) -> list[tuple[int, str]]:
    """SIGTERM each worker, wait for it; each one's exit code and stderr."""
    for process in workers:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    ended = []
    for process in workers:
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
        ended.append((process.returncode, stderr))
    return ended


def measure_workers(plan: Plan, variant: Variant, folder: Path, schema: str) -> dict[str, Any]:
    """P worker processes on a fresh schema drive ``plan.runs`` submitted runs."""
    import psycopg

    store = _schema_url(plan.pg_url, schema)
    flow = folder / "flow.yaml"
    flow.write_text(flow_yaml(plan.chain))
    asyncio.run(_submit(plan, store, flow, folder))
    with psycopg.connect(plan.pg_url, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        meter = _Meter()
        meter.start()
        spawned = time.time()
        workers = [
            _start_worker(plan, store, folder / f"worker-{index}", f"bench_{index}")
            for index in range(variant.processes)
        ]
        up_at: float | None = None
        try:
            while True:
                row = conn.execute(
                    "SELECT (SELECT count(*) FROM run_queue WHERE state = 'done'),"
                    " (SELECT count(*) FROM workers)"
                ).fetchone()
                assert row is not None
                now = time.time()
                if up_at is None and row[1] > 0:
                    up_at = now
                if row[0] >= plan.runs:
                    done_at = now
                    meter.done()
                    break
                if now - spawned > MEASUREMENT_TIMEOUT:
                    raise MeasurementFailed(f"only {row[0]} of {plan.runs} runs done in time")
                if dead := [w.returncode for w in workers if w.poll() is not None]:
                    raise MeasurementFailed(f"a worker exited early: {dead}")
                time.sleep(POLL_SECONDS)
            # A worker still starting (not yet registered, so maybe without its SIGTERM
            # handler) would die of the signal: with few runs, the first worker up can
            # finish them all before the last has imported the library.
            while now - spawned < MEASUREMENT_TIMEOUT:
                row = conn.execute("SELECT count(*) FROM workers").fetchone()
                if row is not None and row[0] >= variant.processes:
                    break
                time.sleep(POLL_SECONDS)
                now = time.time()
        finally:
            ended = _stop_workers(workers)
        cpu = meter.stop()
        outcomes = conn.execute(
            "SELECT count(*) FILTER (WHERE outcome = 'completed'), max(attempts) FROM run_queue"
        ).fetchone()
        completions = conn.execute(
            "SELECT count(*) FROM events e JOIN runs r USING (run_id)"
            " WHERE e.type = 'StepCompleted' AND r.parent_run_id IS NULL"
        ).fetchone()
    assert outcomes is not None
    assert completions is not None
    _check_workers(plan, ended)
    if outcomes[0] != plan.runs or outcomes[1] != 1:
        raise MeasurementFailed(
            f"{outcomes[0]} of {plan.runs} runs completed, claimed up to {outcomes[1]} times"
        )
    # One StepCompleted per execute step, plus the map's own.
    expected = plan.runs * (plan.steps_per_run + 1)
    if completions[0] != expected:
        raise MeasurementFailed(f"{completions[0]} StepCompleted, expected {expected}")
    return {
        "wall_s": done_at - spawned,
        "startup_s": (up_at or done_at) - spawned,
        **cpu,
    }


def _check_workers(plan: Plan, ended: list[tuple[int, str]]) -> None:
    finished = 0
    for code, stderr in ended:
        report = [line for line in stderr.splitlines() if " stopped: " in line]
        if code != 0 or not report:
            lines = stderr.strip().splitlines() or [f"exit code {code}"]
            raise MeasurementFailed(f"a worker exited {code}: {lines[-1]}")
        # "worker W stopped: N completed; 0 lease(s) lost, R released, 0 error(s)"
        summary = report[-1].split(" stopped: ", 1)[1]
        if "0 lease(s) lost" not in summary or "0 error(s)" not in summary:
            raise MeasurementFailed(f"a worker reported: {summary}")
        done = summary.split(";")[0]
        if done != "no run finished":
            for part in done.split(", "):
                count, outcome = part.split(" ", 1)
                if outcome != "completed":
                    raise MeasurementFailed(f"a worker reported: {summary}")
                finished += int(count)
    if finished != plan.runs:
        raise MeasurementFailed(f"the workers reported {finished} of {plan.runs} runs completed")


# -- rounds and the table --------------------------------------------------------------


@dataclass(slots=True)
class Results:
    """Every measurement by variant key; failures by the same keys."""

    values: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)

    def median(self, key: str, metric: str) -> float | None:
        runs = self.values.get(key, [])
        return statistics.median(run[metric] for run in runs) if runs else None


def variants_for(processes: list[int], concurrency: int) -> list[Variant]:
    """The SQLite baseline's two rows, then one row per worker count."""
    rows = [
        Variant(key="sqlite-seq", setup="SQLite, one process, sequential", mode="sequential",
                processes=1, concurrency=1),
        Variant(key="sqlite-gather", setup="SQLite, one process, asyncio.gather",
                mode="gather", processes=1, concurrency=concurrency),
    ]  # fmt: skip
    for count in processes:
        noun = "process" if count == 1 else "processes"
        rows.append(
            Variant(
                key=f"pg-{count}",
                setup=f"Postgres, {count} worker {noun}",
                mode="workers",
                processes=count,
                concurrency=concurrency,
            )
        )
    return rows


def run_rounds(plan: Plan, variants: list[Variant]) -> Results:
    """Every variant once per round, the order rotated each round."""
    results = Results()
    serial = 0
    for round_index in range(plan.rounds):
        shift = round_index % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            if variant.key in results.failures:
                continue
            serial += 1
            folder = Path(tempfile.mkdtemp(prefix=f"{variant.key}-", dir=plan.root))
            schema = f"{SCHEMA_PREFIX}{os.getpid()}_{serial}"
            try:
                if variant.mode == "workers":
                    value = measure_workers(plan, variant, folder, schema)
                else:
                    value = measure_sqlite(plan, variant, folder)
                results.values.setdefault(variant.key, []).append(value)
                print(
                    f"  {variant.key}: {plan.runs / value['wall_s']:.1f} runs/s",
                    file=sys.stderr,
                    flush=True,
                )
            except (MeasurementFailed, subprocess.TimeoutExpired, ValueError) as exc:
                results.failures[variant.key] = str(exc)
                print(f"  {variant.key}: failed: {exc}", file=sys.stderr, flush=True)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
                if variant.mode == "workers":
                    drop_schema(plan.pg_url, schema)
        print(f"  round {round_index + 1}/{plan.rounds} done", file=sys.stderr, flush=True)
    return results


HEADER = (
    "setup",
    "processes x concurrency",
    "s to done",
    "of which start-up s",
    "runs/s",
    "steps/s",
    "runs/s once up",
    "vs SQLite sequential",
    "vs 1 worker",
    "CPU ms/run, measured processes",
    "CPU ms/run, Postgres server",
    "machine CPU busy",
)


def table(plan: Plan, variants: list[Variant], results: Results) -> list[str]:
    """The Markdown table of medians."""
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "|---|---|" + "---:|" * (len(HEADER) - 2),
    ]

    def rate(key: str) -> float | None:
        wall = results.median(key, "wall_s")
        return None if not wall else plan.runs / wall

    base, one = rate("sqlite-seq"), rate("pg-1")
    for variant in variants:
        shape = f"{variant.processes} x {variant.concurrency}"
        if error := results.failures.get(variant.key):
            lines.append(f"| {variant.setup} | {shape} | failed: {error} |" + " |" * 9)
            continue
        wall = results.median(variant.key, "wall_s")
        startup = results.median(variant.key, "startup_s")
        runs = rate(variant.key)
        up = statistics.median(
            plan.runs / (value["wall_s"] - value["startup_s"])
            for value in results.values[variant.key]
        )
        cpu = results.median(variant.key, "child_cpu_s")
        server = results.median(variant.key, "postgres_cpu_s")
        busy = results.median(variant.key, "machine_busy")
        cells = [
            variant.setup,
            shape,
            _fmt(wall, ".2f"),
            _fmt(startup, ".2f"),
            _fmt(runs, ".1f"),
            _fmt(None if runs is None else runs * plan.steps_per_run, ".0f"),
            _fmt(up, ".1f"),
            _ratio(runs, base),
            _ratio(runs, one) if variant.mode == "workers" else "-",
            _fmt(None if cpu is None else cpu / plan.runs * 1000, ".1f"),
            _fmt(None if server is None else server / plan.runs * 1000, ".1f"),
            _fmt(None if busy is None else busy * 100, ".0f") + "%",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def _pg_error(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:
        return str(exc).strip().splitlines()[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.workers", description=(__doc__ or "").split("\n")[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="a ~1-minute smoke: 2 rounds of 60 runs"
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3; --quick 2)")
    parser.add_argument("--runs", type=int, help="runs per measurement (default 200; --quick 60)")
    parser.add_argument(
        "--items", type=int, default=4, help="map items per run, one step each (default 4)"
    )
    parser.add_argument(
        "--chain", type=int, default=3, help="execute steps after the map (default 3, min 1)"
    )
    parser.add_argument(
        "--processes",
        default="1,2,4",
        help="comma-separated worker process counts on Postgres (default 1,2,4)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="runs each worker drives at once, and the gather baseline's limit (default 4)",
    )
    parser.add_argument(
        "--lease-seconds", type=float, default=30.0, help="the workers' lease (default 30)"
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.05,
        help="the workers' idle poll interval in seconds (default 0.05)",
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="PostgreSQL to use (each measurement gets its own schema there)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the temporary data directories go (default: the system temp dir)",
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write every measurement to this file"
    )
    parser.add_argument("--sqlite-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.chain < 1 or args.items < 1:
        parser.error("--chain and --items must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table; 1 if any measurement failed."""
    args = parse_args(argv)
    if args.sqlite_child is not None:
        print(json.dumps(asyncio.run(_sqlite_child(json.loads(args.sqlite_child)))))
        return 0
    # A plain kill then unwinds like Ctrl-C: the workers, temporary files and schemas go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if (error := _pg_error(args.pg_url)) is not None:
        print(f"bench.workers: PostgreSQL needed: {error}", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="bench-workers-", dir=args.dir))
    plan = Plan(
        rounds=args.rounds or (2 if args.quick else 3),
        runs=args.runs or (60 if args.quick else 200),
        items=args.items,
        chain=args.chain,
        concurrency=args.concurrency,
        lease_seconds=args.lease_seconds,
        poll_interval=args.poll_interval,
        root=root,
        pg_url=args.pg_url,
    )
    variants = variants_for([int(n) for n in args.processes.split(",")], args.concurrency)
    print(
        f"bench.workers: {plan.rounds} round(s) of {plan.runs} runs, {len(variants)} rows, "
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, files under {root}, "
        f"schemas {SCHEMA_PREFIX}{os.getpid()}_*",
        file=sys.stderr,
        flush=True,
    )
    try:
        results = run_rounds(plan, variants)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"Workers on Postgres vs one process on SQLite: {plan.rounds} interleaved round(s), "
        f"medians; {plan.runs} runs of {plan.steps_per_run} steps (a map of {plan.items}, "
        f"then {plan.chain}); {os.cpu_count()} CPUs"
    )
    print()
    for line in table(plan, variants, results):
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps({"values": results.values, "failures": results.failures}))
    return 1 if results.failures else 0


if __name__ == "__main__":
    sys.exit(main())
