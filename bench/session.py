"""The runtime's cost per recorded model call and tool call of an agent session, and its replay.

Run: ``python -m bench.session [--rounds 40] [--turns 20] [--replay-turns 500]``

An LWIR ``agent`` step runs a harness session against the ``scripted`` provider (no
delay) and one trivial tool (``echo``). The script is a function of the request: it
counts the assistant messages so far and asks for the tool until the turn named in the
prompt, then answers. A tool-free answer ends a session, so a session is measured in
turns of one model call plus its tool calls. The script gives its responses and tool
calls their ids, so the provider does not hash the conversation (its own cost, not the
runtime's).

1. **Per call.** Three sessions run in each round: one that answers at once, one of
   ``--turns`` turns of a model call and one tool call, one of ``--turns`` turns of a
   model call and two tool calls. Their differences, divided by the turns, give µs per
   turn, per tool call, and per model call (turn minus tool call), with each session's
   fixed cost (the run, the step, the final answer) subtracted. (The second tool call
   also lengthens the conversation by one message a turn, which later requests carry:
   the tool call's figure is slightly high, the model call's slightly low.) Each is set
   next to one raw ``sqlite3`` insert + commit (``synchronous=FULL``, WAL), measured in
   the same process, interleaved round by round; medians over rounds. A model call costs one
   durable commit (``harness.model.called`` is written behind, ``harness.model.responded``
   fsynced with it), a tool call one (``harness.tool_call.started`` behind,
   ``.succeeded`` fsynced): a turn is two commits, so its ratio is also given per commit.
2. **Replay.** A session of ``--replay-turns`` turns of model call + tool call (1,000
   recorded calls at 500) runs in a fresh data directory and is interrupted at its last
   model call (the one that would answer): the call blocks, and the run's task is
   cancelled there, as a kill would leave it. Its µs per turn are reported too: they grow
   with the conversation (below). The data directory is copied ``--replay-rounds`` times;
   a fresh ``Runtime`` resumes each copy. Reported: the median seconds from opening the
   runtime to the run's completion, and the provider calls the resumes made (1 each:
   only the call that had no committed response).
3. **Log size.** The bytes of the SQLite database (with its WAL) after the interrupted
   session, divided by its recorded calls. Each ``harness.model.called`` event records the
   whole request, i.e. the conversation so far, so the log grows quadratically with the
   conversation, and so does the cost of a turn (each request is dumped, validated into
   its event and written) and of a resume (which reads and decodes every one).
   Content-addressed payloads (a later issue) will fix that; this figure is here to show it.

Files live under ``.bench-data/`` in the repository (the real disk, never tmpfs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.steps import raw_commits
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import tool
from little_workflow.harness.models import ModelRequest
from little_workflow.harness.models._scripted import scripted
from little_workflow.lwir import AgentStep, OutputStep, Workflow
from little_workflow.lwir._models import MAX_TURNS
from little_workflow.runtime import Runtime


@tool
def echo(n: int) -> int:
    """Return the number it is given: as cheap as a tool can be.

    Args:
        n: Any number.
    """
    return n


def script(request: ModelRequest) -> dict[str, Any]:
    """The model: asks for ``echo`` (``tools`` times) each turn until turn ``turns``.

    The prompt reads ``"<turns> <tools>"``; the turn is the number of assistant messages.
    """
    prompt = next(message.content for message in request.messages if message.role == "user")
    turns, tools = (int(word) for word in (prompt or "0 0").split())
    turn = sum(1 for message in request.messages if message.role == "assistant")
    if turn >= turns:
        return {"id": f"r{turn}", "message": {"content": "done"}}
    calls = [{"id": f"c{turn}_{k}", "name": "echo", "arguments": {"n": turn}} for k in range(tools)]
    return {"id": f"r{turn}", "message": {"tool_calls": calls}}


def session(turns: int, tools: int) -> Workflow:
    """One agent step whose session has ``turns`` turns of ``tools`` tool calls, then answers."""
    return Workflow(
        name=f"session-{turns}x{tools}",
        steps=[
            AgentStep(
                id="agent",
                slot="bench",
                tools=("echo",),
                prompt=f"{turns} {tools}",
                max_turns=min(turns + 1, MAX_TURNS),
            ),
            OutputStep(id="out", value="${steps.agent.output}"),
        ],
    )


def runtime(data_dir: Path, provider: Any) -> Runtime:
    """A runtime with the ``bench`` slot on ``provider`` and the ``echo`` tool."""
    return Runtime(
        data_dir, model_slots={"bench": ModelSlot(provider=provider, model="m")}, tools=[echo]
    )


async def timed_run(rt: Runtime, workflow: Workflow, run_id: str) -> float:
    """Seconds for one whole run of ``workflow``."""
    start = time.perf_counter()
    result = await rt.run(workflow, None, run_id=run_id)
    assert result.output == "done", result.output
    return time.perf_counter() - start


async def per_call(root: Path, rounds: int, turns: int) -> dict[str, float]:
    """Median µs: raw commit, turn (model + tool), tool call, model call."""
    workflows = [session(0, 0), session(turns, 1), session(turns, 2)]
    raw, turn, tool_call, model_call = [], [], [], []
    async with runtime(root / "data", scripted(script)) as rt:
        # Warm-up: page cache, statement caches, the workflows pinned in the store.
        raw_commits(root / "raw.db", 100)
        for index, workflow in enumerate(workflows):
            await timed_run(rt, workflow, f"run_warm_{index}")
        for round_index in range(rounds):
            raw.append(raw_commits(root / "raw.db", 2 * turns))
            zero, one, two = [
                await timed_run(rt, workflow, f"run_{round_index}_{index}")
                for index, workflow in enumerate(workflows)
            ]
            turn.append((one - zero) / turns * 1e6)
            tool_call.append((two - one) / turns * 1e6)
            model_call.append(turn[-1] - tool_call[-1])
    return {
        "raw": statistics.median(raw),
        "turn": statistics.median(turn),
        "tool": statistics.median(tool_call),
        "model": statistics.median(model_call),
    }


async def interrupted(data_dir: Path, turns: int) -> float:
    """Run the long session until its last model call blocks, cancel it; µs per turn."""
    blocked, release = asyncio.Event(), asyncio.Event()

    async def blocking(request: ModelRequest) -> dict[str, Any]:
        if sum(1 for message in request.messages if message.role == "assistant") >= turns:
            blocked.set()
            await release.wait()  # never set: the run is cancelled here
        return script(request)

    provider = scripted(blocking)
    async with runtime(data_dir, provider) as rt:
        start = time.perf_counter()
        task = asyncio.create_task(rt.run(session(turns, 1), None, run_id="run_long"))
        await blocked.wait()
        elapsed = time.perf_counter() - start
        await asyncio.sleep(0.1)  # the write-behind ``harness.model.called`` is flushed
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return elapsed / turns * 1e6


async def resume(data_dir: Path) -> tuple[float, int]:
    """(seconds from opening a fresh runtime to the run's completion, provider calls)."""
    provider = scripted(script)
    start = time.perf_counter()
    async with runtime(data_dir, provider) as rt:
        result = await rt.resume("run_long")
        elapsed = time.perf_counter() - start
    assert result.output == "done", result.output
    return elapsed, provider.calls


def database_bytes(data_dir: Path) -> int:
    """The SQLite database and whatever its WAL still holds."""
    return sum(path.stat().st_size for path in data_dir.glob("little-workflow.db*"))


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--turns", type=int, default=20, help="turns per session (per call)")
    parser.add_argument("--replay-turns", type=int, default=500)
    parser.add_argument("--replay-rounds", type=int, default=3)
    args = parser.parse_args()
    base = Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="session-", dir=base))
    try:
        figures = await per_call(root, args.rounds, args.turns)
        long_turn = await interrupted(root / "long", args.replay_turns)
        calls = 2 * args.replay_turns
        size = database_bytes(root / "long")
        seconds, provider_calls = [], []
        for index in range(args.replay_rounds):
            copy = root / f"resume-{index}"
            shutil.copytree(root / "long", copy)
            elapsed, made = await resume(copy)
            seconds.append(elapsed)
            provider_calls.append(made)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    raw = figures["raw"]

    def row(measure: str, figure: str, versus: str = "") -> None:
        print(f"{measure:<46}{figure:>14}   {versus}")

    print(
        f"agent sessions, scripted provider: {args.rounds} interleaved rounds of "
        f"{args.turns}-turn sessions, medians; a resume of {calls:,} recorded calls"
    )
    row("measure", "figure", "vs one raw FULL insert + commit")
    row("raw sqlite3 FULL insert + commit", f"{raw:.1f} µs")
    turn = figures["turn"]
    row(
        "turn: model call + tool call (2 commits)",
        f"{turn:.1f} µs",
        f"{turn / raw:.2f}x, {turn / 2 / raw:.2f}x per commit",
    )
    row("model call (1 commit)", f"{figures['model']:.1f} µs", f"{figures['model'] / raw:.2f}x")
    row("tool call (1 commit)", f"{figures['tool']:.1f} µs", f"{figures['tool'] / raw:.2f}x")
    row(
        f"turn of a {args.replay_turns}-turn session, first run",
        f"{long_turn:.1f} µs",
        f"{long_turn / raw:.2f}x, {long_turn / 2 / raw:.2f}x per commit",
    )
    row(
        f"resume of the {calls:,}-call session",
        f"{statistics.median(seconds):.3f} s",
        f"provider calls made by each resume: {', '.join(map(str, provider_calls))}",
    )
    row(
        f"database after the {calls:,}-call session",
        f"{size / 1e6:.1f} MB",
        f"{size / calls / 1e3:.1f} kB per recorded call",
    )


if __name__ == "__main__":
    asyncio.run(main())
