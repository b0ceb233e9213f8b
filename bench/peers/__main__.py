"""little-workflow side by side with DBOS Transact, LangGraph and raw sqlite3 / psycopg.

Run: ``python -m bench.peers [--quick] [--rounds N] [--only lw,raw,dbos,langgraph] ...``
(``--help`` lists every option; ``bench/peers/README.md`` explains them and the setup).

The peers live in ``bench/peers/.venv`` (made by ``bench/peers/setup.sh``). When that
environment exists and this is not its interpreter, this module re-executes itself
there (``--here`` keeps the current interpreter); DBOS and LangGraph rows are skipped
when they cannot be imported, Postgres rows when no server answers.

Three workloads, each measurement in a fresh child process (``bench/peers/_child.py``)
with its own temporary directory and Postgres schema, interleaved round by round
(A B C ... A B C ...) so machine noise hits every system alike; the table shows
medians over rounds and ratios against the raw baseline of the same backend, measured
in the same rounds:

1. ``steps``: µs per durable step and process CPU µs per step (``time.process_time``:
   every thread of the child, user + system) for one run of N trivial steps, after a
   short warm-up run in the same process.
2. ``kill``: a run of N steps whose step N/2 (0-based) SIGKILLs its own process from
   inside its body; a fresh process then resumes the run. Reported: seconds from that
   process's spawn to the run's completion (imports included), the import time alone,
   and steps whose bodies ran more than once (logged to a file outside the process).
3. ``history``: a run of H steps, each adding a 2 KB message to the run's history.
   Reported: µs per step early and late in the run, and the database bytes added per
   step in the first and second half (flat = linear total).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench._library import export_library
from bench.peers._common import SCHEMA_PREFIX, Job, count_calls, drop_schema

REPO = Path(__file__).resolve().parents[2]
BENCH_VENV = Path(__file__).resolve().parent / ".venv"
DEFAULT_PG_URL = os.environ.get(
    "LITTLE_WORKFLOW_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
WORKLOADS = ("steps", "kill", "history")
#: A child that takes longer than this is stuck (a lost kill, a lock): fail it.
CHILD_TIMEOUT = 300.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant:
    """One row: a system on one backend, and the raw row it is compared with."""

    key: str
    system: str
    backend: str
    label: str
    where: str
    #: ``key`` of the raw variant on the same backend (``None`` for the raw rows).
    baseline: str | None
    workloads: tuple[str, ...]
    #: Which module must import for the row to run (``None``: always).
    needs: str | None = None
    pg: bool = False


ALL = ("steps", "kill", "history")
VARIANTS = (
    Variant(key="raw-full", system="raw", backend="sqlite-full", label="raw sqlite3",
            where="SQLite WAL, FULL", baseline=None, workloads=ALL),
    Variant(key="raw-normal", system="raw", backend="sqlite-normal", label="raw sqlite3",
            where="SQLite WAL, NORMAL", baseline=None, workloads=("steps", "kill")),
    Variant(key="raw-batch", system="raw", backend="sqlite-batch100", label="raw sqlite3",
            where="SQLite FULL, 100 rows/commit", baseline=None, workloads=("steps",)),
    Variant(key="raw-pg", system="raw", backend="pg", label="raw psycopg",
            where="Postgres", baseline=None, workloads=ALL, pg=True),
    Variant(key="lw-full", system="lw", backend="sqlite-full", label="little-workflow",
            where="SQLite WAL, FULL", baseline="raw-full", workloads=ALL),
    Variant(key="lw-normal", system="lw", backend="sqlite-normal", label="little-workflow",
            where="SQLite WAL, NORMAL", baseline="raw-normal", workloads=("steps", "kill")),
    Variant(key="lw-map", system="lw", backend="sqlite-map100", label="little-workflow",
            where="SQLite FULL, map x100", baseline="raw-batch", workloads=("steps",)),
    Variant(key="lw-pg", system="lw", backend="pg", label="little-workflow",
            where="Postgres", baseline="raw-pg", workloads=ALL, pg=True),
    Variant(key="dbos-wal", system="dbos", backend="sqlite", label="DBOS",
            where="SQLite WAL, FULL", baseline="raw-full", workloads=ALL, needs="dbos"),
    Variant(key="dbos-journal", system="dbos", backend="sqlite-journal", label="DBOS",
            where="SQLite as shipped (journal)", baseline="raw-full", workloads=("steps",),
            needs="dbos"),
    Variant(key="dbos-pg", system="dbos", backend="pg", label="DBOS",
            where="Postgres", baseline="raw-pg", workloads=ALL, needs="dbos", pg=True),
    Variant(key="lg-sqlite", system="langgraph", backend="sqlite", label="LangGraph",
            where="SqliteSaver, sync", baseline="raw-full", workloads=ALL,
            needs="langgraph.checkpoint.sqlite"),
    Variant(key="lg-async", system="langgraph", backend="sqlite-async", label="LangGraph",
            where="SqliteSaver, async (default)", baseline="raw-full", workloads=("kill",),
            needs="langgraph.checkpoint.sqlite"),
    Variant(key="lg-pg", system="langgraph", backend="pg", label="LangGraph",
            where="PostgresSaver, sync", baseline="raw-pg", workloads=ALL,
            needs="langgraph.checkpoint.postgres", pg=True),
)  # fmt: skip


@dataclass(slots=True)
class Results:
    """Every measurement, by workload and variant key; failures by the same keys."""

    values: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)
    failures: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, workload: str, key: str, value: dict[str, Any]) -> None:
        self.values.setdefault(workload, {}).setdefault(key, []).append(value)

    def fail(self, workload: str, key: str, error: str) -> None:
        self.failures.setdefault(workload, {})[key] = error

    def median(self, workload: str, key: str, metric: str) -> float | None:
        runs = self.values.get(workload, {}).get(key, [])
        return statistics.median(run[metric] for run in runs) if runs else None

    def maximum(self, workload: str, key: str, metric: str) -> float | None:
        runs = self.values.get(workload, {}).get(key, [])
        return max(run[metric] for run in runs) if runs else None


class ChildFailed(Exception):
    """A measuring child exited wrongly; carries the last line of its stderr."""


#: Where the children import ``little_workflow`` from when ``--lw-rev`` is given.
_LIBRARY: list[str] = []


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [*_LIBRARY, str(REPO), env.get("PYTHONPATH")]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
    # LangSmith tracing stays off even if the caller's environment turns it on: it would
    # reach the network and add its own cost to LangGraph's rows. (DBOS only connects
    # out when given a Conductor key, which the harness never passes.)
    env["LANGCHAIN_TRACING_V2"] = "false"
    env["LANGSMITH_TRACING"] = "false"
    return env


def _spawn(job: Job) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.peers._child", job.to_json()],
        # Not the repository: ``-m`` puts the working directory first on sys.path, ahead
        # of PYTHONPATH, and --lw-rev's library must come first.
        cwd=job.dir,
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )


def _answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit code {done.returncode}"]
        raise ChildFailed(lines[-1])
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def measure(job: Job) -> dict[str, Any]:
    """Run one measurement (both processes of a kill) and return its figures."""
    if job.workload != "kill":
        return _answer(_spawn(job))
    first = _spawn(job)
    if first.returncode != -signal.SIGKILL:
        lines = first.stderr.strip().splitlines() or ["no output"]
        raise ChildFailed(
            f"the first process was not killed (exit {first.returncode}): {lines[-1]}"
        )
    start = time.time()
    answer = _answer(_spawn(replace(job, phase="resume")))
    ran, twice = count_calls(job.counter_path, job.steps)
    if ran != job.steps:
        raise ChildFailed(f"only {ran} of {job.steps} steps ran")
    return {
        "start_to_done_s": answer["done_wall"] - start,
        "import_s": answer["import_s"],
        "run_twice": twice,
    }


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """The counts and places every job of this run shares."""

    rounds: int
    steps: int
    warmup: int
    kill_steps: int
    kill_at: int
    history_steps: int
    root: Path
    pg_url: str


def job_for(plan: Plan, variant: Variant, workload: str, serial: int) -> Job:
    """A fresh directory and schema for one measurement."""
    folder = Path(tempfile.mkdtemp(prefix=f"{variant.key}-{workload}-", dir=plan.root))
    steps = {"steps": plan.steps, "kill": plan.kill_steps, "history": plan.history_steps}
    return Job(
        system=variant.system,
        backend=variant.backend,
        workload=workload,
        dir=str(folder),
        steps=steps[workload],
        warmup=plan.warmup if workload == "steps" else 0,
        kill_at=plan.kill_at,
        pg_url=plan.pg_url if variant.pg else "",
        schema=f"{SCHEMA_PREFIX}{os.getpid()}_{serial}" if variant.pg else "",
    )


def run_rounds(plan: Plan, variants: list[Variant], workloads: list[str]) -> Results:
    """Every variant of every workload once per round, the order rotated each round."""
    results = Results()
    serial = 0
    for round_index in range(plan.rounds):
        shift = round_index % len(variants)
        ordered = variants[shift:] + variants[:shift]
        for workload in workloads:
            for variant in ordered:
                if workload not in variant.workloads:
                    continue
                if variant.key in results.failures.get(workload, {}):
                    continue
                serial += 1
                job = job_for(plan, variant, workload, serial)
                try:
                    results.add(workload, variant.key, measure(job))
                except (ChildFailed, subprocess.TimeoutExpired, ValueError) as exc:
                    results.fail(workload, variant.key, str(exc))
                    print(f"  {variant.key} {workload}: failed: {exc}", file=sys.stderr)
                finally:
                    shutil.rmtree(job.dir, ignore_errors=True)
                    if job.schema:
                        drop_schema(plan.pg_url, job.schema)
        print(f"  round {round_index + 1}/{plan.rounds} done", file=sys.stderr, flush=True)
    return results


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if value is None or not base else f"{value / base:.2f}x"


def table(plan: Plan, variants: list[Variant], results: Results) -> list[str]:
    """The one table: a section per workload, medians over rounds."""
    lines: list[str] = []

    def row(variant: Variant, *cells: str) -> None:
        lines.append(f"| {variant.label} | {variant.where} | " + " | ".join(cells) + " |")

    def failed(workload: str, variant: Variant) -> str | None:
        return results.failures.get(workload, {}).get(variant.key)

    def section(workload: str, title: str, header: list[str]) -> list[Variant]:
        shown = [v for v in variants if workload in v.workloads]
        if not shown or workload not in results.values.keys() | results.failures.keys():
            return []
        lines.extend(["", f"**{title}**", ""])
        lines.append("| system | backend | " + " | ".join(header) + " |")
        lines.append("|---|---|" + "---:|" * len(header))
        return shown

    for variant in section(
        "steps",
        f"(1) {plan.steps:,} trivial durable steps in one run",
        ["µs/step", "CPU µs/step", "vs raw", "CPU vs raw"],
    ):
        if error := failed("steps", variant):
            row(variant, f"failed: {error}", "", "", "")
            continue
        us = results.median("steps", variant.key, "us_per_step")
        cpu = results.median("steps", variant.key, "cpu_us_per_step")
        base = variant.baseline
        base_us = results.median("steps", base, "us_per_step") if base else None
        base_cpu = results.median("steps", base, "cpu_us_per_step") if base else None
        per = " (per row)" if variant.backend == "sqlite-batch100" else ""
        row(
            variant,
            _fmt(us, ".1f") + per,
            _fmt(cpu, ".1f"),
            _ratio(us, base_us) if base else "1.00x",
            _ratio(cpu, base_cpu) if base else "1.00x",
        )
    for variant in section(
        "kill",
        f"(2) SIGKILL in step {plan.kill_at + 1} of {plan.kill_steps:,}; a fresh process resumes",
        ["spawn to done s", "of which imports s", "vs raw", "steps run twice (max)"],
    ):
        if error := failed("kill", variant):
            row(variant, f"failed: {error}", "", "", "")
            continue
        seconds = results.median("kill", variant.key, "start_to_done_s")
        base_s = (
            results.median("kill", variant.baseline, "start_to_done_s")
            if variant.baseline
            else None
        )
        row(
            variant,
            _fmt(seconds, ".3f"),
            _fmt(results.median("kill", variant.key, "import_s"), ".3f"),
            _ratio(seconds, base_s) if variant.baseline else "1.00x",
            _fmt(results.maximum("kill", variant.key, "run_twice"), ".0f"),
        )
    for variant in section(
        "history",
        f"(3) {plan.history_steps} steps, each adding a 2 KB message to the history",
        ["µs/step early", "µs/step late", "KB/step 1st half", "KB/step 2nd half", "MB total"],
    ):
        if error := failed("history", variant):
            row(variant, f"failed: {error}", "", "", "", "")
            continue

        def med(metric: str, key: str = variant.key) -> float | None:
            return results.median("history", key, metric)

        row(
            variant,
            _fmt(med("us_first"), ".0f"),
            _fmt(med("us_last"), ".0f"),
            _fmt((med("bytes_per_step_first_half") or 0) / 1024, ".1f"),
            _fmt((med("bytes_per_step_second_half") or 0) / 1024, ".1f"),
            _fmt((med("bytes_total") or 0) / 1e6, ".2f"),
        )
    return lines


def targets(results: Results) -> list[str]:
    """Issue 10's targets for little-workflow, each with today's figure."""
    lines = ["", "**Targets (issue 10)**", ""]

    def check(name: str, value: float | None, limit: float, unit: str) -> None:
        if value is None:
            return
        verdict = "met" if value <= limit else f"missed by {value / limit:.2f}x"
        lines.append(f"- {name}: {value:{unit}} (target <= {limit:{unit}}): {verdict}")

    def ratio(workload: str, key: str, base: str, metric: str) -> float | None:
        ours, raw = results.median(workload, key, metric), results.median(workload, base, metric)
        return None if ours is None or not raw else ours / raw

    check("SQLite FULL, µs/step vs raw", ratio("steps", "lw-full", "raw-full", "us_per_step"),
          1.3, ".2f")  # fmt: skip
    cpu, raw_cpu = (results.median("steps", k, "cpu_us_per_step") for k in ("lw-full", "raw-full"))
    if cpu is not None and raw_cpu is not None:
        check("SQLite FULL, framework CPU µs/step (CPU above raw)", cpu - raw_cpu, 40, ".1f")
    check("SQLite NORMAL, µs/step vs raw",
          ratio("steps", "lw-normal", "raw-normal", "us_per_step"), 2.0, ".2f")  # fmt: skip
    check("Postgres, µs/step vs raw", ratio("steps", "lw-pg", "raw-pg", "us_per_step"), 1.3, ".2f")
    check("map x100, µs/branch vs raw per row at 100 rows/commit",
          ratio("steps", "lw-map", "raw-batch", "us_per_step"), 3.0, ".2f")  # fmt: skip
    check("resume, spawn to done s", results.median("kill", "lw-full", "start_to_done_s"),
          0.35, ".3f")  # fmt: skip
    check("resume, import s", results.median("kill", "lw-full", "import_s"), 0.15, ".3f")
    check("resume, steps run twice", results.maximum("kill", "lw-full", "run_twice"), 1, ".0f")
    for key in ("lw-full", "lw-pg"):
        early, late = (results.median("history", key, m) for m in ("us_first", "us_last"))
        first, second = (
            results.median("history", key, m)
            for m in ("bytes_per_step_first_half", "bytes_per_step_second_half")
        )
        if early and late:
            check(f"history ({key}), µs/step late vs early", late / early, 1.2, ".2f")
        if first and second:
            check(f"history ({key}), bytes/step 2nd vs 1st half", second / first, 1.2, ".2f")
    return lines


def _reexec(args: argparse.Namespace) -> None:
    python = BENCH_VENV / "bin" / "python"
    if args.here or not python.exists() or Path(sys.prefix).resolve() == BENCH_VENV.resolve():
        return
    env = _child_env()
    os.execve(python, [str(python), "-m", "bench.peers", *sys.argv[1:]], env)


def _pg_error(url: str) -> str | None:
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3):
            return None
    except Exception as exc:
        return str(exc).strip().splitlines()[0]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (documented in bench/peers/README.md)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.peers", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a ~1-minute smoke: 1 round, 200 steps, 60-step history",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 5; --quick 1)")
    parser.add_argument(
        "--steps", type=int, help="steps per run in workloads 1 and 2 (default 1000; --quick 200)"
    )
    parser.add_argument(
        "--history-steps", type=int, help="steps in workload 3 (default 300; --quick 60)"
    )
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="steps of the warm-up run before workload 1 (default 20)",
    )
    parser.add_argument(
        "--only",
        default="lw,raw,dbos,langgraph",
        help="comma-separated systems: lw, raw, dbos, langgraph",
    )
    parser.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma-separated: steps, kill, history"
    )
    parser.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="PostgreSQL to use (each measurement gets its own schema there)",
    )
    parser.add_argument("--no-pg", action="store_true", help="skip the Postgres rows")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the temporary databases go (default: the system temp dir)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write every measurement of every round to this file",
    )
    parser.add_argument(
        "--lw-rev",
        default=None,
        help="measure little_workflow as of this git revision (exported to the temp dir), "
        "not the working tree",
    )
    parser.add_argument(
        "--here", action="store_true", help="run with this interpreter, not bench/peers/.venv's"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Measure, print the table; 1 if any measurement failed."""
    args = parse_args(argv)
    _reexec(args)
    # A plain kill then unwinds like Ctrl-C: the temporary files and schemas go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rounds = args.rounds or (1 if args.quick else 5)
    steps = args.steps or (200 if args.quick else 1000)
    history_steps = args.history_steps or (60 if args.quick else 300)
    only = set(args.only.split(","))
    workloads = [w for w in WORKLOADS if w in args.workloads.split(",")]
    pg_error = "--no-pg" if args.no_pg else _pg_error(args.pg_url)
    variants: list[Variant] = []
    skipped: list[str] = []
    for variant in VARIANTS:
        if variant.system not in only:
            continue
        if (
            variant.needs is not None
            and importlib.util.find_spec(variant.needs.split(".")[0]) is None
        ):
            skipped.append(f"{variant.label} ({variant.where}): {variant.needs} not installed")
        elif variant.pg and pg_error is not None:
            skipped.append(f"{variant.label} ({variant.where}): Postgres skipped: {pg_error}")
        else:
            variants.append(variant)
    root = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=args.dir))
    if args.lw_rev is not None:
        _LIBRARY.append(str(export_library(args.lw_rev, root / "lw-src")))
    plan = Plan(
        rounds=rounds,
        steps=steps,
        warmup=args.warmup,
        kill_steps=steps,
        kill_at=steps // 2,
        history_steps=history_steps,
        root=root,
        pg_url=args.pg_url,
    )
    print(
        f"bench.peers: {rounds} round(s), {len(variants)} rows, python "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, files under {root}",
        file=sys.stderr,
        flush=True,
    )
    try:
        # Asked of a child's interpreter, so the table says which library it measured.
        library = subprocess.run(
            [sys.executable, "-c", "import little_workflow; print(little_workflow.__file__)"],
            cwd=root,
            env=_child_env(),
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        results = run_rounds(plan, variants, workloads)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(
        f"little-workflow vs peers: {rounds} interleaved round(s), medians; "
        f"little_workflow {args.lw_rev or 'working tree'} from {library or '(not importable)'}; "
        f"{_versions()}"
    )
    for line in table(plan, variants, results) + targets(results):
        print(line)
    for line in skipped:
        print(f"skipped: {line}")
    if args.json is not None:
        args.json.write_text(json.dumps({"values": results.values, "failures": results.failures}))
    return 1 if results.failures else 0


def _versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for name in (
        "dbos",
        "langgraph",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
    ):
        try:
            found.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    return ", ".join(found) or "no peers installed"


if __name__ == "__main__":
    sys.exit(main())
