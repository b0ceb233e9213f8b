"""The deterministic ``scripted`` provider, and the script it shares with the fake servers.

A ``Script`` answers provider-neutral requests from a list of replies or from a function
of the request. ``ScriptedProvider`` answers from one in-process; ``FakeModelServer``
(``little_workflow.testing.fake_models``) answers from one over the OpenAI and Anthropic
wire formats, so one script drives any of the three providers.

A reply may be written loosely (see ``ScriptReply``); ``to_model_response`` turns it into
a ``ModelResponse``. Response ids are a hash of the request and the answer, not of a call
counter: a call re-issued after a crash, by a process whose counter restarted, gets the
same id for the same answer, so the item log recognizes it as the turn it already has.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Literal, TypeAlias, overload

from pydantic import ValidationError

from little_workflow.codec import sha256_digest
from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models._messages import (
    Message,
    ModelRequest,
    ModelResponse,
    ReasoningPart,
    TextPart,
    Usage,
)
from little_workflow.harness.models._provider import DeltaSink
from little_workflow.harness.models._streaming import GuardedSink, deltas_of

__all__ = [
    "Script",
    "ScriptFunction",
    "ScriptReply",
    "ScriptedProvider",
    "estimated_usage",
    "first_user_message",
    "scripted",
    "system_prompt",
    "to_model_response",
    "tool_results",
    "turns",
]

#: One scripted answer:
#:
#: * a ``ModelResponse``, used as it is;
#: * a ``Message`` (role ``assistant``), or a ``str`` meaning an assistant text answer;
#: * a ``dict`` shaped like a Message (``{"content": ..., "tool_calls": [...]}``; the role
#:   defaults to ``assistant``, a tool call without ``id`` gets a deterministic one;
#:   ``"usage"`` may sit beside them), or like a ModelResponse (``{"message": {...},
#:   "finish_reason": ..., "usage": {...}}``, ``id`` and ``model`` optional), or an error
#:   ``{"error": {"status": 429, "message": "..."}}`` which raises ``ModelProviderError``
#:   (and which a fake server answers with that HTTP status);
#: * an exception instance, raised as it is.
#:
#: ``"usage"`` is the ``Usage`` the answer reports (``{"input_tokens": 1200,
#: "output_tokens": 80, "cached_input_tokens": 1000, "cache_write_tokens": 0,
#: "reasoning_tokens": 30}``, any field left out is 0); the scripted provider returns it
#: and the fake servers put it in their wire usage fields, so every provider reports the
#: same. A reply without one reports ``estimated_usage``, never zero. The dict forms are
#: plain JSON, so a script can live in a file.
ScriptReply: TypeAlias = ModelResponse | Message | str | Mapping[str, object] | BaseException

#: A function of the request that returns a reply; it may be ``async``.
ScriptFunction: TypeAlias = Callable[[ModelRequest], ScriptReply | Awaitable[ScriptReply]]

Sleep: TypeAlias = Callable[[float], Awaitable[None]]

_PROVIDER = "scripted"
_CHARACTERS_PER_TOKEN = 4


def _invalid(index: int | None, problem: str) -> ModelProviderError:
    which = f"scripted reply #{index}" if index is not None else "the scripted reply"
    return ModelProviderError(
        f"{which} {problem}; fix the script (see ScriptReply for the accepted forms)",
        provider=_PROVIDER,
    )


def _error_item(error: object, index: int | None) -> ModelProviderError:
    if not isinstance(error, Mapping):
        raise _invalid(index, 'has an "error" that is not an object with status and message')
    status = error.get("status")
    if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
        raise _invalid(index, f'has an "error" status {status!r} that is not an HTTP error')
    message = str(error.get("message") or "scripted error")
    return ModelProviderError(
        message,
        provider=_PROVIDER,
        status=status,
        retryable=status is not None and (status == 429 or status >= 500),
    )


def _fill_tool_call_ids(data: dict[str, object], request: ModelRequest) -> dict[str, object]:
    key = "tool_calls" if "tool_calls" in data else "toolCalls"
    calls = data.get(key)
    if not isinstance(calls, list | tuple) or all(
        not isinstance(call, Mapping) or "id" in call for call in calls
    ):
        return data
    # Ids must be unique within a conversation; the request differs every turn, so a
    # digest of it makes the filled-in ids differ across turns and stay reproducible.
    seed = sha256_digest(request.model_dump(mode="json"), trusted=True)[7:19]
    filled: list[object] = []
    for position, call in enumerate(calls):
        if isinstance(call, Mapping) and "id" not in call:
            filled.append({"id": f"call_{seed}_{position}", **call})
        else:
            filled.append(call)
    return {**data, key: filled}


def _message(data: object, request: ModelRequest, index: int | None) -> Message:
    if isinstance(data, Message):
        message = data
    elif isinstance(data, str):
        message = Message(role="assistant", content=data)
    elif isinstance(data, Mapping):
        fields = _fill_tool_call_ids({"role": "assistant", **data}, request)
        try:
            message = Message.model_validate(fields)
        except ValidationError as exc:
            raise _invalid(index, f"is not a valid assistant message: {exc}") from exc
    else:
        raise _invalid(index, f"is a {type(data).__name__}, which is not a reply")
    if message.role != "assistant":
        raise _invalid(index, f"has role {message.role!r}; a model answers as 'assistant'")
    return message


def to_model_response(
    reply: ScriptReply, request: ModelRequest, *, index: int | None = None
) -> ModelResponse:
    """The ``ModelResponse`` a scripted ``reply`` stands for, in answer to ``request``.

    Raises the reply if it is an exception, ``ModelProviderError`` if it is an error item
    or not a valid reply. ``index`` (the reply's place in its script) only improves the
    error messages. Missing fields are filled deterministically: ``model`` from the
    request, ``finish_reason`` from whether the message asks for tools, ``id`` from a
    hash of the request and the answer.
    """
    if isinstance(reply, BaseException):
        raise reply
    if isinstance(reply, ModelResponse):
        _check_usage(reply.usage, index)
        return reply
    extra: Mapping[str, object] = {}
    if isinstance(reply, Mapping):
        if "error" in reply:
            raise _error_item(reply["error"], index)
        if "message" in reply:
            extra = reply
            message = _message(reply["message"], request, index)
        else:
            # A message-shaped reply may say its usage beside the message's fields.
            extra = {"usage": reply["usage"]} if "usage" in reply else {}
            fields = {key: value for key, value in reply.items() if key != "usage"}
            message = _message(fields, request, index)
    else:
        message = _message(reply, request, index)
    finish_reason = extra.get("finish_reason", extra.get("finishReason"))
    if finish_reason is None:
        finish_reason = "tool_calls" if message.tool_calls else "stop"
    response_id = extra.get("id")
    if response_id is None:
        digest = sha256_digest(
            {
                "request": request.model_dump(mode="json"),
                "message": message.model_dump(mode="json"),
                "finishReason": finish_reason,
            },
            trusted=True,
        )
        response_id = f"scripted-{digest[7:27]}"
    usage = extra.get("usage")
    try:
        response = ModelResponse.model_validate(
            {
                "id": response_id,
                "model": extra.get("model", request.model),
                "message": message,
                "finish_reason": finish_reason,
                "usage": estimated_usage(request, message) if usage is None else usage,
            }
        )
    except ValidationError as exc:
        raise _invalid(index, f"is not a valid response: {exc}") from exc
    _check_usage(response.usage, index)
    return response


def _check_usage(usage: Usage, index: int | None) -> None:
    # What a real API could not report, and what no wire format could carry back
    # unchanged (Anthropic's input_tokens is the uncached rest of the input).
    if usage.cached_input_tokens + usage.cache_write_tokens > usage.input_tokens:
        raise _invalid(
            index,
            f"has a usage whose cached_input_tokens ({usage.cached_input_tokens}) and "
            f"cache_write_tokens ({usage.cache_write_tokens}) add up to more than its "
            f"input_tokens ({usage.input_tokens}), which count them",
        )
    if usage.reasoning_tokens > usage.output_tokens:
        raise _invalid(
            index,
            f"has a usage whose reasoning_tokens ({usage.reasoning_tokens}) are more than "
            f"its output_tokens ({usage.output_tokens}), which count them",
        )


def _tokens(characters: int) -> int:
    return -(-characters // _CHARACTERS_PER_TOKEN)


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _calls_characters(message: Message) -> int:
    return sum(len(call.name) + len(_compact(call.arguments)) for call in message.tool_calls)


def _asked_characters(request: ModelRequest) -> int:
    # What every wire format carries: the text, media and tool calls of each message,
    # the tools offered. Not what one of them drops (a tool result's is_error on Chat
    # Completions) or reshapes, so the fakes of both formats count what this one does.
    count = 0
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, TextPart):
                count += len(part.text)
            elif not isinstance(part, ReasoningPart):  # earlier thinking is not input
                count += len(part.data or part.url or "")
        count += _calls_characters(message)
    for tool in request.tools:
        count += len(tool.name) + len(tool.description) + len(_compact(tool.parameters))
    return count


def estimated_usage(request: ModelRequest, message: Message) -> Usage:
    """The usage a scripted answer reports when its reply says none: a plausible count.

    About four characters a token, rounded up, and at least one: ``input_tokens`` from
    the request (the text and media of its messages, their tool calls as name and JSON
    arguments, the tools offered as name, description and JSON schema), plus four a
    message for its role; ``output_tokens`` from the answer's text, reasoning and tool
    calls; ``reasoning_tokens`` from its reasoning alone (0 without); nothing cached. A
    function of the request and the answer only: a call re-issued after a crash
    reports the same, and the fake servers, which count the request as it arrived,
    report what the scripted provider does for a conversation their format carries
    as it is (Anthropic's, for one, joins consecutive system messages).
    """
    reasoning = sum(
        len(part.text or part.data or "")
        for part in message.parts
        if isinstance(part, ReasoningPart)
    )
    written = sum(len(part.text) for part in message.parts if isinstance(part, TextPart))
    written += _calls_characters(message)
    return Usage(
        input_tokens=max(_tokens(_asked_characters(request)) + 4 * len(request.messages), 1),
        output_tokens=max(_tokens(written + reasoning), 1),
        reasoning_tokens=_tokens(reasoning),
    )


class Script:
    """Replies to requests in order (a list) or by computing them (a function).

    ``index_by="call"`` gives the n-th call the n-th reply. ``index_by="turn"`` picks
    the reply by the number of assistant messages already in the request, so the answer
    is a function of the conversation alone: a process that restarts mid-conversation
    and re-issues a call gets the same reply. ``calls`` counts the requests answered or
    refused. Safe to share between threads (the fake server answers from several).
    """

    def __init__(
        self,
        replies: Sequence[ScriptReply] | ScriptFunction,
        *,
        index_by: Literal["call", "turn"] = "call",
    ) -> None:
        if isinstance(replies, str | bytes | Mapping | Message | ModelResponse):
            raise ConfigError(
                "a script is a list of replies or a function of the request, "
                f"not a single {type(replies).__name__}: wrap it in a list"
            )
        self._function: ScriptFunction | None = None
        self._replies: tuple[ScriptReply, ...] = ()
        if callable(replies):
            self._function = replies
        else:
            self._replies = tuple(replies)
        self.index_by = index_by
        self.calls = 0
        self._lock = threading.Lock()

    async def respond(self, request: ModelRequest) -> ModelResponse:
        """The response to ``request``; ``ModelProviderError`` when the script has none."""
        with self._lock:
            call = self.calls
            self.calls += 1
        if self._function is not None:
            reply = self._function(request)
            if inspect.isawaitable(reply):
                reply = await reply
            return to_model_response(reply, request)
        if self.index_by == "turn":
            index = sum(1 for message in request.messages if message.role == "assistant")
            which = f"turn {index + 1} (the request holds {index} assistant messages)"
        else:
            index = call
            which = f"call {index + 1}"
        if index >= len(self._replies):
            raise ModelProviderError(
                f"scripted model has no reply for {which}: its script holds "
                f"{len(self._replies)} replies; add replies, or script a function of the request",
                provider=_PROVIDER,
            )
        return to_model_response(self._replies[index], request, index=index)


class ScriptedProvider:
    """A ``ModelProvider`` that answers from a ``Script``: for tests and the demo.

    ``delay`` seconds are awaited (through ``sleep``, injectable so tests do not wait)
    before each answer. ``calls`` counts ``complete`` calls and ``requests`` keeps them.
    It has no transport, so it never retries: an error item is raised at once.
    """

    kind: str = "scripted"

    def __init__(
        self,
        script: Script | Sequence[ScriptReply] | ScriptFunction,
        *,
        delay: float = 0.0,
        sleep: Sleep = asyncio.sleep,
        index_by: Literal["call", "turn"] = "call",
    ) -> None:
        if delay < 0:
            raise ConfigError(f"delay must be zero or more seconds, not {delay!r}")
        self.script = script if isinstance(script, Script) else Script(script, index_by=index_by)
        self.delay = delay
        self._sleep = sleep
        self.calls = 0
        self.requests: list[ModelRequest] = []

    def __repr__(self) -> str:
        return f"ScriptedProvider(calls={self.calls}, delay={self.delay})"

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """The script's response to ``request``, after ``delay``."""
        self.calls += 1
        self.requests.append(request)
        if self.delay:
            await self._sleep(self.delay)
        return await self.script.respond(request)

    async def stream(self, request: ModelRequest, on_delta: DeltaSink) -> ModelResponse:
        """``complete``'s response, its pieces handed to ``on_delta`` first (``deltas_of``).

        The whole answer is made before the first delta: a script error is raised
        before any, as a real server's refusal would be.
        """
        response = await self.complete(request)
        sink = GuardedSink(on_delta, self.kind)
        for delta in deltas_of(response):
            await sink(delta)
        sink.close()
        return response

    async def aclose(self) -> None:
        """Nothing to release."""


# Helpers for a script written as a function of the request (``scripted(answer)``): what
# a stand-in model usually decides on. Each reads the request alone, so the answer is the
# same for a call re-issued after a crash (docs/harness.md, "The scripted provider").


def system_prompt(request: ModelRequest) -> str:
    """The request's system message (an agent's instructions), or ``""``."""
    return next((m.text or "" for m in request.messages if m.role == "system"), "")


def first_user_message(request: ModelRequest) -> str:
    """The session's first user message: the step's prompt, or ``""``."""
    return next((m.text or "" for m in request.messages if m.role == "user"), "")


def turns(request: ModelRequest) -> int:
    """How many answers the model already gave in this conversation (``index_by="turn"``)."""
    return sum(1 for m in request.messages if m.role == "assistant")


def tool_results(request: ModelRequest) -> list[Message]:
    """The tool results that answer the model's latest tool calls, in order."""
    results: list[Message] = []
    for message in reversed(request.messages):
        if message.role != "tool":
            break
        results.append(message)
    return results[::-1]


@overload
def scripted(
    function: ScriptFunction,
    /,
    *,
    delay: float = ...,
    sleep: Sleep = ...,
) -> ScriptedProvider: ...


@overload
def scripted(
    *replies: ScriptReply,
    delay: float = ...,
    sleep: Sleep = ...,
    index_by: Literal["call", "turn"] = ...,
) -> ScriptedProvider: ...


def scripted(
    *replies: ScriptReply | ScriptFunction,
    delay: float = 0.0,
    sleep: Sleep = asyncio.sleep,
    index_by: Literal["call", "turn"] = "call",
) -> ScriptedProvider:
    """A ``ScriptedProvider``: ``scripted("hi", {"tool_calls": [...]})`` or ``scripted(fn)``."""
    if len(replies) == 1 and callable(replies[0]) and not isinstance(replies[0], BaseException):
        return ScriptedProvider(replies[0], delay=delay, sleep=sleep)
    items: list[ScriptReply] = []
    for reply in replies:
        if callable(reply) and not isinstance(reply, BaseException):
            raise ConfigError("scripted() takes one function, or replies only, not both")
        items.append(reply)
    return ScriptedProvider(items, delay=delay, sleep=sleep, index_by=index_by)
