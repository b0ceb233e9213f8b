"""The standard agent: call the model, run the tool calls it asked for, until it answers.

A graph like any other::

    agent                      (sequence)
      turns                    (loop, at most max_turns)
        turns[i].model         call_model(slot)
        turns[i].tools         run_tool_calls(): turns[i].tools[<call id>] each
      answer                   run_code: the last answer's text

It stops when the model answers without asking for tools, or after ``max_turns``.

Given an ``output`` format (structured output), each turn ends with a check::

        turns[i].check         run_code: the answer parsed and validated, or sent back

The model is asked for the format natively (``ModelRequest.response_format``); an answer
that is not JSON matching the schema is told what is wrong, as a user message, and asked
again, at most ``output_tries`` times in all; each try is a committed model call like
any other, replayed on resume. ``answer`` is then the validated JSON value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.errors import InvalidValueError, OutputValidationError
from little_workflow.harness._context import Context, Item, run_append_pipeline
from little_workflow.harness._graph import (
    GraphStep,
    SequenceStep,
    call_model,
    loop,
    run_code,
    run_tool_calls,
    sequence,
)
from little_workflow.harness.models import Message, ModelOptions, ResponseFormat

__all__ = ["agent", "answered", "final_answer", "parse_json_answer"]


def parse_json_answer(answer: Any, who: str) -> JsonValue:
    """A model's answer read as JSON (a ```json fence is allowed); ``InvalidValueError`` if not."""
    if not isinstance(answer, str):
        raise InvalidValueError(f"{who} gave no answer to read as JSON")
    text = answer.strip()
    fenced = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", text, re.DOTALL)
    if fenced is not None:
        text = fenced.group(1)
    try:
        value: JsonValue = json.loads(text)
    except ValueError as exc:
        raise InvalidValueError(
            f"{who} was asked for JSON but answered {answer[:200]!r}: {exc}"
        ) from exc
    return value


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
    options: ModelOptions | None = None,
    output: ResponseFormat | None = None,
    output_tries: int = 3,
) -> SequenceStep:
    """The standard agent graph over model ``slot`` and ``tools`` (``None``: all of them).

    ``output`` asks for structured output (see the module docstring); ``options`` are
    request options over the slot's.
    """
    model = call_model(
        slot, tools=tools, temperature=temperature, options=options, response_format=output
    )
    if output is None:
        turns: list[GraphStep] = [model, run_tool_calls()]
        return sequence(
            [
                loop(turns, until=answered, max_iterations=max_turns, id="turns"),
                run_code(final_answer, id="answer"),
            ],
            id=id,
        )
    if output_tries < 1:
        raise InvalidValueError(f"output_tries must be at least 1, not {output_tries!r}")
    schema = output.schema_

    def check(ctx: Context, _input: object) -> JsonValue:
        """After each turn: accept an answer matching the schema, or say what is wrong."""
        last = ctx.items.last_assistant()
        if last is None or last.tool_calls:
            return {"valid": False}
        value, problem = _validated(last.text, schema)
        if problem is None:
            return {"valid": True, "value": value}
        # Every answer without tool calls before this one was refused: the tries so far.
        tries = sum(1 for message in ctx.items.messages if _final(message))
        if tries >= output_tries:
            raise OutputValidationError(
                f"the model gave no answer matching the output schema {output.name!r} in "
                f"{tries} tries; the last one: {problem}",
                tries=tries,
            )
        feedback = (
            f"Your answer does not match the required output format: {problem}\n"
            f"Answer again with one JSON value matching the schema of {output.name!r}."
        )
        run_append_pipeline(ctx, [Item(message=Message(role="user", content=feedback))])
        return {"valid": False, "problem": problem}

    def structured_answer(ctx: Context, _input: object) -> JsonValue:
        """The accepted answer's JSON; the turns ran out if the last one is not."""
        last = ctx.items.last_assistant()
        if last is not None and _final(last):
            value, problem = _validated(last.text, schema)
            if problem is None:
                return value
        raise OutputValidationError(
            f"the model's {max_turns} turns ran out before it gave an answer matching the "
            f"output schema {output.name!r}",
            tries=sum(1 for message in ctx.items.messages if _final(message)),
        )

    return sequence(
        [
            loop(
                [model, run_tool_calls(), run_code(check, id="check")],
                until=_accepted,
                max_iterations=max_turns,
                id="turns",
            ),
            run_code(structured_answer, id="answer"),
        ],
        id=id,
    )


def _final(message: Message) -> bool:
    return message.role == "assistant" and not message.tool_calls


def _validated(text: str | None, schema: dict[str, JsonValue]) -> tuple[JsonValue, str | None]:
    """The answer's JSON if it matches ``schema``: ``(value, None)``, or ``(None, problem)``."""
    from little_workflow.lwir._jsonschema import validate

    try:
        value = parse_json_answer(text, "the model")
    except InvalidValueError as exc:
        return None, exc.message
    problems = validate(value, schema, where="answer")
    if problems:
        return None, "; ".join(f"{problem.path}: {problem.message}" for problem in problems[:5])
    return value, None


def _accepted(_ctx: Context, output: Any) -> bool:
    return isinstance(output, dict) and output.get("valid") is True
