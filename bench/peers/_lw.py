"""little-workflow: a chain of ``execute`` steps, run and resumed through ``Runtime``.

Backends: ``sqlite-full`` and ``sqlite-normal`` (the embedded store, ``synchronous``
FULL or NORMAL), ``pg`` (PostgreSQL, this job's schema), ``sqlite-map100`` (FULL; the
steps are branches of ``map`` steps over 100 items each, run 100 at a time). Step
bodies are ``async def`` functions registered by name (``Runtime(functions=...)``; the
runtime never imports a private module such as this one): trivial bodies that never block
are what ``async def`` is for, and a plain ``def`` would pay the hop to a worker thread
(about 30 µs of CPU a step; ``python -m bench.steps`` measures both). In the history
workload each step returns its 2 KB message and the run's state (the fold of its
events) is the history; nothing re-records earlier messages.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench.peers._common import Body, Calls, History, Job, message, pg_bytes, sqlite_bytes
from little_workflow.lwir import ExecuteStep, MapStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

# Set by ``run`` before the workflow starts; read by the step bodies.
_body = Body()


async def step(index: int) -> dict[str, int]:
    """A trivial step; in the kill workload it logs its call, and one of them kills."""
    _body.step(index)
    return {"index": index}


async def say(index: int) -> dict[str, str]:
    """One turn of the growing history: this step's new 2 KB message."""
    _body.turn(index)
    return message(index)


def chain(name: str, steps: int, fn: str = "peers.lw:step") -> Workflow:
    """``steps`` execute steps in a row, then the output."""
    body: list[Any] = [ExecuteStep(id=f"s{i}", fn=fn, with_={"index": i}) for i in range(steps)]
    body.append(OutputStep(id="out", value=f"${{steps.s{steps - 1}.output}}"))
    return Workflow(name=name, steps=body)


def maps(name: str, steps: int) -> Workflow:
    """``steps`` branches: ``map`` steps over 100 items each, all 100 at once."""
    body: list[Any] = [
        MapStep(
            id=f"m{m}",
            items=list(range(m * 100, min((m + 1) * 100, steps))),
            concurrency=100,
            body=[ExecuteStep(id="w", fn="peers.lw:step", with_={"index": "${item}"})],
        )
        for m in range((steps + 99) // 100)
    ]
    body.append(OutputStep(id="out", value="${steps.m0.output}"))
    return Workflow(name=name, steps=body)


def _store(job: Job) -> str:
    if job.backend == "pg":
        return f"{job.pg_url}?schema={job.schema}"
    synchronous = "NORMAL" if job.backend == "sqlite-normal" else "FULL"
    return f"sqlite:///{Path(job.dir) / 'lw.db'}?synchronous={synchronous}"


async def _run(job: Job) -> dict[str, Any]:
    runtime = Runtime(
        Path(job.dir) / "data",
        store=_store(job),
        functions={"peers.lw:step": step, "peers.lw:say": say},
        import_functions=False,
    )
    build = maps if job.backend == "sqlite-map100" else chain
    async with runtime:
        if job.workload == "steps":
            if job.warmup:
                await runtime.run(build("warm", job.warmup), None, run_id="warm")
            workflow = build("run", job.steps)
            wall, cpu = time.perf_counter(), time.process_time()
            await runtime.run(workflow, None, run_id="run")
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            return {
                "us_per_step": wall / job.steps * 1e6,
                "cpu_us_per_step": cpu / job.steps * 1e6,
            }
        if job.workload == "kill":
            _body.calls = Calls(job.counter_path)
            if job.phase == "first":
                _body.kill_at = job.kill_at
                await runtime.run(chain("killed", job.steps), None, run_id="killed")
                raise AssertionError("the step at kill_at did not kill this process")
            result = await runtime.resume("killed")
            assert result.status == "completed", result.status
            return {"done_wall": time.time()}
        if job.workload == "history":
            if job.backend == "pg":
                _body.history = History(job.steps, lambda: pg_bytes(job.pg_url, job.schema))
            else:
                _body.history = History(job.steps, lambda: sqlite_bytes(Path(job.dir) / "lw.db"))
            _body.history.bytes_start = _body.history.size()
            await runtime.run(chain("history", job.steps, "peers.lw:say"), None)
            return _body.history.result(_body.history.size())
    raise ValueError(f"unknown workload {job.workload!r}")


def run(job: Job) -> dict[str, Any]:
    """Run ``job`` on little-workflow."""
    return asyncio.run(_run(job))
