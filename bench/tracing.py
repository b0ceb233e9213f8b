"""What recording model usage and tracing spans costs a durable step, on and off.

``python -m bench.tracing [--rounds 3] [--steps 500] [--no-counts] [--no-times]``

Two workloads, each a chain of steps of one LWIR workflow on the embedded store:

- ``steps``: trivial ``execute`` steps (an ``async def`` returning a small dict);
- ``model``: ``agent`` steps of one model call each, against the ``scripted`` provider
  (no delay, a response id given so the provider hashes nothing) reporting a usage, so
  every step records one call with its usage, as a paid call does.

Two figures for each:

1. **Instructions per step** (``valgrind --tool=callgrind``, ``PYTHONHASHSEED=0``; what
   load on a shared machine cannot move). A process runs a chain of ``low`` steps and
   another of ``high``; their difference over ``high - low`` is one step, with imports and
   the store's opening cancelled out. Counted for pairs of revisions that isolate a change
   (the library of each revision unpacked by ``bench/_library.py``, this file's driver run
   against it): the commit that added usage's new counts and content parts to the model
   records (``0ad430b`` .. ``a8f9fd4``) and the one that added the tracing seam
   (``5dd1655``), each against its parent, tracing off; then the working tree with tracing
   off and on (an SDK ``TracerProvider`` exporting every span to an in-memory exporter
   through a ``SimpleSpanProcessor``: the export is in the count).
2. **Seconds per step as a ratio** against raw ``sqlite3`` inserts + commits
   (``synchronous=FULL``, WAL, one commit each) timed in the same child process just
   before and after the chain; the working tree with tracing off and on, children
   interleaved round by round, medians over rounds. The store is FULL here, as in the
   README's headline.

Each child also reports the spans its exporter holds and whether ``opentelemetry`` was
imported: off means no span and no import (the seam's promise in ``_tracing.py``).

Files live under ``.bench-data/`` in the repository (the real disk, never tmpfs).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._library import REPO, export_library
from bench.instructions import callgrind

WORKLOADS = ("steps", "model")

#: Revision pairs whose difference is one change to what a step records, tracing off.
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("usage counts and content parts in model records", "0ad430b~1", "a8f9fd4"),
    ("the tracing seam (spans when a provider is set)", "5dd1655~1", "5dd1655"),
)

#: The child: one chain of ``steps`` steps (``time``: also raw commits) in a fresh store.
#: It runs against whichever ``little_workflow`` is first on ``sys.path``.
_DRIVER = r"""
import asyncio, json, statistics, sys, tempfile, time
sys.path[:0] = [SRC, REPO]
if TRACING:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models._scripted import scripted
from little_workflow.lwir import AgentStep, ExecuteStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

async def step(index):
    return {"index": index}

def reply(request):
    prompt = next(m.content for m in request.messages if m.role == "user")
    return {"id": f"r-{prompt}", "message": {"content": f"answer {prompt}"},
            "usage": {"input_tokens": 120, "output_tokens": 8}}

def chain(name, count):
    if WORKLOAD == "model":
        body = [AgentStep(id=f"s{i}", slot="bench", prompt=f"p{i}", max_turns=1)
                for i in range(count)]
    else:
        body = [ExecuteStep(id=f"s{i}", fn="bench.tracing:step", with_={"index": i})
                for i in range(count)]
    body.append(OutputStep(id="out", value=f"${{steps.s{count - 1}.output}}"))
    return Workflow(name=name, steps=body)

async def main():
    folder = tempfile.mkdtemp(dir=DATA)
    runtime = Runtime(
        folder + "/data",
        store=f"sqlite:///{folder}/lw.db?synchronous={SYNCHRONOUS}",
        functions={"bench.tracing:step": step},
        model_slots={"bench": ModelSlot(provider=scripted(reply), model="m")},
        import_functions=False,
    )
    report = {}
    async with runtime:
        await runtime.run(chain("warm", 10), None, run_id="warm")
        if MODE == "time":
            from bench.steps import raw_commits
            raw_commits(folder + "/raw.db", 50)
            before = raw_commits(folder + "/raw.db", STEPS)
            start = time.perf_counter()
            await runtime.run(chain("run", STEPS), None, run_id="run")
            report["lw_us"] = (time.perf_counter() - start) / STEPS * 1e6
            report["raw_us"] = statistics.mean([before, raw_commits(folder + "/raw.db", STEPS)])
        else:
            await runtime.run(chain("run", STEPS), None, run_id="run")
    report["spans"] = len(exporter.get_finished_spans()) if TRACING else 0
    report["otel_imported"] = "opentelemetry" in sys.modules
    print(json.dumps(report))

asyncio.run(main())
"""


@dataclass(frozen=True)
class Child:
    """One child process's settings: which library, which workload, how measured."""

    src: Path
    workload: str
    steps: int
    tracing: bool = False
    mode: str = "count"  # "count" (under callgrind) or "time"
    synchronous: str = "NORMAL"

    def script(self, data: Path) -> str:
        settings = {
            "SRC": str(self.src),
            "TRACING": self.tracing,
            "WORKLOAD": self.workload,
            "STEPS": self.steps,
            "MODE": self.mode,
            "SYNCHRONOUS": self.synchronous,
            "DATA": str(data),
            "REPO": str(REPO),
        }
        header = "".join(f"{name} = {value!r}\n" for name, value in settings.items())
        return header + _DRIVER


def run_child(child: Child, data: Path) -> tuple[dict[str, Any], int | None]:
    """The child's report, and its instruction count when it ran under callgrind."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=data, delete=False) as driver:
        driver.write(child.script(data))
    command = [sys.executable, driver.name]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    instructions = None
    try:
        if child.mode == "count":
            stdout, instructions = callgrind(command, env=env, timeout=3600)
        else:
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=3600, env=env
            )
            if done.returncode != 0:
                raise SystemExit(f"the child failed ({child}):\n{done.stderr[-3000:]}")
            stdout = done.stdout
    finally:
        os.unlink(driver.name)
    report: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return report, instructions


def check_report(child: Child, report: dict[str, Any]) -> None:
    """Tracing off imports nothing and makes no span; on makes at least a span a step."""
    if child.tracing and report["spans"] < child.steps:
        raise SystemExit(f"{child}: {report['spans']} spans for {child.steps} steps")
    if not child.tracing and (report["spans"] or report["otel_imported"]):
        raise SystemExit(f"{child}: tracing off, but {report}")


@dataclass(frozen=True)
class Sizes:
    """The chain lengths of the two counted processes, per workload."""

    low: int
    high: int


def per_step(src: Path, workload: str, sizes: Sizes, tracing: bool, data: Path) -> int:
    """Instructions of one more step: the difference of two counted processes."""
    counts = []
    for steps in (sizes.low, sizes.high):
        child = Child(src, workload, steps, tracing=tracing)
        report, count = run_child(child, data)
        check_report(child, report)
        assert count is not None
        counts.append(count)
    return (counts[1] - counts[0]) // (sizes.high - sizes.low)


def counts(
    workloads: Sequence[str],
    sizes: dict[str, Sizes],
    data: Path,
    pairs: Sequence[tuple[str, str, str]],
) -> list[str]:
    """Lines of the instruction table: each pair, then the working tree off and on."""
    jobs: list[tuple[str, str, Path, bool]] = []  # (workload, label, src, tracing)
    for _, before, after in pairs:
        for revision in (before, after):
            target = data / f"src-{revision.replace('~', '_')}"
            if not target.exists():
                export_library(revision, target)
            jobs.extend((workload, revision, target, False) for workload in workloads)
    for tracing in (False, True):
        jobs.extend((workload, "tree", REPO, tracing) for workload in workloads)
    # Two at a time: instruction counts do not depend on what else the machine runs.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            (workload, label, tracing): pool.submit(
                per_step, src, workload, sizes[workload], tracing, data
            )
            for workload, label, src, tracing in jobs
        }
        found = {key: future.result() for key, future in futures.items()}
    lines = [
        "| workload | change | before | after | after / before |",
        "|---|---|---:|---:|---:|",
    ]
    for workload in workloads:
        for name, before, after in pairs:
            low, high = found[(workload, before, False)], found[(workload, after, False)]
            lines.append(
                f"| {workload} | {name} ({before} -> {after}) | {low:,} | {high:,} "
                f"| {high / low:.3f} |"
            )
        off, on = found[(workload, "tree", False)], found[(workload, "tree", True)]
        lines.append(
            f"| {workload} | working tree: tracing off -> on (in-memory exporter) "
            f"| {off:,} | {on:,} | {on / off:.3f} |"
        )
    return lines


def times(workloads: Sequence[str], steps: int, rounds: int, data: Path) -> list[str]:
    """Lines of the time table: the working tree off and on, each against raw commits."""
    ratios: dict[tuple[str, bool], list[float]] = {}
    microseconds: dict[tuple[str, bool], list[float]] = {}
    raw: list[float] = []
    for _ in range(rounds):
        for workload in workloads:
            for tracing in (False, True):
                child = Child(REPO, workload, steps, tracing, mode="time", synchronous="FULL")
                report, _ = run_child(child, data)
                check_report(child, report)
                ratios.setdefault((workload, tracing), []).append(
                    report["lw_us"] / report["raw_us"]
                )
                microseconds.setdefault((workload, tracing), []).append(report["lw_us"])
                raw.append(report["raw_us"])
    median_raw = statistics.median(raw)
    lines = [
        f"raw sqlite3 insert + commit (FULL), median of the children: {median_raw:.0f} µs",
        "| workload | tracing | µs per step | per step vs raw | on / off |",
        "|---|---|---:|---:|---:|",
    ]
    for workload in workloads:
        off = statistics.median(ratios[(workload, False)])
        for tracing in (False, True):
            ratio = statistics.median(ratios[(workload, tracing)])
            us = statistics.median(microseconds[(workload, tracing)])
            lines.append(
                f"| {workload} | {'on' if tracing else 'off'} | {us:.0f} | {ratio:.2f}x "
                f"| {ratio / off:.3f} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--steps", type=int, default=500, help="steps of a timed chain")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--no-counts", action="store_true", help="skip the callgrind counts")
    parser.add_argument("--no-times", action="store_true", help="skip the timed rounds")
    parser.add_argument(
        "--small", action="store_true", help="short chains for the counts (a smoke run)"
    )
    args = parser.parse_args(argv)
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = set(workloads) - set(WORKLOADS)
    if unknown or not workloads:
        parser.error(f"--workloads: choose from {', '.join(WORKLOADS)}, not {sorted(unknown)}")
    root = REPO / ".bench-data"
    root.mkdir(exist_ok=True)
    data = Path(tempfile.mkdtemp(prefix="tracing-", dir=root))
    try:
        if not args.no_times:
            print("\n".join(times(workloads, args.steps, args.rounds, data)))
        if not args.no_counts:
            if shutil.which("valgrind") is None:
                raise SystemExit("the counts need valgrind (or pass --no-counts)")
            sizes = (
                {"steps": Sizes(20, 40), "model": Sizes(10, 20)}
                if args.small
                else {"steps": Sizes(100, 600), "model": Sizes(50, 300)}
            )
            print("instructions per step (callgrind, NORMAL):")
            print("\n".join(counts(workloads, sizes, data, PAIRS)))
    finally:
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
