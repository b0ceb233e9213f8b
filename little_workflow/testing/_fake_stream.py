"""The streamed form of an answer, for ``FakeModelServer``: server-sent events.

Each function takes the answer body the fake would send without streaming (see
``_fake_wire``) and returns the events the real API streams for it, each framed as it
goes on the wire (``event:``/``data:`` lines and the blank line). Written from the APIs'
documentation, apart from the clients' accumulators, like ``_fake_wire``.

Text is split before each word, tool-call arguments every few characters, so a client
sees several deltas per answer rather than one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "anthropic_error_event",
    "anthropic_events",
    "anthropic_payloads",
    "openai_chunks",
    "openai_error_event",
    "split_arguments",
    "split_text",
]

_WORD_START = re.compile(r"(?<=\s)(?=\S)")
_ARGUMENT_PIECE = 7


def split_text(text: str) -> list[str]:
    """``text`` in pieces that join to it: one per word, with the spaces after it."""
    return [piece for piece in _WORD_START.split(text) if piece]


def split_arguments(text: str) -> list[str]:
    """Tool-call arguments' JSON text in pieces of a few characters (none for ``""``)."""
    return [text[i : i + _ARGUMENT_PIECE] for i in range(0, len(text), _ARGUMENT_PIECE)]


def _data(payload: Mapping[str, Any] | str, event: str | None = None) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data}\n\n"


# -- OpenAI Chat Completions -----------------------------------------------------------


def openai_chunks(body: Mapping[str, Any], *, include_usage: bool) -> list[str]:
    """The ``chat.completion.chunk`` events of the completion ``body``, then ``[DONE]``."""
    choice = body["choices"][0]
    message = choice["message"]
    with_usage: dict[str, Any] = {"usage": None} if include_usage else {}

    def chunk(delta: Mapping[str, Any], finish: str | None = None) -> str:
        return _data(
            {
                "id": body["id"],
                "object": "chat.completion.chunk",
                "created": body["created"],
                "model": body["model"],
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
                **with_usage,
            }
        )

    events = [chunk({"role": "assistant", "content": "", "refusal": None})]
    for piece in split_text(message.get("reasoning_content") or ""):
        events.append(chunk({"reasoning_content": piece}))
    for piece in split_text(message.get("content") or ""):
        events.append(chunk({"content": piece}))
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": index,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": function["name"], "arguments": ""},
                        }
                    ]
                }
            )
        )
        for piece in split_arguments(function["arguments"]):
            events.append(
                chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        events.append(
            _data(
                {
                    "id": body["id"],
                    "object": "chat.completion.chunk",
                    "created": body["created"],
                    "model": body["model"],
                    "choices": [],
                    "usage": body["usage"],
                }
            )
        )
    events.append(_data("[DONE]"))
    return events


def openai_error_event(error: Mapping[str, Any]) -> str:
    """An error in the middle of a Chat Completions stream: ``data: {"error": {...}}``."""
    return _data(error)


# -- Anthropic Messages ----------------------------------------------------------------


def _block_events(index: int, block: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = block["type"]

    def delta(payload: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": index, "delta": payload}

    deltas: list[dict[str, Any]] = []
    if kind == "text":
        start: dict[str, Any] = {"type": "text", "text": ""}
        deltas = [delta({"type": "text_delta", "text": p}) for p in split_text(block["text"])]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": ""}
        deltas = [
            delta({"type": "thinking_delta", "thinking": p}) for p in split_text(block["thinking"])
        ]
        deltas.append(delta({"type": "signature_delta", "signature": block["signature"]}))
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        arguments = json.dumps(block["input"], ensure_ascii=False, separators=(",", ":"))
        deltas = [
            delta({"type": "input_json_delta", "partial_json": p})
            for p in split_arguments(arguments)
        ]
    else:  # redacted_thinking arrives whole in its start event
        start = dict(block)
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *deltas,
        {"type": "content_block_stop", "index": index},
    ]


def anthropic_payloads(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The events of the message ``body`` as JSON objects, before any framing.

    ``message_start`` to ``message_stop``, with a ping: SSE frames them for the
    Messages API (``anthropic_events``), AWS's event stream for Bedrock.
    """
    usage = dict(body["usage"])
    output_tokens = usage.get("output_tokens", 0)
    # As the real API: the start holds the input figures, the output so far (1 token).
    started = {**body, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": started}, {"type": "ping"}]
    for index, block in enumerate(body["content"]):
        events.extend(_block_events(index, block))
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": body["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": output_tokens},
        }
    )
    events.append({"type": "message_stop"})
    return events


def anthropic_events(body: Mapping[str, Any]) -> list[str]:
    """The events of the message ``body`` as SSE: each named by its ``type``."""
    return [_data(event, event["type"]) for event in anthropic_payloads(body)]


def anthropic_error_event(error: Mapping[str, Any]) -> str:
    """An error in the middle of a Messages stream: ``event: error``."""
    return _data(error, "error")
