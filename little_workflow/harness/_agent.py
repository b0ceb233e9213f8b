"""The standard agent: call the model, run the tool calls it asked for, until it answers.

A graph like any other::

    agent                      (sequence)
      turns                    (loop, at most max_turns)
        turns[i].model         call_model(slot)
        turns[i].tools         run_tool_calls(): turns[i].tools[<call id>] each
      answer                   run_code: the last answer's text

It stops when the model answers without asking for tools, or after ``max_turns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.harness._context import Context
from little_workflow.harness._graph import (
    SequenceStep,
    call_model,
    loop,
    run_code,
    run_tool_calls,
    sequence,
)

__all__ = ["agent", "answered", "final_answer"]


def answered(ctx: Context, _output: Any) -> bool:
    """Whether the last model answer asked for no tool calls (the loop's stop condition)."""
    last = ctx.items.last_assistant()
    return last is None or not last.tool_calls


def final_answer(ctx: Context, _input: Any) -> JsonValue:
    """The text of the last model answer."""
    last = ctx.items.last_assistant()
    return None if last is None else last.text


def agent(
    *,
    slot: str,
    tools: Sequence[str] | None = None,
    max_turns: int = 8,
    id: str = "agent",
    temperature: float | None = None,
) -> SequenceStep:
    """The standard agent graph over model ``slot`` and ``tools`` (``None``: all of them)."""
    return sequence(
        [
            loop(
                [call_model(slot, tools=tools, temperature=temperature), run_tool_calls()],
                until=answered,
                max_iterations=max_turns,
                id="turns",
            ),
            run_code(final_answer, id="answer"),
        ],
        id=id,
    )
