"""Workflows, step functions, tools and a scripted model for the real-kill tests.

``setup`` (named by ``--setup tests.runtime.kill_flows:setup``) gives three model slots on
one scripted provider, answering as a function of the conversation alone (a call
re-issued after a kill gets the answer the killed process got), and the tools:

* ``notes`` (model ``notes-model``): calls ``jot`` (writes ``notes.txt`` into the
  session's scratch directory and a memory entry), then ``peek`` (reads both back), then
  answers ``seen <what peek read>``.
* ``judge`` (model ``judge-model``): ``revise`` for ``Judge: draft v0``, ``accept`` after.
* ``fixer`` (model ``fixer-model``): corrects ``b: 0`` to ``b: 2``.
* ``city`` (model ``city-model``, structured output): not JSON, then JSON missing a
  field, then the city; held in its third try under ``LW_KILL_HOLD=city#2``.

Everything that runs (model calls included) appends ``<kind> <key> <pid>`` to the file
``LW_KILL_CALLS`` names, so a test counts calls outside the processes it kills.
``LW_KILL_HOLD=<point>`` makes the process stop at that point (after writing its pid to
the file ``LW_KILL_MARK`` names) until the test kills it; the resuming process is
started without it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from little_workflow.harness import ModelSlot, ToolContext, tool
from little_workflow.harness.models import ModelRequest, ScriptReply, scripted
from little_workflow.runtime import RuntimeSetup, StepContext

FLOWS = Path(__file__).resolve().parent
SETUP = "tests.runtime.kill_flows:setup"
CALLS_ENV, HOLD_ENV, MARK_ENV = "LW_KILL_CALLS", "LW_KILL_HOLD", "LW_KILL_MARK"
NAMESPACE = "kill-test"


def record(kind: str, key: str) -> None:
    """Append one line to the calls file (one ``write`` on an ``O_APPEND`` descriptor)."""
    target = os.environ.get(CALLS_ENV)
    if target:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{kind} {key} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


def _mark() -> None:
    Path(os.environ[MARK_ENV]).write_text(f"{os.getpid()}\n")


async def hold(point: str) -> None:
    """Stop here, in the process started with ``LW_KILL_HOLD=<point>``, until killed."""
    if os.environ.get(HOLD_ENV) == point:
        _mark()
        await asyncio.sleep(120)
        raise TimeoutError(f"the test never killed the process held at {point!r}")


# --- step functions ---------------------------------------------------------------


async def write(ctx: StepContext) -> str:
    """A draft, one per visit; held at visit 1 under ``LW_KILL_HOLD=write#1``."""
    record("step", ctx.step_path)
    await hold(f"write#{ctx.visit}")
    return f"draft v{ctx.visit}"


async def divide(a: float, b: float, ctx: StepContext) -> float:
    """``a / b``; held once corrected (``b`` not 0) under ``LW_KILL_HOLD=divide-fixed``."""
    record("step", f"{ctx.step_path}:b={b:g}")
    if b != 0:
        await hold("divide-fixed")
    return a / b


async def work(candidate: dict[str, Any], ctx: StepContext) -> str:
    """A map branch's looping worker; held at ``LW_KILL_HOLD=<its step path>``."""
    record("step", ctx.step_path)
    await hold(ctx.step_path)
    return f"{candidate['id']} v{ctx.visit}"


async def check(draft: str, ctx: StepContext) -> str:
    """Another lap for a first draft; done after."""
    record("step", ctx.step_path)
    return "again" if draft.endswith("v0") else "ok"


# --- tools ------------------------------------------------------------------------


def _scratch(ctx: ToolContext) -> Path:
    assert ctx.context.cwd is not None, "a session in a run has a scratch directory"
    return Path(ctx.context.cwd)


@tool
async def jot(text: str, ctx: ToolContext) -> str:
    """Write a note into the scratch directory, and remember it.

    Args:
        text: The note.
    """
    record("tool", f"jot:{ctx.execution_id}")
    (_scratch(ctx) / "notes.txt").write_text(text, encoding="utf-8")
    await ctx.memory.put(NAMESPACE, "note", {"text": text})
    return "jotted"


@tool
async def peek(ctx: ToolContext) -> dict[str, Any]:
    """Read the note back from the scratch directory and from memory."""
    record("tool", f"peek:{ctx.execution_id}")
    await hold("peek")
    notes = _scratch(ctx) / "notes.txt"
    return {
        "file": notes.read_text(encoding="utf-8") if notes.exists() else None,
        "memory": await ctx.memory.get(NAMESPACE, "note"),
    }


# --- the model --------------------------------------------------------------------


def _first_user(request: ModelRequest) -> str:
    return next((m.content or "" for m in request.messages if m.role == "user"), "")


def _answer(request: ModelRequest, turn: int) -> ScriptReply:
    if request.model == "notes-model":
        if turn == 0:
            return {"tool_calls": [{"name": "jot", "arguments": {"text": "alpha"}}]}
        if turn == 1:
            return {"tool_calls": [{"name": "peek", "arguments": {}}]}
        results = [m.content or "" for m in request.messages if m.role == "tool"]
        return f"seen {results[-1]}"
    if request.model == "judge-model":
        return "revise" if _first_user(request).endswith("v0") else "accept"
    if request.model == "fixer-model":
        arguments = json.loads(_first_user(request))["arguments"]
        return json.dumps({"action": "retry", "with": {**arguments, "b": 2}})
    raise AssertionError(f"no script for model {request.model!r}")


_CITY = ["Oslo, I think.", '{"city": "Oslo"}', '{"city": "Oslo", "population": 709000}']


async def _city(turn: int) -> ScriptReply:
    await hold(f"city#{turn}")
    return _CITY[min(turn, 2)]


def _respond(request: ModelRequest) -> ScriptReply | Awaitable[ScriptReply]:
    turn = sum(1 for message in request.messages if message.role == "assistant")
    record("model", f"{request.model}:{_first_user(request)[:40]!r}:{turn}".replace(" ", "_"))
    if request.model == "city-model":
        return _city(turn)
    return _answer(request, turn)


def setup() -> RuntimeSetup:
    """The slots and tools every workflow of this folder uses."""
    provider = scripted(_respond)
    return RuntimeSetup(
        model_slots={
            name: ModelSlot(provider=provider, model=f"{name}-model")
            for name in ("notes", "judge", "fixer", "city")
        },
        tools=[jot, peek],
    )
