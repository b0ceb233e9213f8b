"""How a long agent session's log grows: linearly, not with the square of its turns.

Run: ``python -m bench.history [--turns 200] [--turn-bytes 1024]``

A workflow with one ``agent`` step runs a session of ``--turns`` model calls against a
scripted model: each turn the model asks for a tool call and the tool answers, adding
about ``--turn-bytes`` of messages to the conversation (half the assistant's message,
half the tool's result), and the last turn answers. Every model request carries the
whole conversation so far, as a provider's API requires.

Reported, after the runtime is closed (the SQLite WAL folded into the database):

* **ours**: bytes on disk of the run store: the SQLite database plus the blob files
  (apparent sizes, and blocks allocated, which round each small file up to a block);
* **naive**: the sum of the JSON sizes of every model request, what a log that journals
  each call's request in full stores (Temporal's history, a per-call checkpoint);
* **final**: the JSON size of the last request, the conversation itself;
* **LangGraph**: the SqliteSaver database of a ``MessagesState`` graph replaying the same
  conversation one checkpoint per turn, if ``langgraph`` and
  ``langgraph-checkpoint-sqlite`` are importable here (otherwise said so).

The target: ours <= 3x final. Files live under ``.bench-data/`` (the real disk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from little_workflow.events import HarnessModelCalled
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import AgentStep, OutputStep, Workflow
from little_workflow.runtime import Runtime

TURNS = 200
TURN_BYTES = 1024


_LETTERS = "etaoinshrdlucmfwypvbgkjqxz"
_VOCABULARY = [
    "".join(random.Random(index).choices(_LETTERS, weights=range(26, 0, -1), k=3 + index % 7))
    for index in range(3000)
]


def _filler(turn: int, length: int, word: str) -> str:
    # Words drawn at random from a large vocabulary: text that compresses no better than
    # prose does (a repeated word would flatter any store that compresses).
    chooser = random.Random(f"{word}{turn}")
    text = f"{word} {turn}:"
    while len(text) < length:
        text += " " + chooser.choice(_VOCABULARY)
    return text[:length]


def reply(request: ModelRequest) -> Any:
    """The scripted model: a tool call each turn, an answer after ``TURNS`` of them."""
    turn = sum(1 for message in request.messages if message.role == "assistant")
    if turn >= TURNS:
        return f"done after {turn} turns"
    return {
        "content": _filler(turn, TURN_BYTES // 2 - 120, "thinking"),
        "tool_calls": [{"id": f"call_{turn}", "name": "observe", "arguments": {"turn": turn}}],
    }


def observe(turn: int) -> str:
    """What the tool saw at a turn.

    Args:
        turn: The turn number.
    """
    return _filler(turn, TURN_BYTES // 2, "observed")


def workflow() -> Workflow:
    """One agent step running the whole session."""
    return Workflow(
        name="history",
        steps=(
            AgentStep(
                id="agent",
                slot="model",
                prompt="Observe until you are done.",
                tools=("observe",),
                max_turns=TURNS + 1,
            ),
            OutputStep(id="out", value="${steps.agent.output}"),
        ),
    )


def disk_bytes(paths: list[Path]) -> tuple[int, int]:
    """(apparent bytes, allocated bytes) of the files under ``paths``."""
    apparent = allocated = 0
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            stat = path.stat()
            apparent += stat.st_size
            allocated += stat.st_blocks * 512
    return apparent, allocated


async def ours(root: Path) -> tuple[list[dict[str, Any]], tuple[int, int], int]:
    """Run the session; the requests as recorded, the store's bytes, the blob count."""
    runtime = Runtime(
        root,
        model_slots={"model": ModelSlot(provider=scripted(reply), model="scripted")},
        tools=[tool(observe)],
    )
    async with runtime:
        result = await runtime.run(workflow(), None, run_id="run_history")
        assert result.output == f"done after {TURNS} turns", result.output
        requests = [
            record.event.request
            for record in await runtime.events.read("run_history")
            if isinstance(record.event, HarnessModelCalled)
        ]
    assert all(isinstance(request, dict) for request in requests)
    blobs = root / "blobs"
    count = sum(1 for path in blobs.rglob("*") if path.is_file())
    store = [p for p in root.iterdir() if p.name.startswith("little-workflow.db")]
    return [r for r in requests if isinstance(r, dict)], disk_bytes([*store, blobs]), count


def langgraph_bytes(root: Path, requests: list[dict[str, Any]]) -> tuple[int, int] | None:
    """SqliteSaver's bytes for the same conversation, one checkpoint per turn, or None."""
    try:
        from langgraph.checkpoint.sqlite import SqliteSaver  # type: ignore[import-not-found]
        from langgraph.graph import START, MessagesState, StateGraph  # type: ignore[import-not-found]
    except ImportError:
        return None
    turns = [request["messages"] for request in requests]

    def model(state: Any) -> dict[str, Any]:
        # Each invocation adds what the conversation gained since the previous request.
        done = len(state["messages"])
        following = next((m for m in turns if len(m) > done), turns[-1])
        return {
            "messages": [
                {"role": "assistant" if m["role"] == "assistant" else "user", "content": str(m)}
                for m in following[done:]
            ]
        }

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    path = root / "langgraph.sqlite"
    connection = sqlite3.connect(path, check_same_thread=False)
    try:
        graph = builder.compile(checkpointer=SqliteSaver(connection))
        config = {"configurable": {"thread_id": "history"}}
        for _ in turns:
            graph.invoke({"messages": []}, config)
    finally:
        connection.close()
    return disk_bytes([p for p in root.iterdir() if p.name.startswith("langgraph.sqlite")])


def _kib(value: int) -> str:
    return f"{value / 1024:,.0f} KiB"


async def main() -> None:
    global TURNS, TURN_BYTES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=TURNS)
    parser.add_argument("--turn-bytes", type=int, default=TURN_BYTES)
    args = parser.parse_args()
    TURNS, TURN_BYTES = args.turns, args.turn_bytes
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="history-", dir=base))
    try:
        requests, (apparent, allocated), blob_count = await ours(root / "data")
        sizes = [len(json.dumps(r, ensure_ascii=False, separators=(",", ":"))) for r in requests]
        naive, final = sum(sizes), sizes[-1]
        print(f"{len(requests)} model calls, each turn adding about {TURN_BYTES} bytes:")
        print(f"  final conversation (last request)  {_kib(final):>12}")
        print(
            f"  naive: every request in full       {_kib(naive):>12}   {naive / final:7.2f}x final"
        )
        print(
            f"  little-workflow (db + {blob_count} blobs)   {_kib(apparent):>12}   "
            f"{apparent / final:7.2f}x final   ({_kib(allocated)} allocated, "
            f"{allocated / final:.1f}x)"
        )
        peer = langgraph_bytes(root, requests)
        if peer is None:
            print("  LangGraph SqliteSaver              not installed in this environment")
        else:
            print(
                f"  LangGraph SqliteSaver              {_kib(peer[0]):>12}   "
                f"{peer[0] / final:7.2f}x final"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
