"""Resuming a killed run through the CLI, spawn to done, against baselines of the same round.

Run: ``python -m bench.cli_resume [--rounds 7] [--steps 1000] [--lw-rev REV]``

Issue 23's target: ``little-workflow resume`` of a 1,000-step run SIGKILLed in step 501
done in at most 0.3 s, from the process's spawn to its exit. A chain of ``--steps``
trivial ``execute`` steps (``async def``, default store: SQLite WAL, ``synchronous``
FULL) runs through ``little-workflow run`` until the body of step ``N/2`` (0-based)
SIGKILLs its own process; that data directory is kept as a template. Each round then
times, in fresh processes, one after the other:

* ``python -c pass``: the interpreter's floor.
* ``raw sqlite3``: an interpreter that opens a copy of a raw log holding the first
  ``N/2`` rows (same WAL and FULL, one row per step) and commits the other ``N/2`` one
  insert + commit each: the fsyncs any durable resume of this run pays.
* ``little-workflow resume``: the console script next to this interpreter, on a fresh
  copy of the template; its output and the steps it ran are checked (``N/2`` steps run,
  the one in flight at the kill included).
* the same with ``-X importtime``: the sum of its top-level imports (``importtime``'s own
  overhead included, so only a comparison of trees) and how many modules it imported.

With ``--lw-rev REV`` the same resume of ``REV``'s ``little_workflow/`` (``git archive``,
first on ``PYTHONPATH``, as ``bench.peers --lw-rev``) is timed in the same rounds, right
after the working tree's, on its own template: a before/after under the same load.

Reported per case: best and median wall seconds, median CPU seconds (user + system of
the child), and the medians' ratios to ``python -c pass`` and to raw sqlite3. On a
shared machine read the ratios and the "above raw" column, not single figures. Files
live under ``.bench-data/`` in the repository (the real disk: fsync is measured).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench._library import export_library

REPO = Path(__file__).resolve().parent.parent
TARGET_S = 0.3

# The step bodies, in a module of their own in the measurement directory: the CLI
# imports them by name, and they import nothing the library would not.
STEPS_MODULE = """\
import os, signal

KILL_AT = int(os.environ.get("CLI_RESUME_KILL_AT", "-1"))
_calls = os.open(os.environ["CLI_RESUME_CALLS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)


async def step(index: int) -> dict[str, int]:
    os.write(_calls, f"{index}\\n".encode())
    if index == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"index": index}
"""

# The raw baseline's child: the rows a resume still has to commit, one commit each.
RAW_CHILD = """\
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=WAL")
conn.execute("PRAGMA synchronous=FULL")
start = conn.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM events").fetchone()[0]
for seq in range(start, int(sys.argv[2])):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(
        "INSERT INTO events (run_id, seq, type, ts, data) VALUES (?, ?, ?, ?, ?)",
        ("killed", seq, "StepCompleted", 0.0, '{"output": {"index": %d}}' % seq),
    )
    conn.execute("COMMIT")
"""


@dataclass(slots=True)
class Samples:
    """Wall and CPU seconds of one case, one pair per round."""

    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Tree:
    """A ``little_workflow`` to measure: its label, its ``PYTHONPATH`` head, its template."""

    label: str
    library: Path | None
    template: Path


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(argv: list[str], env: dict[str, str], samples: Samples) -> str:
    cpu, wall = _children_cpu(), time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    samples.wall.append(time.perf_counter() - wall)
    samples.cpu.append(_children_cpu() - cpu)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def _env(tree: Tree | None, work: Path, calls: Path) -> dict[str, str]:
    env = {**os.environ, "CLI_RESUME_CALLS": str(calls)}
    # Warm ``.pyc`` files, as an installed program has them.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in ("CLI_RESUME_KILL_AT", "LITTLE_WORKFLOW_DATA_DIR", "LITTLE_WORKFLOW_STORE"):
        env.pop(name, None)
    head = [] if tree is None or tree.library is None else [str(tree.library)]
    env["PYTHONPATH"] = os.pathsep.join([*head, str(work)])
    return env


def _cli() -> list[str]:
    """``little-workflow`` as a user runs it: the console script beside this interpreter."""
    script = Path(sys.executable).with_name("little-workflow")
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "little_workflow"]


def _killed_template(tree: Tree, work: Path, steps: int) -> None:
    """Run the chain through the CLI until step ``steps // 2`` kills it; keep the data."""
    calls = work / f"calls-{tree.label}"
    env = {**_env(tree, work, calls), "CLI_RESUME_KILL_AT": str(steps // 2)}
    argv = [*_cli(), "--data-dir", str(tree.template), "run", str(work / "chain.json")]
    done = subprocess.run(
        [*argv, "--run-id", "killed"], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != -9:
        raise RuntimeError(f"the run was not killed (exit {done.returncode}): {done.stderr}")


def _raw_template(path: Path, steps: int) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, type TEXT NOT NULL,"
        " ts DOUBLE PRECISION NOT NULL, data TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
    )
    with conn:
        conn.executemany(
            "INSERT INTO events VALUES ('killed', ?, 'StepCompleted', 0.0, '{}')",
            [(seq,) for seq in range(steps // 2)],
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


def _imports(stderr: str) -> tuple[float, int]:
    """(seconds of top-level imports, modules imported) from ``-X importtime`` output."""
    total, modules = 0.0, 0
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "| cumulative |" in line:
            continue
        modules += 1
        _, cumulative, name = line[len("import time:") :].split("|")
        if not name.startswith("  "):  # one space after the bar: a top-level import
            total += int(cumulative) / 1e6
    return total, modules


class Bench:
    """The rounds: every case once per round, in the same order."""

    def __init__(self, work: Path, steps: int, trees: list[Tree]) -> None:
        self.work, self.steps, self.trees = work, steps, trees
        self.samples: dict[str, Samples] = {}
        self.imports: dict[str, list[tuple[float, int]]] = {t.label: [] for t in trees}

    def case(self, name: str) -> Samples:
        return self.samples.setdefault(name, Samples())

    def round(self) -> None:
        calls = self.work / "calls"
        env = _env(None, self.work, calls)
        _timed([sys.executable, "-c", "pass"], env, self.case("python -c pass"))
        raw = self.work / "raw-run.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{raw}{suffix}").unlink(missing_ok=True)
        shutil.copy(self.work / "raw.db", raw)
        argv = [sys.executable, "-c", RAW_CHILD, str(raw), str(self.steps)]
        _timed(argv, env, self.case("raw sqlite3, the same commits"))
        for tree in self.trees:
            self._resume(tree, f"little-workflow resume ({tree.label})")
            self._resume(tree, None)

    def _resume(self, tree: Tree, case: str | None) -> None:
        data, calls = self.work / "data", self.work / "calls"
        shutil.rmtree(data, ignore_errors=True)
        shutil.copytree(tree.template, data)
        calls.unlink(missing_ok=True)
        env = _env(tree, self.work, calls)
        argv = [*_cli(), "--data-dir", str(data), "resume", "killed"]
        if case is not None:
            output = _timed(argv, env, self.case(case))
            if json.loads(output) != {"index": self.steps - 1}:
                raise RuntimeError(f"unexpected output {output!r}")
            ran = calls.read_text().split()
            if ran != [str(i) for i in range(self.steps // 2, self.steps)]:
                raise RuntimeError(f"the resume ran {len(ran)} steps, not {self.steps // 2}")
            return
        argv = [argv[0], "-X", "importtime", *argv[1:]]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
        self.imports[tree.label].append(_imports(done.stderr))

    def report(self) -> None:
        floor = statistics.median(self.samples["python -c pass"].wall)
        raw = self.samples["raw sqlite3, the same commits"]
        raw_median = statistics.median(raw.wall)
        print(
            "| case | best s | median s | median CPU s | vs `python -c pass` | vs raw "
            "| above raw s |\n|---|---:|---:|---:|---:|---:|---:|"
        )
        for name, samples in self.samples.items():
            median = statistics.median(samples.wall)
            above = statistics.median(w - r for w, r in zip(samples.wall, raw.wall, strict=True))
            print(
                f"| {name} | {min(samples.wall):.3f} | {median:.3f} "
                f"| {statistics.median(samples.cpu):.3f} | {median / floor:.1f}x "
                f"| {median / raw_median:.2f}x | {above:+.3f} |"
            )
        print("\n| tree | imports s (`-X importtime`, median) | modules imported |")
        print("|---|---:|---:|")
        for label, found in self.imports.items():
            seconds = statistics.median(s for s, _ in found)
            print(f"| {label} | {seconds:.3f} | {found[0][1]} |")
        print()
        for tree in self.trees:
            median = statistics.median(self.samples[f"little-workflow resume ({tree.label})"].wall)
            verdict = "met" if median <= TARGET_S else f"missed by {median / TARGET_S:.2f}x"
            print(f"- {tree.label}: resume, spawn to done {median:.3f} s (target <= 0.3): ", end="")
            print(verdict)


def main(rounds: int, steps: int, revision: str | None) -> None:
    base = REPO / ".bench-data"
    base.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base) as directory:
        work = Path(directory)
        (work / "cli_resume_steps.py").write_text(STEPS_MODULE)
        body: list[dict[str, object]] = [
            {"id": f"s{i}", "kind": "execute", "fn": "cli_resume_steps:step", "with": {"index": i}}
            for i in range(steps)
        ]
        body.append({"id": "out", "kind": "output", "value": f"${{steps.s{steps - 1}.output}}"})
        (work / "chain.json").write_text(json.dumps({"lwir": 1, "name": "chain", "steps": body}))
        _raw_template(work / "raw.db", steps)
        trees = [Tree(label="working tree", library=None, template=work / "template")]
        if revision is not None:
            library = export_library(revision, work / "lw-src")
            trees.append(Tree(label=revision, library=library, template=work / "template-rev"))
        for tree in trees:
            _killed_template(tree, work, steps)
        bench = Bench(work, steps, trees)
        bench.round()  # warm-up: .pyc files, the page cache; not reported
        bench.samples.clear()
        bench.imports = {tree.label: [] for tree in trees}
        for _ in range(rounds):
            bench.round()
    print(
        f"{rounds} rounds, {steps} steps killed in step {steps // 2 + 1}, Python "
        f"{sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f}\n"
    )
    bench.report()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lw-rev", default=None, help="also time this revision's library")
    options = parser.parse_args()
    main(options.rounds, options.steps, options.lw_rev)
