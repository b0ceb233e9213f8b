"""The Chat Completions stream, accumulated: ``chat.completion.chunk`` events to a body.

Each chunk carries ``choices[0].delta``: the role, pieces of ``content``, of the
reasoning (``reasoning_content`` as vLLM and DeepSeek send it, ``reasoning`` as Ollama
does) and of ``tool_calls`` (by ``index``: the id and the name come on a call's first
piece, its arguments' JSON text in fragments). ``finish_reason`` comes on the last
choice chunk; with ``stream_options.include_usage`` a chunk with no choices carries the
usage; ``data: [DONE]`` ends the stream. ``body`` gives the completion the API would
have answered whole, which the provider reads as ``complete`` reads its answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from little_workflow.harness.models._messages import ModelDelta
from little_workflow.harness.models._sse import SseEvent
from little_workflow.harness.models._streaming import MalformedStream, ReportedError, parse_data

__all__ = ["OpenAIStream"]


@dataclass
class _Call:
    id: str | None = None
    name: str | None = None
    arguments: list[str] = field(default_factory=list)


def _string(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise MalformedStream(f"{where} is a {type(value).__name__}, not a string")


class OpenAIStream:
    """The accumulator of one streamed chat completion (see the module docstring)."""

    missing = "data: [DONE]"

    def __init__(self) -> None:
        self.done = False
        self._id: str | None = None
        self._model: str | None = None
        self._content: list[str] = []
        self._reasoning: dict[str, list[str]] = {"reasoning_content": [], "reasoning": []}
        self._calls: dict[int, _Call] = {}
        self._finish: str | None = None
        self._usage: dict[str, object] | None = None

    def feed(self, event: SseEvent) -> list[ModelDelta]:
        """The deltas of one chunk."""
        if event.data.strip() == "[DONE]":
            self.done = True
            return []
        chunk = parse_data(event)
        if chunk.get("error") is not None:
            raise ReportedError(chunk["error"])
        if self._id is None and isinstance(chunk.get("id"), str):
            self._id = str(chunk["id"])
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = str(chunk["model"])
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if choices is None:
            return []
        if not isinstance(choices, list):
            raise MalformedStream(f"choices is a {type(choices).__name__}, not a list")
        deltas: list[ModelDelta] = []
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise MalformedStream(f"choices[{position}] is not an object")
            if choice.get("index", 0) != 0:
                continue  # only the first choice is read, as ``complete`` reads it
            deltas.extend(self._choice(choice, f"choices[{position}]"))
        return deltas

    def _choice(self, choice: dict[str, object], where: str) -> list[ModelDelta]:
        finish = _string(choice.get("finish_reason"), f"{where}.finish_reason")
        if finish:
            self._finish = finish
        delta = choice.get("delta")
        if delta is None:
            return []
        if not isinstance(delta, dict):
            raise MalformedStream(f"{where}.delta is a {type(delta).__name__}, not an object")
        deltas: list[ModelDelta] = []
        for key, pieces in self._reasoning.items():
            text = _string(delta.get(key), f"{where}.delta.{key}")
            if text:
                pieces.append(text)
                deltas.append(ModelDelta(kind="reasoning", text=text))
        text = _string(delta.get("content"), f"{where}.delta.content")
        if text:
            self._content.append(text)
            deltas.append(ModelDelta(kind="text", text=text))
        calls = delta.get("tool_calls")
        if calls is None:
            return deltas
        if not isinstance(calls, list):
            raise MalformedStream(f"{where}.delta.tool_calls is not a list")
        for position, piece in enumerate(calls):
            found = self._call_piece(piece, f"{where}.delta.tool_calls[{position}]", position)
            if found is not None:
                deltas.append(found)
        return deltas

    def _call_piece(self, piece: object, where: str, position: int) -> ModelDelta | None:
        if not isinstance(piece, dict):
            raise MalformedStream(f"{where} is not an object")
        index = piece.get("index", position)
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise MalformedStream(f"{where}.index is not a non-negative integer: {index!r}")
        function = piece.get("function")
        if function is None:
            function = {}
        if not isinstance(function, dict):
            raise MalformedStream(f"{where}.function is not an object")
        call = self._calls.setdefault(index, _Call())
        new_id = new_name = None
        call_id = _string(piece.get("id"), f"{where}.id")
        if call_id and call.id is None:
            call.id = new_id = call_id
        name = _string(function.get("name"), f"{where}.function.name")
        if name and call.name is None:
            call.name = new_name = name
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some servers send the object itself, whole
            arguments = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
        text = _string(arguments, f"{where}.function.arguments") or ""
        if text:
            call.arguments.append(text)
        if not (new_id or new_name or text):
            return None
        return ModelDelta(
            kind="tool_call", index=index, tool_call_id=new_id, name=new_name, text=text
        )

    def body(self) -> dict[str, object]:
        """The completion as ``chat/completions`` answers it without streaming."""
        message: dict[str, object] = {
            "role": "assistant",
            "content": "".join(self._content) if self._content else None,
        }
        for key, pieces in self._reasoning.items():
            if pieces:
                message[key] = "".join(pieces)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name or "", "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(self._calls.items())
            ]
        data: dict[str, object] = {
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
            "usage": self._usage or {},
        }
        if self._id is not None:
            data["id"] = self._id
        if self._model is not None:
            data["model"] = self._model
        return data
