"""Run the examples as a user does (the ``little-workflow`` command, from the repository
root), and count what they called from outside the process.

Every example appends one line per model call, tool call and step function to the file
named by ``EXAMPLE_CALL_LOG`` (``examples/providers.py``). ``normalized`` drops the run
ids from those lines, so the calls of two runs of one workflow compare equal;
``committed`` computes the same lines for the calls a run's event log has committed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from examples.providers import Answer, request_key
from little_workflow.events import (
    HarnessModelCalled,
    HarnessModelResponded,
    HarnessSessionCompleted,
    HarnessToolCallFailed,
    HarnessToolCallStarted,
    HarnessToolCallSucceeded,
    OuterLoopCycleCompleted,
    RecordedEvent,
    StepCompleted,
)
from little_workflow.harness.models import ModelRequest
from little_workflow.runtime import DataDir
from little_workflow.storage import PayloadLog, open_store
from little_workflow.testing.fake_models import FakeModelServer, RecordedRequest

REPO = Path(__file__).resolve().parents[2]
COMMAND = Path(sys.executable).with_name("little-workflow")


@dataclass(frozen=True, slots=True)
class Example:
    """Where one test keeps an example's data directory and call log."""

    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def call_log(self) -> Path:
        return self.root / "calls.log"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user's shell: none of the developer's settings leak in."""
        env = {
            name: value
            for name, value in os.environ.items()
            if not name.startswith(("EXAMPLE_", "LITTLE_WORKFLOW_", "OPENAI_", "ANTHROPIC_"))
        }
        return {**env, "EXAMPLE_DELAY": "0", "EXAMPLE_CALL_LOG": str(self.call_log), **extra}

    def command(self, *args: str) -> list[str]:
        return [str(COMMAND), "--data-dir", str(self.data_dir), *args]

    def run(
        self, *args: str, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``little-workflow --data-dir ... ARGS`` from the repository root; it must end."""
        return subprocess.run(
            self.command(*args),
            cwd=REPO,
            env=dict(env or self.env()),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def output(self, *args: str, env: Mapping[str, str] | None = None) -> Any:
        """Run ``ARGS``, which must succeed; the JSON it printed."""
        done = self.run(*args, env=env)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def start(self, *args: str, env: Mapping[str, str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.command(*args),
            cwd=REPO,
            env=dict(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def calls(self) -> list[str]:
        """The call log's lines, in order."""
        if not self.call_log.exists():
            return []
        return self.call_log.read_text(encoding="utf-8").splitlines()

    def events(self, run_id: str) -> list[RecordedEvent]:
        return asyncio.run(_read(DataDir.at(self.data_dir).store_url, run_id))


def run_on_a_real_provider(
    example: Example, args: list[str], answer: Answer, *, provider: str, api_key: str
) -> tuple[subprocess.CompletedProcess[str], list[RecordedRequest]]:
    """``args`` with ``EXAMPLE_PROVIDER=provider`` against a local server of that wire
    format answering like the scripted models; the command's result and the requests."""
    with FakeModelServer(answer, api_key=api_key) as server:
        if provider == "openai":
            wire = {"OPENAI_API_KEY": api_key, "OPENAI_BASE_URL": server.openai_base_url}
        else:
            wire = {"ANTHROPIC_API_KEY": api_key, "ANTHROPIC_BASE_URL": server.url}
        env = example.env(EXAMPLE_PROVIDER=provider, **wire)
        return example.run(*args, env=env), server.requests


async def _read(store: str, run_id: str) -> list[RecordedEvent]:
    """The run's events with their payloads resolved (a model request over the inline
    threshold is a conversation node in the blob store)."""
    opened = await open_store(store)
    try:
        return list(await PayloadLog(opened.events, opened.blobs).read(run_id))
    finally:
        await opened.close()


def normalized(lines: Iterable[str]) -> Counter[str]:
    """The call-log lines as a multiset, without the run ids of step and tool keys."""
    counted: Counter[str] = Counter()
    for line in lines:
        kind, _, key = line.partition(" ")
        if kind in ("step", "tool"):
            key = key.partition("/")[2]
        counted[f"{kind} {key}"] += 1
    return counted


def committed(events: Iterable[RecordedEvent]) -> Counter[str]:
    """The calls the log has committed, as ``normalized`` call-log lines.

    An orchestrator's ``start_workflow`` is left out: the runtime's own tool, it logs
    nothing (its sub-run's calls are in the sub-run's log). An outer loop's committed
    ``supervise()`` answer counts as the supervisor's call.
    """
    requests: dict[tuple[str, str], Any] = {}
    starts: set[tuple[str, str]] = set()
    sessions: set[str] = set()
    done: Counter[str] = Counter()
    for record in events:
        event = record.event
        if isinstance(event, HarnessModelCalled):
            requests[(event.session_id, event.call_id)] = event.request
        elif isinstance(event, HarnessToolCallStarted) and event.tool_name == "start_workflow":
            starts.add((event.session_id, event.call_id))
        elif isinstance(event, HarnessModelResponded):
            request = ModelRequest.model_validate(requests[(event.session_id, event.call_id)])
            done[f"model {request_key(request)}"] += 1
        elif isinstance(event, HarnessToolCallSucceeded | HarnessToolCallFailed):
            if (event.session_id, event.call_id) in starts:
                continue
            done[f"tool {event.session_id}/{event.call_id}"] += 1
        elif isinstance(event, HarnessSessionCompleted):
            sessions.add(event.session_id)
        elif (
            isinstance(event, StepCompleted)
            and event.kind in ("execute", "decision")
            # A decision made by an agent completes its session of the same name first.
            and event.step_path not in sessions
        ):
            # A step function's result is committed with its ``StepCompleted`` only.
            done[f"step {event.step_path}"] += 1
        elif isinstance(event, OuterLoopCycleCompleted):
            done[f"supervise {event.outer_loop_id}#{event.cycle_number}"] += 1
    return done


def sub_run_ids(events: Iterable[RecordedEvent]) -> list[str]:
    """The sub-runs an orchestrator started (recorded before each one started)."""
    ids: list[str] = []
    for record in events:
        event = record.event
        if isinstance(event, HarnessToolCallStarted) and event.tool_name == "start_workflow":
            arguments = event.arguments if isinstance(event.arguments, dict) else {}
            ids.append(str(arguments["subRunId"]))
    return ids


def kill_when(
    process: subprocess.Popen[str], ready: Callable[[], bool], *, timeout: float = 30
) -> None:
    """SIGKILL ``process`` as soon as ``ready()``; fail if it ends or times out first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process.poll() is not None:
            _, err = process.communicate()
            raise AssertionError(f"the run ended before the kill ({process.returncode}): {err}")
        if time.monotonic() > deadline:
            process.kill()
            process.communicate()
            raise AssertionError("the kill point was never reached")
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.communicate()
    assert process.returncode == -signal.SIGKILL
