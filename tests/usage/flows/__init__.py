"""A workflow whose every model answer reports a scripted usage, for the usage tests.

``setup`` (``--setup tests.usage.flows:setup``) gives two slots on one scripted provider:
``tally`` (model ``tally-model``) and ``other`` (model ``other-model``), and the tool
``stamp``. The answers, and the usage each reports, are ``USAGES``:

* ``first`` (slot ``tally``): answers ``one``;
* ``second`` (slot ``other``): asks for ``stamp``, then answers ``two``; under
  ``LW_USAGE_HOLD=second#1`` the process stops inside that second call (after writing
  its pid to the file ``LW_USAGE_MARK`` names) until the test kills it.

Every model call appends ``<key> <pid>`` to the file ``LW_USAGE_CALLS`` names, so a test
counts the calls the model saw outside the processes it kills.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable
from pathlib import Path

from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, ScriptReply, Usage, scripted
from little_workflow.runtime import RuntimeSetup

FLOWS = Path(__file__).resolve().parent
SETUP = "tests.usage.flows:setup"
CALLS_ENV, HOLD_ENV, MARK_ENV = "LW_USAGE_CALLS", "LW_USAGE_HOLD", "LW_USAGE_MARK"

#: The usage each call reports, by ``<prompt>#<turn>``.
USAGES = {
    "first#0": Usage(input_tokens=100, output_tokens=10, cached_input_tokens=40),
    "second#0": Usage(input_tokens=200, output_tokens=20, cache_write_tokens=50),
    "second#1": Usage(input_tokens=300, output_tokens=30, reasoning_tokens=12),
}


def _record(key: str) -> None:
    target = os.environ.get(CALLS_ENV)
    if target:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, f"{key} {os.getpid()}\n".encode())
        finally:
            os.close(fd)


@tool
async def stamp() -> str:
    """A stamp."""
    return "stamped"


def _prompt(request: ModelRequest) -> str:
    return next((m.content or "" for m in request.messages if m.role == "user"), "")


def _reply(key: str) -> ScriptReply:
    usage = USAGES[key].model_dump()
    if key == "second#0":
        return {"tool_calls": [{"name": "stamp", "arguments": {}}], "usage": usage}
    return {"content": "one" if key == "first#0" else "two", "usage": usage}


def _mark() -> None:
    Path(os.environ[MARK_ENV]).write_text(f"{os.getpid()}\n")


async def _held(key: str) -> ScriptReply:
    _mark()
    await asyncio.sleep(120)
    raise TimeoutError(f"the test never killed the process held at {key!r}")


def respond(request: ModelRequest) -> ScriptReply | Awaitable[ScriptReply]:
    """The scripted answer to ``request``: a function of its conversation alone."""
    turn = sum(1 for message in request.messages if message.role == "assistant")
    key = f"{_prompt(request)}#{turn}"
    _record(key)
    if os.environ.get(HOLD_ENV) == key:
        return _held(key)
    return _reply(key)


def setup() -> RuntimeSetup:
    """The slots and the tool of the usage workflows."""
    provider = scripted(respond)
    return RuntimeSetup(
        model_slots={
            "tally": ModelSlot(provider=provider, model="tally-model"),
            "other": ModelSlot(provider=provider, model="other-model"),
        },
        tools=[stamp],
    )
