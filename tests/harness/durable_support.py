"""Helpers for the durable-harness tests: stores, storage wrappers, a deterministic agent.

The model is a script *function* of the request (the turn is the number of assistant
messages so far), so a process that restarts mid-conversation and asks again gets the
same answer. ``CallLog`` counts model and tool calls in a file, so the counts survive a
process that dies.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from little_workflow.codec import JsonValue
from little_workflow.durable import CheckpointStore, StepLedgerRetention, create_checkpoint_store
from little_workflow.harness import (
    AgentHarness,
    GraphStep,
    HarnessEnvironment,
    HarnessStorage,
    ModelSlot,
    agent,
    tool,
)
from little_workflow.harness.models import ModelRequest, ModelResponse, ScriptedProvider, scripted
from little_workflow.storage import ManagedStorage, StorageAdapter, open_storage
from little_workflow.testing import SimulatedKill

BACKENDS = [
    "memory",
    "file",
    "sqlite",
    pytest.param("postgres", marks=pytest.mark.postgres),
]


async def open_backend(request: pytest.FixtureRequest, kind: str, tmp_path: Path) -> ManagedStorage:
    """A fresh store of ``kind`` (postgres through the ``postgres_url`` fixture)."""
    urls = {
        "memory": "memory://",
        "file": f"file://{tmp_path}/kv",
        "sqlite": f"sqlite:///{tmp_path}/checkpoints.db",
    }
    url = request.getfixturevalue("postgres_url") if kind == "postgres" else urls[kind]
    return await open_storage(url)


class CountingStorage:
    """A ``StorageAdapter`` (without ``get_many``) that counts calls by method."""

    def __init__(self, inner: StorageAdapter) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    def count(self, method: str) -> int:
        return sum(1 for name, _ in self.calls if name == method)

    async def get(self, key: str) -> JsonValue | None:
        self.calls.append(("get", key))
        return await self.inner.get(key)

    async def set(self, key: str, value: JsonValue) -> None:
        self.calls.append(("set", key))
        await self.inner.set(key, value)

    async def delete(self, key: str) -> None:
        self.calls.append(("delete", key))
        await self.inner.delete(key)

    async def list(self, prefix: str = "") -> builtins.list[str]:
        self.calls.append(("list", prefix))
        return await self.inner.list(prefix)


class CountingBatchStorage(CountingStorage):
    """``CountingStorage`` with ``get_many``."""

    async def get_many(self, keys: Iterable[str]) -> dict[str, JsonValue]:
        wanted = list(keys)
        self.calls.append(("get_many", ",".join(wanted)))
        inner = self.inner
        assert hasattr(inner, "get_many")
        result: dict[str, JsonValue] = await inner.get_many(wanted)
        return result


class FailingSaves(CountingStorage):
    """Every ``set`` of a key containing ``fragment`` fails, as a full disk would."""

    def __init__(self, inner: StorageAdapter, fragment: str) -> None:
        super().__init__(inner)
        self.fragment = fragment

    async def set(self, key: str, value: JsonValue) -> None:
        if self.fragment in key:
            self.calls.append(("set-failed", key))
            raise OSError(28, "No space left on device")
        await super().set(key, value)


# --- the agent ---------------------------------------------------------------------------


class CallLog:
    """Appends one line per call to a file: counts that outlive the process.

    With ``kill_on``, the process SIGKILLs itself right after noting that line: the
    call was made (and counted), and nothing after it happens.
    """

    def __init__(self, path: Path, kill_on: str | None = None) -> None:
        self.path = path
        self.kill_on = kill_on

    def note(self, line: str) -> None:
        with self.path.open("a") as file:
            file.write(line + "\n")
            file.flush()
            os.fsync(file.fileno())
        if line == self.kill_on:
            os.kill(os.getpid(), signal.SIGKILL)

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines() if self.path.exists() else []

    def count(self, prefix: str) -> int:
        return sum(1 for line in self.lines() if line.startswith(prefix))


def script(request: ModelRequest) -> Any:
    """Look the person up, score their years, answer: a function of the conversation.

    The person is named by the latest user message; the turn counts the answers since.
    """
    messages = list(request.messages)
    last_user = max(i for i, message in enumerate(messages) if message.role == "user")
    name = messages[last_user].content
    since = messages[last_user + 1 :]
    turn = sum(1 for message in since if message.role == "assistant")
    results = [message.content for message in since if message.role == "tool"]
    if turn == 0:
        return {"tool_calls": [{"id": f"c1_{name}", "name": "lookup", "arguments": {"name": name}}]}
    if turn == 1:
        years = json.loads(results[-1] or "{}")["years"]
        return {
            "tool_calls": [{"id": f"c2_{name}", "name": "score", "arguments": {"years": years}}]
        }
    return f"{name} scores {results[-1]}"


class LoggedProvider:
    """A scripted provider that notes every call in a ``CallLog`` before answering."""

    kind = "scripted"

    def __init__(self, log: CallLog | None, inner: ScriptedProvider | None = None) -> None:
        self.log = log
        self.inner = inner if inner is not None else scripted(script)
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        turn = sum(1 for message in request.messages if message.role == "assistant")
        if self.log is not None:
            self.log.note(f"model turn={turn}")
        return await self.inner.complete(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def make_tools(log: CallLog | None, calls: list[str] | None = None) -> list[Any]:
    """``lookup`` and ``score``, noting their calls in ``log`` and ``calls``."""

    def note(line: str) -> None:
        if log is not None:
            log.note(line)
        if calls is not None:
            calls.append(line)

    @tool
    def lookup(name: str) -> dict[str, Any]:
        """Look a person up.

        Args:
            name: Their name.
        """
        note(f"tool lookup {name}")
        return {"name": name, "years": len(name) + 4}

    @tool
    def score(years: int) -> int:
        """Score years of experience.

        Args:
            years: Years.
        """
        note(f"tool score {years}")
        return years * 10

    return [lookup, score]


def durable_harness(
    storage: StorageAdapter,
    *,
    graph: GraphStep | None = None,
    provider: Any = None,
    tools: Iterable[Any] | None = None,
    retention: StepLedgerRetention | None = None,
    store: CheckpointStore | None = None,
) -> AgentHarness:
    """A harness over a checkpoint store on ``storage`` (the same construction every time)."""
    environment = HarnessEnvironment(
        storage=HarnessStorage(
            checkpoint_store=store or create_checkpoint_store(storage=storage),
            **({} if retention is None else {"step_ledger_retention": retention}),
        )
    )
    return AgentHarness(
        name="durable",
        agent_graph=graph if graph is not None else agent(slot="main"),
        model_slots={
            "main": ModelSlot(provider=provider or LoggedProvider(None), model="m1"),
        },
        tools=make_tools(None) if tools is None else tools,
        environment=environment,
    )


def item_log(ctx: Any) -> list[dict[str, JsonValue]]:
    """The item log as JSON, for comparisons."""
    return [item.to_json() for item in ctx.items.items]


class Crash(SimulatedKill):
    """Stands for the process dying: a ``SimulatedKill``, so nothing records it."""


async def ledger_entries(storage: StorageAdapter, execution_id: str) -> list[dict[str, Any]]:
    """The stored ledger entries of an execution, in key order."""
    keys = await storage.list(f"execution:{execution_id}:ledger:")
    values = [await storage.get(key) for key in keys]
    return [value for value in values if isinstance(value, dict)]


class Steps:
    """Code steps that count their runs; ``crash`` (a name) makes that step die once."""

    def __init__(self, crash: str | None = None, fail: str | None = None) -> None:
        self.runs: list[str] = []
        self.crash = crash
        self.fail = fail

    def _run(self, name: str, value: JsonValue) -> JsonValue:
        self.runs.append(name)
        if self.crash == name:
            self.crash = None
            raise Crash
        if self.fail == name:
            self.fail = None
            raise ValueError(f"{name} failed")
        return value

    def a(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("a", {"a": len(self.runs)})

    def b(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("b", "b")

    def b2(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("b2", "b2")

    def c(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("c", "c")

    def d(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("d", "d")

    def big(self, ctx: Any, _input: Any) -> JsonValue:
        return self._run("big", "x" * 300)

    def enough(self, ctx: Any, output: Any) -> bool:
        self.runs.append("until")
        return sum(1 for name in self.runs if name == "a") >= 2

    def choose(self, ctx: Any) -> bool:
        self.runs.append("choose")
        return True
