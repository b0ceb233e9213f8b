"""Asking the person: a durable prompt, waiting or suspending, answers by API or command.

The prompt is in the snapshot's ask-user queue as soon as it is asked; the execution
waits for the answer (in this process, or polling the store) or suspends (raises
``AwaitingAnswerError``, so the process may exit). The answer, given with
``harness.answer()`` or ``little-workflow answer``, is recorded, and a later resume
replays it. Processes that exit and come back are in ``test_processes.py``.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import AwaitingAnswerError
from little_workflow.harness import (
    AgentHarness,
    Context,
    agent,
    ask_user,
    sequence,
    spawn,
    tool,
)
from little_workflow.storage import ManagedStorage, StorageAdapter, create_in_memory_storage
from tests.harness.durable_support import (
    BACKENDS,
    Crash,
    LoggedProvider,
    durable_harness,
    ledger_entries,
    make_tools,
    open_backend,
)

QUESTION = "Whom should I score?"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=BACKENDS)
async def storage(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ManagedStorage]:
    store = await open_backend(request, request.param, tmp_path)
    yield store
    await store.close()


def asking(storage: StorageAdapter, *, suspend: bool, **kwargs: object) -> AgentHarness:
    graph = sequence([ask_user(QUESTION, id="ask", suspend=suspend), agent(slot="main")], id="flow")
    return durable_harness(storage, graph=graph, **kwargs)  # type: ignore[arg-type]


async def until_asked(ctx: Context) -> None:
    while not ctx.ask_user:  # noqa: ASYNC110 - the execution is a task of this loop
        await asyncio.sleep(0)


# --- waiting ----------------------------------------------------------------------------


async def test_waiting_for_an_answer_given_in_this_process(storage: ManagedStorage) -> None:
    harness = asking(storage, suspend=False)
    ctx = harness.create_context(id="exec_wait")
    task = asyncio.create_task(harness.execute(ctx, "go"))
    await until_asked(ctx)
    [prompt] = ctx.ask_user
    assert (prompt.id, prompt.input) == ("flow.ask", QUESTION)
    raw: Any = await storage.get("execution:exec_wait:snapshot")
    assert [p["id"] for p in raw["askUser"]] == ["flow.ask"]

    await harness.answer("exec_wait", "flow.ask", "Ada")
    assert await asyncio.wait_for(task, timeout=10) == "Ada scores 70"
    assert ctx.ask_user == []
    answer = [i for i in ctx.items.items if i.call_path == "flow.ask"]
    assert [(i.message.role, i.message.content) for i in answer] == [("user", "Ada")]
    [entry] = [e for e in await ledger_entries(storage, "exec_wait") if e["path"] == "flow.ask"]
    assert entry["output"] == "Ada"
    final = await storage.get("execution:exec_wait:snapshot")
    assert isinstance(final, dict)
    assert final["askUser"] == []


async def test_waiting_for_an_answer_given_through_the_store(storage: ManagedStorage) -> None:
    """Another harness on the same store (another process, as far as it knows) answers."""
    harness = asking(storage, suspend=False)
    ctx = harness.create_context(id="exec_poll")
    task = asyncio.create_task(harness.execute(ctx, "go"))
    await until_asked(ctx)
    await asking(storage, suspend=False).answer("exec_poll", "flow.ask", "Bo")
    assert await asyncio.wait_for(task, timeout=10) == "Bo scores 60"


# --- suspending -------------------------------------------------------------------------


async def test_suspend_then_answer_then_resume(storage: ManagedStorage) -> None:
    harness = asking(storage, suspend=True)
    ctx = harness.create_context(id="exec_sus")
    with pytest.raises(AwaitingAnswerError) as raised:
        await harness.execute(ctx, "go")
    assert raised.value.execution_id == "exec_sus"
    assert raised.value.prompt_id == "flow.ask"
    assert raised.value.question == QUESTION
    assert ctx.frontier == [("flow", "go"), ("flow.ask", None)]

    # A new host: the prompt is still there to answer.
    restarted = asking(storage, suspend=True)
    pending = await restarted.restore("exec_sus")
    assert pending is not None
    assert [(p.id, p.input) for p in pending.ask_user] == [("flow.ask", QUESTION)]
    assert pending.ask_user[0].created_at == ctx.ask_user[0].created_at
    with pytest.raises(AwaitingAnswerError):
        await restarted.resume("exec_sus")  # still unanswered: suspends again

    await restarted.answer("exec_sus", "flow.ask", "Ada")
    provider = LoggedProvider(None)
    outcome = await asking(storage, suspend=True, provider=provider).resume("exec_sus")
    assert outcome is not None
    resumed, output = outcome
    assert output == "Ada scores 70"
    assert resumed.ask_user == []
    assert provider.calls == 3

    # Any later resume replays it all: no question, no model call.
    again = LoggedProvider(None)
    later = await asking(storage, suspend=True, provider=again).resume("exec_sus")
    assert later is not None
    assert later[1] == "Ada scores 70"
    assert again.calls == 0


async def test_suspend_then_answer_then_execute_the_same_context() -> None:
    """In one process: a suspended context continues with execute() once answered."""
    storage = create_in_memory_storage()
    harness = asking(storage, suspend=True)
    ctx = harness.create_context(id="exec_same")
    with pytest.raises(AwaitingAnswerError):
        await harness.execute(ctx, "go")
    await harness.answer("exec_same", "flow.ask", "Bo")
    assert await harness.execute(ctx) == "Bo scores 60"
    assert ctx.frontier == []
    assert [m.content for m in ctx.items.messages][:2] == ["go", "Bo"]


async def test_a_recorded_answer_replays_from_the_ledger(storage: ManagedStorage) -> None:
    """Once the ask step completed, its answer comes from the ledger, not the answer key."""
    calls: list[str] = []
    lookup, _ = make_tools(None, calls)

    @tool
    def score(years: int) -> int:
        """Score years.

        Args:
            years: Years.
        """
        raise Crash

    harness = asking(storage, suspend=True, tools=[lookup, score])
    await harness.answer("exec_led", "flow.ask", "Ada")  # answered before it is asked
    with pytest.raises(Crash):
        await harness.execute(harness.create_context(id="exec_led"), "go")
    for key in await storage.list("execution:exec_led:answer:"):
        await storage.delete(key)
    outcome = await asking(storage, suspend=True).resume("exec_led")
    assert outcome is not None
    assert outcome[1] == "Ada scores 70"
    assert calls == ["tool lookup Ada"]


async def test_a_spawned_agent_asks_on_the_executions_queue() -> None:
    storage = create_in_memory_storage()
    child = sequence([ask_user("Which year?", id="ask", suspend=True)], id="child")
    harness = durable_harness(storage, graph=sequence([spawn(child, "start", id="helper")]))
    ctx = harness.create_context(id="exec_parent")
    with pytest.raises(AwaitingAnswerError) as raised:
        await harness.execute(ctx, "go")
    assert raised.value.execution_id == "exec_parent"
    prompt_id = raised.value.prompt_id
    assert prompt_id == "sequence.helper.child.ask"
    assert [p.id for p in ctx.ask_user] == [prompt_id]
    # One snapshot, the execution's: a child context has none of its own.
    snapshots = [key for key in await storage.list("execution:") if key.endswith(":snapshot")]
    assert snapshots == ["execution:exec_parent:snapshot"]
    await harness.answer("exec_parent", prompt_id, "1999")
    outcome = await durable_harness(storage, graph=harness.agent_graph).resume("exec_parent")
    assert outcome is not None
    assert outcome[1] == "1999"


# --- the command line -------------------------------------------------------------------


def test_little_workflow_answer_records_the_answer(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/checkpoints.db"

    async def suspend() -> None:
        from little_workflow.storage import open_storage

        storage = await open_storage(url)
        try:
            harness = asking(storage, suspend=True)
            with pytest.raises(AwaitingAnswerError):
                await harness.execute(harness.create_context(id="exec_cli"), "go")
        finally:
            await storage.close()

    async def resume() -> object:
        from little_workflow.storage import open_storage

        storage = await open_storage(url)
        try:
            outcome = await asking(storage, suspend=True).resume("exec_cli")
            assert outcome is not None
            return outcome[1]
        finally:
            await storage.close()

    asyncio.run(suspend())
    answered = little_workflow(tmp_path, "answer", "exec_cli", "flow.ask", "Ada", url)
    assert answered.returncode == 0, answered.stderr
    assert "answered flow.ask of exec_cli" in answered.stderr
    assert asyncio.run(resume()) == "Ada scores 70"

    # It answers pending prompts only.
    again = little_workflow(tmp_path, "answer", "exec_cli", "flow.ask", "Bo", url)
    assert again.returncode == 3
    assert "prompt_not_found" in again.stderr
    assert "pending: none" in again.stderr
    unknown = little_workflow(tmp_path, "answer", "exec_nope", "flow.ask", "Bo", url)
    assert unknown.returncode == 3
    assert "execution_not_found" in unknown.stderr


def little_workflow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``little-workflow ... --checkpoints URL`` (the last argument), in its own process."""
    *command, url = args
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "little_workflow",
            "--data-dir",
            str(tmp_path / "data"),
            *command,
            "--checkpoints",
            url,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_little_workflow_clear_discards_an_execution(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/checkpoints.db"

    async def suspend_and_answer() -> None:
        from little_workflow.storage import open_storage

        storage = await open_storage(url)
        try:
            harness = asking(storage, suspend=True)
            with pytest.raises(AwaitingAnswerError):
                await harness.execute(harness.create_context(id="exec_clear"), "go")
            await harness.answer("exec_clear", "flow.ask", "Ada")
        finally:
            await storage.close()

    async def keys() -> list[str]:
        from little_workflow.storage import open_storage

        storage = await open_storage(url)
        try:
            return await storage.list("execution:exec_clear:")
        finally:
            await storage.close()

    asyncio.run(suspend_and_answer())
    before = asyncio.run(keys())
    assert "execution:exec_clear:snapshot" in before
    assert any(":answer:" in key for key in before)

    cleared = little_workflow(tmp_path, "clear", "exec_clear", "--yes", "--json", url)
    assert cleared.returncode == 0, cleared.stderr
    assert '"snapshot":true' in cleared.stdout
    assert '"answers":1' in cleared.stdout
    assert asyncio.run(keys()) == []
    # Nothing is left to clear, and the command says so.
    again = little_workflow(tmp_path, "clear", "exec_clear", "--yes", url)
    assert again.returncode == 3
    assert "execution_not_found" in again.stderr
