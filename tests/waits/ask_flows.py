"""An agent that asks the person a question (``ask_user``), for the ask-user wait tests.

The model is a script function of the request, so a process that replays the session
gets the answers the first one got. Every request the model gets appends one line to the
file ``LW_TEST_MODEL_CALLS`` names (``<model> <turn> <last message>``), outside every
process: the count of model calls survives a SIGKILL.
"""

from __future__ import annotations

import os
from typing import Any

from little_workflow import workflow
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.runtime import RuntimeSetup

QUESTION = "Which colour should the logo be?"


def _append(line: str) -> None:
    path = os.environ.get("LW_TEST_MODEL_CALLS")
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (line.replace("\n", " ") + "\n").encode())
        finally:
            os.close(fd)


def script(request: ModelRequest) -> Any:
    """Turn 0 asks the question; turn 1 answers with what the person said."""
    turns = sum(1 for message in request.messages if message.role == "assistant")
    last = request.messages[-1].content or ""
    _append(f"{request.model} {turns} {last}")
    if turns == 0:
        return {
            "tool_calls": [
                {"id": "call_ask", "name": "ask_user", "arguments": {"question": QUESTION}}
            ]
        }
    return f"The logo will be {last}."


def setup() -> RuntimeSetup:
    """For a child process: the slot ``designer`` on the scripted model."""
    return RuntimeSetup(
        model_slots={"designer": ModelSlot(provider=scripted(script), model="designer-model")}
    )


@workflow
async def logo(ctx, brand: str) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """An agent that may ask the person, then the brand and its answer."""
    answer = await ctx.agent("designer", prompt=f"Design a logo for {brand}", ask_user=True)
    return {"brand": brand, "answer": answer}
