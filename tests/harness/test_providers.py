"""The three model providers: the conformance suite, then each one's wire format."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from little_workflow.errors import ConfigError, ModelProviderError
from little_workflow.harness.models import (
    RAW_ARGUMENTS_KEY,
    AnthropicProvider,
    Message,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleProvider,
    ReasoningPart,
    Script,
    ScriptedProvider,
    ScriptReply,
    TextPart,
    ToolCall,
    ToolSpec,
    Usage,
    dump_arguments,
    estimated_usage,
    parse_arguments,
    scripted,
    to_model_response,
)
from little_workflow.testing.fake_models import FakeModelServer
from little_workflow.testing.provider_conformance import (
    BuiltinProviders,
    ModelProviderConformance,
)

KEY = "sk-test-0123456789abcdef"


class TestProviderConformance(ModelProviderConformance):
    @pytest.fixture(params=BuiltinProviders.KINDS)
    async def open_provider(
        self, request: pytest.FixtureRequest
    ) -> AsyncIterator[BuiltinProviders]:
        providers = BuiltinProviders(request.param)
        yield providers
        await providers.aclose()


class Sleeps:
    """An injected sleep that records and returns at once."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(["Done."], api_key=KEY) as running:
        yield running


def openai(server: FakeModelServer, **options: object) -> OpenAICompatibleProvider:
    return OpenAICompatibleProvider(
        server.openai_base_url,
        environ={"OPENAI_API_KEY": KEY},
        sleep=Sleeps(),
        **options,  # type: ignore[arg-type]
    )


def anthropic(server: FakeModelServer, **options: object) -> AnthropicProvider:
    return AnthropicProvider(
        server.url,
        environ={"ANTHROPIC_API_KEY": KEY},
        sleep=Sleeps(),
        **options,  # type: ignore[arg-type]
    )


SEARCH = ToolSpec(
    name="search",
    description="Search the notes.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
NO_DOC = ToolSpec(name="now")

#: A conversation with everything a wire format must carry: a system prompt, tools, an
#: assistant turn with text and two tool calls, their results (one failed), a user turn.
CONVERSATION = ModelRequest(
    model="the-model",
    messages=(
        Message(role="system", content="Be brief."),
        Message(role="user", content="Find the notes on Paris."),
        Message(
            role="assistant",
            content="Searching.",
            tool_calls=(
                ToolCall(id="call_1", name="search", arguments={"q": "Paris"}),
                ToolCall(id="call_2", name="now"),
            ),
        ),
        Message(role="tool", tool_call_id="call_1", name="search", content="3 notes"),
        Message(role="tool", tool_call_id="call_2", name="now", content="boom", is_error=True),
        Message(role="user", content="And Oslo?"),
    ),
    tools=(SEARCH, NO_DOC),
    temperature=0.5,
    max_tokens=300,
)


# -- OpenAI-compatible wire format ----------------------------------------------------


async def test_openai_sends_the_chat_completions_body(server: FakeModelServer) -> None:
    provider = openai(server)
    try:
        await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    recorded = server.last_request
    assert (recorded.method, recorded.path, recorded.status) == (
        "POST",
        "/v1/chat/completions",
        200,
    )
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert recorded.headers["content-type"] == "application/json"
    assert recorded.body == {
        "model": "the-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Find the notes on Paris."},
            {
                "role": "assistant",
                "content": "Searching.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "search", "arguments": '{"q":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "now", "arguments": "{}"},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "3 notes"},
            {"role": "tool", "tool_call_id": "call_2", "content": "boom"},
            {"role": "user", "content": "And Oslo?"},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search the notes.",
                    "parameters": SEARCH.parameters,
                },
            },
            {
                "type": "function",
                "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
            },
        ],
        "temperature": 0.5,
        "max_tokens": 300,
    }


async def test_openai_max_completion_tokens_for_newer_models(server: FakeModelServer) -> None:
    provider = openai(server, max_tokens_param="max_completion_tokens")
    try:
        await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert server.last_request.body["max_completion_tokens"] == 300
    assert "max_tokens" not in server.last_request.body


async def test_openai_without_a_key_sends_no_authorization() -> None:
    with FakeModelServer(["local"]) as local:
        provider = OpenAICompatibleProvider(local.openai_base_url, environ={})
        try:
            response = await provider.complete(CONVERSATION)
        finally:
            await provider.aclose()
        assert response.message.content == "local"
        assert "authorization" not in local.last_request.headers
        assert "unset" in repr(provider)


async def test_missing_key_names_the_variable(server: FakeModelServer) -> None:
    provider = OpenAICompatibleProvider(
        server.openai_base_url, api_key_env="MY_LLM_KEY", environ={}
    )
    try:
        with pytest.raises(ModelProviderError, match="set the environment variable MY_LLM_KEY"):
            await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()


async def test_key_is_read_from_the_process_environment(
    server: FakeModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    provider = OpenAICompatibleProvider(server.openai_base_url)
    monkeypatch.delenv("OPENAI_API_KEY")  # read once, when built
    try:
        await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert server.last_request.headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(provider)


async def test_openai_also_serves_the_unversioned_path() -> None:
    with FakeModelServer(["plain"]) as local:
        provider = OpenAICompatibleProvider(local.url, environ={})
        try:
            await provider.complete(CONVERSATION)
        finally:
            await provider.aclose()
        assert local.last_request.path == "/chat/completions"


def test_arguments_parse_and_dump() -> None:
    assert parse_arguments('{"q": "x", "n": [1, 2]}') == {"q": "x", "n": [1, 2]}
    assert parse_arguments("") == parse_arguments(None) == {}
    assert parse_arguments({"q": "x"}) == {"q": "x"}
    for bad in ('{"q": "x"', "[1, 2]", '"text"', '{"n": NaN}'):
        assert parse_arguments(bad) == {RAW_ARGUMENTS_KEY: bad}
        assert dump_arguments(parse_arguments(bad)) == bad
    assert dump_arguments({"q": "ü"}) == '{"q":"ü"}'


async def test_openai_keeps_malformed_arguments_raw_and_sends_them_back() -> None:
    raw = '{"q": "Paris"'  # cut off, as small models do
    broken = {
        "tool_calls": [{"id": "call_x", "name": "search", "arguments": {RAW_ARGUMENTS_KEY: raw}}]
    }
    with FakeModelServer([broken, "ok"]) as local:
        provider = OpenAICompatibleProvider(local.openai_base_url, environ={})
        try:
            first = await provider.complete(CONVERSATION)
            assert (
                local.last_request.response["choices"][0]["message"]["tool_calls"][0]["function"][
                    "arguments"
                ]
                == raw
            )
            assert first.message.tool_calls[0].arguments == {RAW_ARGUMENTS_KEY: raw}
            result = Message(role="tool", tool_call_id="call_x", content="bad arguments")
            follow_up = CONVERSATION.model_copy(
                update={"messages": (*CONVERSATION.messages, first.message, result)}
            )
            await provider.complete(follow_up)
        finally:
            await provider.aclose()
        sent = local.last_request.body["messages"][-2]["tool_calls"][0]["function"]
        assert sent["arguments"] == raw


def _reply_transport(body: object, status: int = 200) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


async def test_openai_tolerates_local_server_quirks() -> None:
    # No id anywhere, finish_reason "stop" with tool calls, content as parts.
    body = {
        "model": "llama",
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "Calling."}],
                    "tool_calls": [
                        {"type": "function", "function": {"name": "now", "arguments": ""}}
                    ],
                },
                "finish_reason": "stop",
            }
        ],
    }
    async with httpx.AsyncClient(transport=_reply_transport(body)) as client:
        provider = OpenAICompatibleProvider("http://llama.local/v1", client=client, environ={})
        response = await provider.complete(CONVERSATION)
        again = await provider.complete(CONVERSATION)
    assert response.id.startswith("chatcmpl-")
    assert response.id == again.id
    assert response.finish_reason == "tool_calls"
    assert response.message.content == "Calling."
    assert response.message.tool_calls[0].id.startswith("call_")
    assert response.message.tool_calls[0].arguments == {}
    assert (response.usage.input_tokens, response.usage.output_tokens) == (0, 0)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ("<html>bad gateway</html>", 200, "not a JSON object"),
        ({"object": "list"}, 200, "not a chat completion"),
        ({"error": "model 'x' not found"}, 404, "model 'x' not found; check the base URL"),
    ],
)
async def test_openai_bad_answers_are_clear_errors(
    body: object, status: int, fragment: str
) -> None:
    async with httpx.AsyncClient(transport=_reply_transport(body, status)) as client:
        provider = OpenAICompatibleProvider("http://x.local/v1", client=client, environ={})
        with pytest.raises(ModelProviderError, match=fragment) as caught:
            await provider.complete(CONVERSATION)
    assert caught.value.retryable is False
    assert caught.value.provider == "openai"


async def test_connection_refused_is_retryable_and_gives_up() -> None:
    with FakeModelServer() as gone:
        url = gone.openai_base_url
    sleeps = Sleeps()
    provider = OpenAICompatibleProvider(url, environ={}, max_retries=1, sleep=sleeps)
    try:
        with pytest.raises(ModelProviderError, match="gave up after 2 attempts") as caught:
            await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert caught.value.retryable is True
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert sleeps.calls == [0.5]


async def test_backoff_doubles_up_to_the_cap(server: FakeModelServer) -> None:
    server.fail_next(4, status=500)
    sleeps = Sleeps()
    provider = OpenAICompatibleProvider(
        server.openai_base_url,
        environ={"OPENAI_API_KEY": KEY},
        max_retries=4,
        backoff=1.0,
        max_backoff=3.0,
        sleep=sleeps,
    )
    try:
        await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert sleeps.calls == [1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "2.5"}, [2.5]),
        ({"retry-after-ms": "1500", "retry-after": "9"}, [1.5]),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, [0.0]),  # in the past
        ({"retry-after": "Fri, 01 Jan 2100 00:00:00 GMT"}, [60.0]),  # capped
        ({"retry-after": "soon"}, [0.5]),  # unreadable: the backoff
    ],
)
async def test_retry_after_forms(headers: dict[str, str], expected: list[float]) -> None:
    answers = iter(
        [
            httpx.Response(429, headers=headers, json={}),
            httpx.Response(
                200,
                json={
                    "id": "r",
                    "model": "m",
                    "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
                },
            ),
        ]
    )
    transport = httpx.MockTransport(lambda request: next(answers))
    sleeps = Sleeps()
    async with httpx.AsyncClient(transport=transport) as client:
        provider = OpenAICompatibleProvider(
            "http://x.local/v1", client=client, environ={}, sleep=sleeps
        )
        await provider.complete(CONVERSATION)
    assert sleeps.calls == expected


async def test_should_retry_header_overrides_the_status() -> None:
    answer = httpx.Response(
        500, headers={"x-should-retry": "false"}, json={"error": {"message": "no"}}
    )
    transport = httpx.MockTransport(lambda request: answer)
    async with httpx.AsyncClient(transport=transport) as client:
        provider = OpenAICompatibleProvider("http://x.local/v1", client=client, environ={})
        with pytest.raises(ModelProviderError) as caught:
            await provider.complete(CONVERSATION)
    assert (caught.value.status, caught.value.retryable) == (500, False)


def test_bad_retry_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        OpenAICompatibleProvider(max_retries=-1, environ={})
    with pytest.raises(ConfigError):
        AnthropicProvider(default_max_tokens=0, environ={})


# -- Anthropic wire format ------------------------------------------------------------


async def test_anthropic_sends_the_messages_body(server: FakeModelServer) -> None:
    provider = anthropic(server)
    try:
        await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    recorded = server.last_request
    assert (recorded.method, recorded.path, recorded.status) == ("POST", "/v1/messages", 200)
    assert recorded.headers["x-api-key"] == KEY
    assert recorded.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in recorded.headers
    assert recorded.body == {
        "model": "the-model",
        "max_tokens": 300,
        "system": "Be brief.",
        "messages": [
            {"role": "user", "content": "Find the notes on Paris."},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Searching."},
                    {"type": "tool_use", "id": "call_1", "name": "search", "input": {"q": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "now", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "3 notes"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_2",
                        "content": "boom",
                        "is_error": True,
                    },
                    {"type": "text", "text": "And Oslo?"},
                ],
            },
        ],
        "tools": [
            {
                "name": "search",
                "description": "Search the notes.",
                "input_schema": SEARCH.parameters,
            },
            {"name": "now", "input_schema": {"type": "object", "properties": {}}},
        ],
        "temperature": 0.5,
    }
    # The server read the results back as they were sent, the failed one flagged.
    assert recorded.request is not None
    assert recorded.request.messages[3:5] == CONVERSATION.messages[3:5]


async def test_anthropic_defaults_max_tokens_and_joins_system_prompts(
    server: FakeModelServer,
) -> None:
    request = ModelRequest(
        model="claude",
        messages=(
            Message(role="system", content="One."),
            Message(role="system", content="Two."),
            Message(role="user", content="Hi"),
        ),
    )
    provider = anthropic(server, default_max_tokens=1234)
    try:
        await provider.complete(request)
    finally:
        await provider.aclose()
    body = server.last_request.body
    assert (body["max_tokens"], body["system"]) == (1234, "One.\n\nTwo.")
    assert body["messages"] == [{"role": "user", "content": "Hi"}]


async def test_anthropic_parses_the_answer() -> None:
    body = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "search", "input": {"q": "Oslo"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 7},
    }
    async with httpx.AsyncClient(transport=_reply_transport(body)) as client:
        provider = AnthropicProvider("http://a.local", client=client, environ={})
        response = await provider.complete(CONVERSATION)
    assert response == ModelResponse(
        id="msg_01",
        model="claude-x",
        message=Message(
            role="assistant",
            # The signed thinking block is kept: the API wants it back on the next turn.
            content=(
                ReasoningPart(provider="anthropic", text="hmm", signature="s"),
                TextPart(text="Let me check."),
            ),
            tool_calls=(ToolCall(id="toolu_1", name="search", arguments={"q": "Oslo"}),),
        ),
        finish_reason="tool_calls",
        usage={"input_tokens": 100, "output_tokens": 7, "cached_input_tokens": 90},
    )


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("stop_sequence", "stop"),
        ("refusal", "content_filter"),
    ],
)
async def test_anthropic_stop_reasons(stop_reason: str, finish_reason: str) -> None:
    body = {"id": "m", "model": "c", "content": [], "stop_reason": stop_reason, "usage": {}}
    async with httpx.AsyncClient(transport=_reply_transport(body)) as client:
        provider = AnthropicProvider("http://a.local", client=client, environ={})
        response = await provider.complete(CONVERSATION)
    assert response.finish_reason == finish_reason
    assert response.message.content is None


async def test_anthropic_overloaded_is_retried(server: FakeModelServer) -> None:
    server.fail_next(1, status=529, message="Overloaded")
    sleeps = Sleeps()
    provider = AnthropicProvider(server.url, environ={"ANTHROPIC_API_KEY": KEY}, sleep=sleeps)
    try:
        response = await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert response.message.content == "Done."
    assert server.requests[0].response == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    assert sleeps.calls == [0.5]


async def test_anthropic_wrong_key_is_refused_without_leaking(server: FakeModelServer) -> None:
    wrong = "sk-ant-wrong-000000000000"
    provider = AnthropicProvider(server.url, environ={"ANTHROPIC_API_KEY": wrong})
    try:
        with pytest.raises(ModelProviderError, match="ANTHROPIC_API_KEY") as caught:
            await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    assert caught.value.status == 401
    assert server.last_request.response["error"]["type"] == "authentication_error"
    assert wrong not in str(caught.value)


# -- the scripted provider ------------------------------------------------------------


async def test_scripted_counts_calls_and_waits_through_the_injected_sleep() -> None:
    sleeps = Sleeps()
    provider = scripted("one", "two", delay=1.5, sleep=sleeps)
    assert (await provider.complete(CONVERSATION)).message.content == "one"
    assert (await provider.complete(CONVERSATION)).message.content == "two"
    assert (provider.calls, sleeps.calls) == (2, [1.5, 1.5])
    assert provider.requests == [CONVERSATION, CONVERSATION]
    with pytest.raises(ModelProviderError, match="no reply for call 3: its script holds 2"):
        await provider.complete(CONVERSATION)
    assert provider.calls == 3


async def test_scripted_function_sync_or_async() -> None:
    def sync(request: ModelRequest) -> str:
        return f"{len(request.messages)} messages"

    async def asynchronous(request: ModelRequest) -> Message:
        return Message(role="assistant", content=request.model)

    assert (await scripted(sync).complete(CONVERSATION)).message.content == "6 messages"
    assert (await scripted(asynchronous).complete(CONVERSATION)).message.content == "the-model"


async def test_scripted_fills_tool_call_ids_deterministically() -> None:
    reply = {"tool_calls": [{"name": "search", "arguments": {"q": "a"}}, {"name": "now"}]}
    first = await scripted(reply).complete(CONVERSATION)
    again = await scripted(reply).complete(CONVERSATION)
    ids = [call.id for call in first.message.tool_calls]
    assert ids == [call.id for call in again.message.tool_calls]
    assert len(set(ids)) == 2
    assert first.id == again.id
    assert first.finish_reason == "tool_calls"


async def test_scripted_by_turn_answers_a_restarted_conversation_alike() -> None:
    replies = ["first turn", "second turn"]
    one = ScriptedProvider(replies, index_by="turn")
    opening = ModelRequest(model="m", messages=(Message(role="user", content="hi"),))
    first = await one.complete(opening)
    later = opening.model_copy(
        update={
            "messages": (*opening.messages, first.message, Message(role="user", content="more"))
        }
    )
    second = await one.complete(later)
    restarted = ScriptedProvider(replies, index_by="turn")  # a new process, counter at 0
    assert await restarted.complete(later) == second
    with pytest.raises(ModelProviderError, match="no reply for turn 3"):
        await restarted.complete(
            later.model_copy(update={"messages": (*later.messages, second.message)})
        )


async def test_scripted_error_items_and_exceptions() -> None:
    provider = scripted(
        {"error": {"status": 529, "message": "overloaded"}},
        TimeoutError("scripted timeout"),
        {"message": {"content": "x"}, "finish_reason": "length", "usage": {"input_tokens": 3}},
    )
    with pytest.raises(ModelProviderError) as caught:
        await provider.complete(CONVERSATION)
    assert (caught.value.status, caught.value.retryable) == (529, True)
    with pytest.raises(TimeoutError, match="scripted timeout"):
        await provider.complete(CONVERSATION)
    response = await provider.complete(CONVERSATION)
    assert (response.finish_reason, response.usage.input_tokens) == ("length", 3)


@pytest.mark.parametrize(
    ("reply", "fragment"),
    [
        ({"role": "user", "content": "x"}, "has role 'user'"),
        ({"tool_calls": "nope"}, "not a valid assistant message"),
        ({"error": "nope"}, "not an object"),
        ({"error": {"status": 200}}, "not an HTTP error"),
        (42, "is a int"),
    ],
)
def test_invalid_replies_are_named(reply: object, fragment: str) -> None:
    with pytest.raises(ModelProviderError, match=fragment):
        to_model_response(reply, CONVERSATION, index=0)  # type: ignore[arg-type]


def test_a_script_is_not_a_single_reply() -> None:
    with pytest.raises(ConfigError, match="wrap it in a list"):
        Script("hello")
    with pytest.raises(ConfigError, match="one function, or replies"):
        scripted("a", lambda request: "b")  # type: ignore[call-overload]
    with pytest.raises(ConfigError):
        ScriptedProvider(["a"], delay=-1)


def test_scripted_script_is_plain_json() -> None:
    # A script file holds these forms; they survive a JSON round trip unchanged.
    replies = [
        "text",
        {"content": "c", "tool_calls": [{"id": "t", "name": "n", "arguments": {"a": 1}}]},
        {"message": {"content": "m"}, "finish_reason": "length"},
        {"error": {"status": 500, "message": "e"}},
    ]
    assert json.loads(json.dumps(replies)) == replies
    script = Script(json.loads(json.dumps(replies)))
    assert script.calls == 0


# One scripted usage, every field set, comes back the same through every provider: the
# scripted one returns it; Anthropic's fake splits the input into uncached / cache-read /
# cache-write counts and thinking tokens, the provider sums them back; OpenAI's fake
# reports cached, cache-write and reasoning tokens in its detail objects.
FULL_USAGE = Usage(
    input_tokens=1200,
    output_tokens=90,
    cached_input_tokens=1000,
    cache_write_tokens=150,
    reasoning_tokens=40,
)
PROVIDER_KINDS = ("scripted", "openai", "anthropic")


async def complete_through(
    kind: str, replies: list[ScriptReply], request: ModelRequest
) -> ModelResponse:
    """``request`` answered by ``replies`` through the provider of ``kind``."""
    if kind == "scripted":
        return await ScriptedProvider(replies).complete(request)
    with FakeModelServer(replies) as local:
        provider = anthropic(local) if kind == "anthropic" else openai(local)
        try:
            return await provider.complete(request)
        finally:
            await provider.aclose()


@pytest.mark.parametrize("kind", PROVIDER_KINDS)
@pytest.mark.parametrize(
    "reply",
    [
        {"message": {"role": "assistant", "content": "ok"}, "usage": FULL_USAGE.model_dump()},
        {"content": "ok", "usage": FULL_USAGE.model_dump()},
        ModelResponse(
            id="resp-1",
            model="the-model",
            message=Message(role="assistant", content="ok"),
            finish_reason="stop",
            usage=FULL_USAGE,
        ),
    ],
    ids=["response-dict", "message-dict", "model-response"],
)
async def test_scripted_usage_is_what_every_provider_reports(kind: str, reply: ScriptReply) -> None:
    response = await complete_through(kind, [reply], CONVERSATION)
    assert response.message.text == "ok"
    assert response.usage == FULL_USAGE


@pytest.mark.parametrize("kind", PROVIDER_KINDS)
async def test_scripted_usage_of_a_tool_call_with_reasoning(kind: str) -> None:
    usage = Usage(input_tokens=50, output_tokens=30, reasoning_tokens=12)
    reply = {
        "content": [{"type": "reasoning", "provider": kind, "text": "Look it up."}],
        "tool_calls": [{"id": "call_9", "name": "search", "arguments": {"q": "Rome"}}],
        "usage": usage.model_dump(),
    }
    response = await complete_through(kind, [reply], CONVERSATION)
    assert [(c.name, c.arguments) for c in response.message.tool_calls] == [
        ("search", {"q": "Rome"})
    ]
    assert response.usage == usage


async def test_without_scripted_usage_every_provider_reports_the_same_estimate() -> None:
    answers: list[ScriptReply] = [
        "Paris has three notes.",
        {"tool_calls": [{"id": "call_7", "name": "search", "arguments": {"q": "Lyon"}}]},
    ]
    for answer in answers:
        usages = {
            kind: (await complete_through(kind, [answer], CONVERSATION)).usage
            for kind in PROVIDER_KINDS
        }
        expected = to_model_response(answer, CONVERSATION).usage
        assert usages == dict.fromkeys(PROVIDER_KINDS, expected)
        assert expected.input_tokens > 0
        assert expected.output_tokens > 0


def test_estimated_usage_counts_about_four_characters_a_token() -> None:
    short = ModelRequest(model="m", messages=(Message(role="user", content="hi"),))
    longer = ModelRequest(model="m", messages=(Message(role="user", content="hi" + "x" * 800),))
    text = estimated_usage(short, Message(role="assistant", content="x" * 401))
    assert (text.output_tokens, text.reasoning_tokens) == (101, 0)  # 401 / 4, rounded up
    assert (text.cached_input_tokens, text.cache_write_tokens) == (0, 0)
    # 800 more characters of request: 200 more tokens.
    assert estimated_usage(longer, Message(role="assistant", content="x")).input_tokens == (
        text.input_tokens + 200
    )
    empty = estimated_usage(short, Message(role="assistant", content=""))
    assert empty.output_tokens == 1  # never zero
    thought = Message(
        role="assistant",
        content=(
            ReasoningPart(provider="anthropic", text="t" * 40),
            TextPart(text="y" * 20),
        ),
        tool_calls=(ToolCall(id="c", name="abcd", arguments={"q": "z"}),),
    )
    # 40 of thinking, 20 of text, 4 of name and 9 of arguments ({"q":"z"}).
    assert estimated_usage(short, thought).reasoning_tokens == 10
    assert estimated_usage(short, thought).output_tokens == 19  # 73 / 4, rounded up


@pytest.mark.parametrize(
    ("usage", "fragment"),
    [
        (
            {"input_tokens": 10, "cached_input_tokens": 8, "cache_write_tokens": 5},
            "add up to more than its input_tokens (10)",
        ),
        ({"output_tokens": 3, "reasoning_tokens": 4}, "reasoning_tokens (4) are more than"),
    ],
)
@pytest.mark.parametrize("kind", PROVIDER_KINDS)
async def test_a_usage_no_api_could_report_is_a_script_error(
    kind: str, usage: dict[str, int], fragment: str
) -> None:
    with pytest.raises(ModelProviderError, match="fix the script") as caught:
        await complete_through(kind, [{"content": "ok", "usage": usage}], CONVERSATION)
    assert fragment in caught.value.message
    assert not caught.value.retryable


async def test_a_spent_quota_is_neither_retried_nor_a_rate_limit() -> None:
    # OpenAI answers a spent quota with 429 too; waiting does not cure it.
    answer = httpx.Response(
        429,
        json={
            "error": {
                "message": "You exceeded your current quota.",
                "type": "insufficient_quota",
                "code": "insufficient_quota",
            }
        },
    )
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    sleeps = Sleeps()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        provider = OpenAICompatibleProvider(
            "http://x.local/v1", client=client, environ={}, sleep=sleeps
        )
        with pytest.raises(ModelProviderError, match="quota is spent") as caught:
            await provider.complete(CONVERSATION)
    failure = caught.value
    assert (failure.status, failure.retryable, failure.rate_limited) == (429, False, False)
    assert (len(seen), sleeps.calls) == (1, [])


async def test_an_overloaded_anthropic_is_retried_but_not_a_rate_limit(
    server: FakeModelServer,
) -> None:
    server.fail_next(1, status=529)
    provider = anthropic(server, max_retries=0)
    try:
        with pytest.raises(ModelProviderError, match="HTTP 529") as caught:
            await provider.complete(CONVERSATION)
    finally:
        await provider.aclose()
    failure = caught.value
    assert (failure.status, failure.retryable, failure.rate_limited) == (529, True, False)
