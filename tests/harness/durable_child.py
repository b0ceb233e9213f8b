"""A durable harness in a process of its own, for the kill and ask-user tests.

Run: ``python -m tests.harness.durable_child --store URL --execution ID --log FILE
[--input TEXT | --resume] [--graph agent|ask|agent-code|two-agents|spawned] [--suspend]
[--kill LINE]``

The harness is built the same way every time (a checkpoint store over ``--store``, the
scripted agent of ``durable_support``). ``--input`` starts the execution; ``--resume``
restores it and continues. Every model and tool call is noted in ``--log`` before it is
made (the code step of ``agent-code`` notes ``code report``); ``--kill LINE`` makes the
process SIGKILL itself when it notes that line (say ``tool score 7``, or ``model turn=2``:
a model call cut off mid-stream). On success it prints one JSON line:
``{"output", "items", "frontier"}``; suspended on a question,
``{"awaiting": <prompt id>, "question": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from little_workflow.durable import create_checkpoint_store
from little_workflow.errors import AwaitingAnswerError
from little_workflow.harness import (
    AgentHarness,
    Context,
    GraphStep,
    HarnessEnvironment,
    HarnessStorage,
    ModelSlot,
    agent,
    ask_user,
    run_code,
    sequence,
    spawn,
)
from little_workflow.storage import open_storage
from tests.harness.durable_support import CallLog, LoggedProvider, item_log, make_tools

QUESTION = "Whom should I score?"
#: Where ``report`` notes its calls (set by ``main``).
CALL_LOG: list[CallLog] = []


def report(ctx: Context, _input: Any) -> Any:
    """A code step after the agent: what it sees of the conversation."""
    CALL_LOG[0].note("code report")
    last = ctx.items.last_assistant()
    return {"answer": None if last is None else last.content, "messages": len(ctx.items.messages)}


def graph(kind: str, *, suspend: bool) -> GraphStep:
    """The graph ``--graph`` names.

    ``agent``: the scripted agent; ``ask``: ask whom to score, then the agent;
    ``agent-code``: the agent, then ``report``; ``two-agents``: two agents in a row (the
    second one sees the first one's turns, so the script answers it at once);
    ``spawned``: ``agent-code`` as a spawned agent (its context is not snapshotted).
    """
    if kind == "agent":
        return agent(slot="main")
    if kind == "agent-code":
        return sequence([agent(slot="main"), run_code(report, id="report")], id="flow")
    if kind == "spawned":
        worker = sequence([agent(slot="main"), run_code(report, id="report")], id="worker")
        return sequence([spawn(worker, input="Ada", id="delegate")], id="flow")
    if kind == "two-agents":
        return sequence(
            [agent(slot="main", id="first"), agent(slot="main", id="second")], id="flow"
        )
    return sequence([ask_user(QUESTION, id="ask", suspend=suspend), agent(slot="main")], id="flow")


async def main(args: argparse.Namespace) -> int:
    storage = await open_storage(args.store)
    try:
        log = CallLog(Path(args.log), kill_on=args.kill)
        CALL_LOG[:] = [log]
        harness = AgentHarness(
            name="durable-child",
            agent_graph=graph(args.graph, suspend=args.suspend),
            model_slots={"main": ModelSlot(provider=LoggedProvider(log), model="m1")},
            tools=make_tools(log),
            environment=HarnessEnvironment(
                storage=HarnessStorage(checkpoint_store=create_checkpoint_store(storage=storage))
            ),
        )
        try:
            if args.resume:
                outcome = await harness.resume(args.execution)
                if outcome is None:
                    sys.stderr.write(f"no checkpoint of {args.execution}\n")
                    return 3
                ctx, output = outcome
            else:
                ctx = harness.create_context(id=args.execution, instructions="Be brief")
                output = await harness.execute(ctx, args.input)
        except AwaitingAnswerError as exc:
            print(json.dumps({"awaiting": exc.prompt_id, "question": exc.question}), flush=True)
            return 0
        print(
            json.dumps({"output": output, "items": item_log(ctx), "frontier": ctx.frontier}),
            flush=True,
        )
        return 0
    finally:
        await storage.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", required=True)
    parser.add_argument("--execution", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--input", default=None)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument(
        "--graph", choices=["agent", "ask", "agent-code", "two-agents", "spawned"], default="agent"
    )
    parser.add_argument("--suspend", action="store_true")
    parser.add_argument("--kill", default=None)
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(parse(sys.argv[1:]))))
