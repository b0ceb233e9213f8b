"""Tracing: spans for runs, steps, model and tool calls, waits and sub-runs.

Every test but the last two sets a real SDK tracer provider with the in-memory exporter
(and puts the API's globals back after, so no other test runs traced). The kill test
SIGKILLs a real process mid-step and resumes the run in another: one trace across both.
The last proves that without a tracer provider nothing of OpenTelemetry is imported.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from little_workflow.errors import RunWaitingError
from little_workflow.events import RunStarted
from little_workflow.runtime import Runtime
from tests.code_first.test_code_agents import judged
from tests.runtime.session_support import make
from tests.runtime.support import Crash, wait_for_file
from tests.test_readme import REPO
from tests.tracing.flows import HOLD_ENV, parent

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        # The API sets its provider once per process; a test may set it again.
        trace._TRACER_PROVIDER = None
        trace._TRACER_PROVIDER_SET_ONCE = Once()


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def _trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


async def test_steps_a_sub_run_and_a_wait_are_spans_and_a_resume_continues_the_trace(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    async with Runtime(tmp_path / "d") as rt:
        with pytest.raises(RunWaitingError):
            await rt.run(parent, {"n": 2}, run_id="r1")
        first = spans.get_finished_spans()
        spans.clear()
        await rt.send("r1", "go", "yes")
        result = await rt.resume("r1")
        second = spans.get_finished_spans()
        [started] = [r.event for r in await rt.events.read("r1") if isinstance(r.event, RunStarted)]
    assert result.output == {"sub": 8, "answer": "yes"}

    # The first pass: the run, its step, the sub-run (its own run and step under it), the
    # wait that parked it.
    assert sorted(s.name for s in first) == [
        "run child",
        "run parent",
        "step double",
        "step double",
        "sub_run child",
        "wait go",
    ]
    [run] = [s for s in first if s.name == "run parent"]
    assert _parent(run) is None
    assert run.attributes is not None
    assert run.attributes["little_workflow.run.id"] == "r1"
    assert run.attributes["little_workflow.run.pass"] == 1
    assert run.attributes["little_workflow.run.status"] == "waiting"
    assert {_trace_id(s) for s in first} == {_trace_id(run)}
    step = next(
        s
        for s in first
        if s.name.startswith("step ")
        and s.attributes
        and s.attributes["little_workflow.run.id"] == "r1"
    )
    assert _parent(step) == _id(run)
    assert step.attributes is not None
    assert step.attributes["little_workflow.step.kind"] == "execute"
    sub_run = next(s for s in first if s.name.startswith("sub_run "))
    assert _parent(sub_run) == _id(run)
    assert sub_run.attributes is not None
    child_id = sub_run.attributes["little_workflow.sub_run.id"]
    child_run = next(
        s
        for s in first
        if s.name.startswith("run ")
        and s.attributes
        and s.attributes["little_workflow.run.id"] == child_id
    )
    assert _parent(child_run) == _id(sub_run)
    child_steps = [
        s
        for s in first
        if s.name.startswith("step ")
        and s.attributes
        and s.attributes["little_workflow.run.id"] == child_id
    ]
    assert [_parent(s) for s in child_steps] == [_id(child_run)]
    wait = next(s for s in first if s.name.startswith("wait "))
    assert _parent(wait) == _id(run)
    assert wait.attributes is not None
    assert wait.attributes["little_workflow.waiting"] is True
    assert wait.attributes["little_workflow.wait.event"] == "go"

    # The trace is recorded with the run: the resume's pass is in it, under the first pass.
    assert started.trace_context is not None
    assert started.trace_context.startswith(f"00-{_trace_id(run):032x}-{_id(run):016x}-")
    [resumed] = [s for s in second if s.name.startswith("run ")]
    assert _trace_id(resumed) == _trace_id(run)
    assert _parent(resumed) == _id(run)
    assert resumed.attributes is not None
    assert resumed.attributes["little_workflow.run.pass"] == 2
    assert resumed.attributes["little_workflow.run.resumed"] is True
    assert resumed.attributes["little_workflow.run.status"] == "completed"
    # Replayed steps are marked on the pass, not timed as steps: no step span now.
    replayed = [e for e in resumed.events if e.name == "little_workflow.step.replayed"]
    assert [e.attributes["little_workflow.step.path"] for e in replayed if e.attributes] == [
        step.attributes["little_workflow.step.path"],
        sub_run.attributes["little_workflow.step.path"],
    ]
    assert not [s for s in second if s.name.startswith(("step ", "sub_run "))]
    # The wait ends in this pass.
    [ended] = [s for s in second if s.name.startswith("wait ")]
    assert _parent(ended) == _id(resumed)
    assert ended.attributes is not None
    assert "little_workflow.waiting" not in ended.attributes


async def test_model_and_tool_calls_follow_the_genai_conventions(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    rt, _provider, _tools = make(tmp_path)
    async with rt:
        result = await rt.run(judged, {"who": "Ada"}, run_id="run_agent")
    assert result.output == "Ada scores 70"
    finished = spans.get_finished_spans()
    [step] = [s for s in finished if s.name.startswith("step ")]
    models = [
        s for s in finished if s.attributes and s.attributes.get("gen_ai.operation.name") == "chat"
    ]
    tools = [
        s
        for s in finished
        if s.attributes and s.attributes.get("gen_ai.operation.name") == "execute_tool"
    ]
    assert len(models) == 3
    assert [s.attributes["gen_ai.tool.name"] for s in tools if s.attributes] == ["lookup", "score"]
    for span in (*models, *tools):
        assert _trace_id(span) == _trace_id(step)
        assert span.attributes is not None
        assert span.attributes["little_workflow.run.id"] == "run_agent"
    for span in models:
        assert span.kind is trace.SpanKind.CLIENT
        attributes = span.attributes
        assert attributes is not None
        assert attributes["gen_ai.provider.name"] == "scripted"
        assert attributes["gen_ai.system"] == "scripted"
        assert isinstance(attributes["gen_ai.request.model"], str)
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
        assert attributes["gen_ai.response.finish_reasons"] in (("tool_calls",), ("stop",))
    assert [s.attributes["gen_ai.response.finish_reasons"] for s in models if s.attributes] == [
        ("tool_calls",),
        ("tool_calls",),
        ("stop",),
    ]
    # Each call nests under the agent step that made it (through the harness's spans).
    ids = {_id(s): s for s in finished}
    for span in (*models, *tools):
        parent_span: ReadableSpan | None = span
        while parent_span is not None and parent_span is not step:
            parent_id = _parent(parent_span)
            parent_span = None if parent_id is None else ids.get(parent_id)
        assert parent_span is step, span.name


async def test_a_resumed_agent_marks_its_replayed_calls_and_times_only_new_ones(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    rt, _provider, tools = make(tmp_path)
    tools.crash_at = "score"  # killed in the second tool call, two model answers committed
    async with rt:
        with pytest.raises(Crash):
            await rt.run(judged, {"who": "Ada"}, run_id="run_agent")
    spans.clear()
    rt, provider, _tools = make(tmp_path)
    async with rt:
        result = await rt.resume("run_agent")
    assert result.output == "Ada scores 70"
    assert provider.calls == 1
    finished = spans.get_finished_spans()
    [step] = [s for s in finished if s.name.startswith("step ")]
    replayed = [
        e.attributes["little_workflow.call.path"]
        for e in step.events
        if e.name == "little_workflow.call.replayed" and e.attributes
    ]
    calls = [
        s
        for s in finished
        if s.attributes and s.attributes.get("gen_ai.operation.name") in ("chat", "execute_tool")
    ]
    # Only the tool call the kill cut off and the last model turn are timed now, under
    # the step that runs again...
    assert [(s.attributes or {}).get("gen_ai.tool.name") for s in calls] == ["score", None]
    assert {_parent(s) for s in calls} == {_id(step)}
    # ...and the calls committed before the kill are events on that step, not spans.
    assert replayed == [
        "agent.turns[0].model",
        "agent.turns[0].tools[call_lookup]",
        "agent.turns[1].model",
    ]


def _read_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_killed_run_resumed_in_another_process_is_one_trace(tmp_path: Path) -> None:
    data, marker = tmp_path / "data", tmp_path / "held"
    before, after = tmp_path / "before.jsonl", tmp_path / "after.jsonl"
    env = {**os.environ, HOLD_ENV: str(marker)}
    command = [sys.executable, "-m", "tests.tracing.child", str(data)]
    with subprocess.Popen(
        [*command, str(before), "run"], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            wait_for_file(marker, process)
            while not marker.read_text():
                pass
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
    env.pop(HOLD_ENV)
    done = subprocess.run(
        [*command, str(after), "resume"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == 6

    killed, resumed = _read_spans(before), _read_spans(after)
    # The killed pass ended one step (its own span never ended: nothing exported it).
    [first_step] = [s for s in killed if s["name"].startswith("step ")]
    assert not [s for s in killed if s["name"].startswith("run ")]
    [resumed_pass] = [s for s in resumed if s["name"].startswith("run ")]
    assert {s["trace_id"] for s in killed + resumed} == {first_step["trace_id"]}
    # The resumed pass sits under the killed one, whose span the first step's parent is.
    assert resumed_pass["parent"] == first_step["parent"]
    assert resumed_pass["attributes"]["little_workflow.run.pass"] == 2
    replayed = [e for e in resumed_pass["events"] if e["name"] == "little_workflow.step.replayed"]
    assert [e["attributes"]["little_workflow.step.path"] for e in replayed] == [
        first_step["attributes"]["little_workflow.step.path"]
    ]
    # The step the kill cut short runs again, and the last for the first time.
    steps = [s for s in resumed if s["name"].startswith("step ")]
    assert len(steps) == 2
    assert all(s["parent"] == resumed_pass["span_id"] for s in steps)


async def test_a_submitted_run_and_its_queued_sub_runs_are_one_trace_across_processes(
    tmp_path: Path, spans: InMemorySpanExporter
) -> None:
    data, worker_spans = tmp_path / "data", tmp_path / "worker.jsonl"
    spread = REPO / "tests" / "workers" / "spread.yaml"
    async with Runtime(data) as rt:
        await rt.submit(spread, {"items": [1, 2, 3]}, run_id="run_spread")
        worker_process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "tests.tracing.worker", str(data), str(worker_spans)),
            "run_spread",
            cwd=REPO,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(worker_process.communicate(), 90)
        assert worker_process.returncode == 0, stderr.decode()
        state = await rt.get_state("run_spread")
        children = sorted(r.sub_run_id for r in state.steps.values() if r.sub_run_id)
        recorded = {}
        for run_id in ("run_spread", *children):
            [first] = await rt.events.read(run_id, limit=1)
            assert isinstance(first.event, RunStarted)
            recorded[run_id] = first.event.trace_context
    assert state.output == [1, 4, 9]
    assert len(children) == 3

    # The submit, in this process, roots the trace: nothing was traced around it.
    [submit] = spans.get_finished_spans()
    assert submit.name == "submit spread"
    assert _parent(submit) is None
    trace_id = f"{_trace_id(submit):032x}"
    assert recorded["run_spread"] is not None
    assert recorded["run_spread"].startswith(f"00-{trace_id}-{_id(submit):016x}-")
    # Everything the worker process did is in that trace.
    worker = _read_spans(worker_spans)
    assert {s["trace_id"] for s in worker} == {trace_id}
    passes = {
        s["attributes"]["little_workflow.run.id"]: s for s in worker if s["name"].startswith("run ")
    }
    assert set(passes) == {"run_spread", *children}
    assert passes["run_spread"]["parent"] == f"{_id(submit):016x}"
    # Each queued sub-run recorded its parent's sub-run span, and its pass sits under it,
    # whichever of the worker's slots drove it.
    sub_runs = {
        s["attributes"]["little_workflow.sub_run.id"]: s
        for s in worker
        if s["name"].startswith("sub_run ")
    }
    assert set(sub_runs) == set(children)
    for child in children:
        assert sub_runs[child]["parent"] == passes["run_spread"]["span_id"]
        assert (recorded[child] or "").startswith(f"00-{trace_id}-{sub_runs[child]['span_id']}-")
        assert passes[child]["parent"] == sub_runs[child]["span_id"]


def test_without_a_tracer_provider_nothing_of_opentelemetry_is_imported(tmp_path: Path) -> None:
    code = (
        "import asyncio, sys\n"
        "from little_workflow.runtime import Runtime\n"
        "from tests.tracing.flows import chain\n"
        "async def main():\n"
        f"    async with Runtime({str(tmp_path / 'd')!r}) as rt:\n"
        "        await rt.run(chain, {'n': 1}, run_id='r')\n"
        "asyncio.run(main())\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')"
        " or m == 'little_workflow._otel'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
