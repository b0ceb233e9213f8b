"""The Messages API stream, accumulated: its events to the message they describe.

``message_start`` holds the message without content (id, model, the input usage);
each content block comes as ``content_block_start`` (the block, empty), deltas
(``text_delta``, ``thinking_delta`` and ``signature_delta`` for thinking,
``input_json_delta`` with fragments of a ``tool_use`` block's input JSON) and
``content_block_stop``; ``message_delta`` gives the stop reason and the output usage;
``message_stop`` ends the stream. ``ping`` and event types this module does not know
are skipped, as the API asks; ``error`` is an error. ``body`` gives the message the API
would have answered whole, which the provider reads as ``complete`` reads its answer.

The input of the forced answer tool (structured output) is the answer's text: its
fragments are handed out as ``text`` deltas, not as a tool call's.
"""

from __future__ import annotations

import json
from typing import Literal

from little_workflow.harness.models._messages import ModelDelta
from little_workflow.harness.models._sse import SseEvent
from little_workflow.harness.models._streaming import MalformedStream, ReportedError, parse_data

__all__ = ["AnthropicStream"]

_KNOWN = frozenset(
    {
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
    }
)
#: A delta's type: the block type it belongs to, its field, the kind of delta it gives.
_DELTAS: dict[str, tuple[str, str, Literal["text", "reasoning", "tool_call"] | None]] = {
    "text_delta": ("text", "text", "text"),
    "thinking_delta": ("thinking", "thinking", "reasoning"),
    "signature_delta": ("thinking", "signature", None),
    "input_json_delta": ("tool_use", "partial_json", "tool_call"),
}


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise MalformedStream(f"{where} is a {type(value).__name__}, not a string")
    return value


class _Block:
    def __init__(self, block: dict[str, object], tool_index: int | None) -> None:
        self.block = block
        self.tool_index = tool_index
        self.partial: list[str] = []
        self.stopped = False

    @property
    def kind(self) -> object:
        return self.block.get("type")

    def finished(self, where: str) -> dict[str, object]:
        if self.kind == "tool_use" and self.partial:
            text = "".join(self.partial)
            try:
                value = json.loads(text)
            except ValueError as exc:
                raise MalformedStream(
                    f"{where}: the tool input's JSON does not parse: {exc}"
                ) from None
            if not isinstance(value, dict):
                raise MalformedStream(f"{where}: the tool input is not a JSON object")
            self.block["input"] = value
            self.partial = []
        return self.block


class AnthropicStream:
    """The accumulator of one streamed message (see the module docstring).

    ``answer_tool`` names the forced answer tool of a structured-output request.
    """

    missing = "message_stop"

    def __init__(self, answer_tool: str | None = None) -> None:
        self.done = False
        self._answer_tool = answer_tool
        self._message: dict[str, object] | None = None
        self._usage: dict[str, object] = {}
        self._blocks: dict[int, _Block] = {}
        self._tools = 0

    def feed(self, event: SseEvent) -> list[ModelDelta]:
        """The deltas of one event."""
        if event.event == "ping":
            return []
        data = parse_data(event)
        kind = data.get("type", event.event)
        if kind == "error" or event.event == "error":
            raise ReportedError(data.get("error"))
        if kind == "message_start":
            self._start(data)
            return []
        if kind not in _KNOWN:
            return []  # an event type added after this client: skipped, as the API asks
        if self._message is None:
            raise MalformedStream(f"{kind} before message_start")
        if kind == "message_delta":
            self._message_delta(self._message, data)
        elif kind == "message_stop":
            self.done = True
        else:
            return self._content_event(str(kind), data)
        return []

    def _message_delta(self, message: dict[str, object], data: dict[str, object]) -> None:
        delta = data.get("delta")
        if isinstance(delta, dict):
            for key in ("stop_reason", "stop_sequence"):
                if delta.get(key) is not None:
                    message[key] = delta[key]
        usage = data.get("usage")
        if isinstance(usage, dict):
            # Cumulative figures: the later ones replace the start's.
            self._usage.update({k: v for k, v in usage.items() if v is not None})

    def _content_event(self, kind: str, data: dict[str, object]) -> list[ModelDelta]:
        index = data.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise MalformedStream(f"{kind}.index is not a non-negative integer: {index!r}")
        if kind == "content_block_start":
            return self._block_start(index, data.get("content_block"))
        block = self._blocks.get(index)
        if block is None or block.stopped:
            raise MalformedStream(f"{kind} for content block {index}, which is not open")
        if kind == "content_block_stop":
            block.finished(f"content block {index}")
            block.stopped = True
            return []
        return self._block_delta(index, block, data.get("delta"))

    def _start(self, data: dict[str, object]) -> None:
        message = data.get("message")
        if not isinstance(message, dict):
            raise MalformedStream("message_start has no message object")
        if self._message is not None:
            raise MalformedStream("a second message_start")
        self._message = dict(message)
        usage = message.get("usage")
        if isinstance(usage, dict):
            self._usage = {k: v for k, v in usage.items() if v is not None}

    def _block_start(self, index: int, content: object) -> list[ModelDelta]:
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            raise MalformedStream(f"content_block_start {index} has no content_block with a type")
        if index in self._blocks:
            raise MalformedStream(f"content block {index} started twice")
        block = dict(content)
        kind = block["type"]
        tool_index: int | None = None
        deltas: list[ModelDelta] = []
        if kind == "tool_use" and block.get("name") != self._answer_tool:
            tool_index, self._tools = self._tools, self._tools + 1
            deltas.append(
                ModelDelta(
                    kind="tool_call",
                    index=tool_index,
                    tool_call_id=_text(block.get("id"), f"content block {index}.id"),
                    name=_text(block.get("name"), f"content block {index}.name"),
                )
            )
        elif kind == "text" and block.get("text"):
            deltas.append(ModelDelta(kind="text", text=_text(block["text"], "text")))
        elif kind == "thinking" and block.get("thinking"):
            deltas.append(ModelDelta(kind="reasoning", text=_text(block["thinking"], "thinking")))
        self._blocks[index] = _Block(block, tool_index)
        return deltas

    def _block_delta(self, index: int, block: _Block, delta: object) -> list[ModelDelta]:
        where = f"content block {index}"
        if not isinstance(delta, dict):
            raise MalformedStream(f"content_block_delta for {where} has no delta object")
        kind = delta.get("type")
        if kind not in _DELTAS:
            return []  # a delta added after this client (citations, ...): skipped
        block_kind, field, delta_kind = _DELTAS[str(kind)]
        if block.kind != block_kind:
            raise MalformedStream(f"a {kind} for {where}, a {block.kind} block")
        text = _text(delta.get(field), f"{where}'s {kind}.{field}")
        if kind == "input_json_delta":
            block.partial.append(text)
            if block.tool_index is None:  # the answer tool: its input is the answer's text
                delta_kind = "text"
        else:
            key = "text" if kind == "text_delta" else field
            block.block[key] = str(block.block.get(key) or "") + text
        if not text or delta_kind is None:
            return []
        if delta_kind == "tool_call":
            return [ModelDelta(kind="tool_call", index=block.tool_index or 0, text=text)]
        return [ModelDelta(kind=delta_kind, text=text)]

    def body(self) -> dict[str, object]:
        """The message as ``v1/messages`` answers it without streaming."""
        data = dict(self._message or {})
        data["content"] = [
            self._blocks[index].finished(f"content block {index}") for index in sorted(self._blocks)
        ]
        data["usage"] = self._usage
        return data
