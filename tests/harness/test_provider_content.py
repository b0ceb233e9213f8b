"""Content parts, request options, structured output and reasoning on both wire formats.

Each test drives a real provider against the real ``FakeModelServer``: the body on the
wire is checked against the vendor's format, and the request the fake decoded from it
(``RecordedRequest.request``) must be what the provider was asked to send.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import (
    AnthropicProvider,
    FilePart,
    ImagePart,
    Message,
    ModelProvider,
    ModelRequest,
    ModelResponse,
    OpenAICompatibleProvider,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    ToolCall,
    ToolSpec,
)
from little_workflow.testing._fake_wire import sign_thinking
from little_workflow.testing.fake_models import FakeModelServer

KEY = "sk-test-content-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
PDF = b"%PDF-1.4\n" + b"x" * 30
SEARCH = ToolSpec(
    name="search",
    description="Search the web.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
CITY = ResponseFormat(
    name="city",
    schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def _open(wire: str, server: FakeModelServer) -> ModelProvider:
    if wire == "openai":
        return OpenAICompatibleProvider(
            server.openai_base_url, environ={"OPENAI_API_KEY": KEY}, max_retries=0
        )
    return AnthropicProvider(server.url, environ={"ANTHROPIC_API_KEY": KEY}, max_retries=0)


@pytest.fixture(params=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def server() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer(["Done."], api_key=KEY) as running:
        yield running


async def _call(wire: str, server: FakeModelServer, request: ModelRequest) -> ModelResponse:
    provider = _open(wire, server)
    try:
        return await provider.complete(request)
    finally:
        await provider.aclose()


def _ask(*messages: Message, **options: Any) -> ModelRequest:
    return ModelRequest(model="m", messages=messages, **options)


async def test_images_and_files_reach_the_model_as_the_vendor_takes_them(
    wire: str, server: FakeModelServer
) -> None:
    question = Message(
        role="user",
        content=(
            TextPart(text="What is in these?"),
            ImagePart.of(PNG, "image/png"),
            ImagePart(url="https://example.com/cat.png", media_type="image/png"),
            FilePart.of(PDF, "application/pdf", filename="report.pdf"),
        ),
    )
    await _call(wire, server, _ask(question))
    recorded = server.last_request
    assert recorded.status == 200
    png, pdf = base64.b64encode(PNG).decode(), base64.b64encode(PDF).decode()
    if wire == "openai":
        assert recorded.body["messages"][0]["content"] == [
            {"type": "text", "text": "What is in these?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
            {
                "type": "file",
                "file": {
                    "file_data": f"data:application/pdf;base64,{pdf}",
                    "filename": "report.pdf",
                },
            },
        ]
    else:
        assert recorded.body["messages"][0]["content"] == [
            {"type": "text", "text": "What is in these?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": pdf},
                "title": "report.pdf",
            },
        ]
    assert recorded.request is not None
    assert recorded.request.messages == (question,)


async def test_a_text_file_goes_to_anthropic_as_a_text_document(server: FakeModelServer) -> None:
    notes = FilePart.of(b"Oslo is the capital.\n", "text/plain", filename="notes.txt")
    await _call("anthropic", server, _ask(Message(role="user", content=(notes,))))
    assert server.last_request.body["messages"][0]["content"] == [
        {
            "type": "document",
            "source": {
                "type": "text",
                "media_type": "text/plain",
                "data": "Oslo is the capital.\n",
            },
            "title": "notes.txt",
        }
    ]
    assert server.last_request.request is not None
    assert server.last_request.request.messages[0].content == (notes,)


async def test_a_tool_may_answer_with_an_image_on_anthropic(server: FakeModelServer) -> None:
    screenshot = ImagePart.of(PNG, "image/png")
    conversation = (
        Message(role="user", content="Look at the page."),
        Message(role="assistant", tool_calls=(ToolCall(id="t1", name="shot", arguments={}),)),
        Message(
            role="tool", tool_call_id="t1", name="shot", content=(TextPart(text="here"), screenshot)
        ),
    )
    await _call("anthropic", server, _ask(*conversation))
    result = server.last_request.body["messages"][2]["content"][0]
    assert result["type"] == "tool_result"
    assert [block["type"] for block in result["content"]] == ["text", "image"]
    assert server.last_request.request is not None
    assert server.last_request.request.messages[2].content == (TextPart(text="here"), screenshot)


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        (
            Message(
                role="user",
                content=(FilePart(url="https://x.test/a.pdf", media_type="application/pdf"),),
            ),
            "file part with a url",
        ),
        (
            Message(role="assistant", content=(ImagePart.of(PNG, "image/png"),)),
            "only a user message may hold images",
        ),
    ],
)
async def test_what_chat_completions_cannot_carry_fails_before_any_request(
    server: FakeModelServer, message: Message, problem: str
) -> None:
    with pytest.raises(ModelProviderError, match=problem) as caught:
        await _call("openai", server, _ask(Message(role="user", content="Hi"), message))
    assert not caught.value.retryable
    assert server.requests == []


async def test_every_option_is_on_the_wire_and_decoded_back(
    wire: str, server: FakeModelServer
) -> None:
    extra: dict[str, Any] = (
        {"reasoning_effort": "low", "user": "u-1"}
        if wire == "openai"
        else {"top_k": 5, "metadata": {"user_id": "u-1"}}
    )
    request = _ask(
        Message(role="user", content="Hi"),
        tools=(SEARCH,),
        temperature=0.5,
        max_tokens=100,
        top_p=0.9,
        stop=("END", "STOP"),
        seed=7,
        tool_choice="search",
        parallel_tool_calls=False,
        extra=extra,
    )
    await _call(wire, server, request)
    body = server.last_request.body
    decoded = server.last_request.request
    assert decoded is not None
    if wire == "openai":
        assert {key: body[key] for key in ("top_p", "stop", "seed", "parallel_tool_calls")} == {
            "top_p": 0.9,
            "stop": ["END", "STOP"],
            "seed": 7,
            "parallel_tool_calls": False,
        }
        assert body["tool_choice"] == {"type": "function", "function": {"name": "search"}}
        assert decoded.seed == 7
    else:
        assert (body["top_p"], body["stop_sequences"]) == (0.9, ["END", "STOP"])
        assert body["tool_choice"] == {
            "type": "tool",
            "name": "search",
            "disable_parallel_tool_use": True,
        }
        assert "seed" not in body  # the Messages API has none
        assert decoded.seed is None
    assert {key: body[key] for key in extra} == extra
    assert (decoded.top_p, decoded.stop, decoded.tool_choice) == (0.9, ("END", "STOP"), "search")
    assert (decoded.parallel_tool_calls, decoded.temperature) == (False, 0.5)
    assert decoded.extra == extra


@pytest.mark.parametrize(
    ("choice", "parallel", "openai_wire", "anthropic_wire"),
    [
        ("auto", None, "auto", {"type": "auto"}),
        ("required", None, "required", {"type": "any"}),
        ("none", None, "none", {"type": "none"}),
        (None, False, None, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None, None),
    ],
)
async def test_tool_choice_in_each_vendors_words(
    wire: str,
    server: FakeModelServer,
    choice: str | None,
    parallel: bool | None,
    openai_wire: object,
    anthropic_wire: object,
) -> None:
    request = _ask(
        Message(role="user", content="Hi"),
        tools=(SEARCH,),
        tool_choice=choice,
        parallel_tool_calls=parallel,
    )
    await _call(wire, server, request)
    body = server.last_request.body
    assert body.get("tool_choice") == (openai_wire if wire == "openai" else anthropic_wire)
    assert server.last_request.request is not None
    # Anthropic says "no parallel calls" inside a tool choice, which is then "auto".
    implied = "auto" if wire == "anthropic" and parallel is False else None
    assert server.last_request.request.tool_choice == (choice or implied)


async def test_a_provider_specific_field_the_api_does_not_know_is_refused(
    wire: str, server: FakeModelServer
) -> None:
    with pytest.raises(ModelProviderError, match="bogus") as caught:
        await _call(wire, server, _ask(Message(role="user", content="Hi"), extra={"bogus": 1}))
    assert (caught.value.status, caught.value.retryable) == (400, False)


async def test_structured_output_uses_each_vendors_native_mode(wire: str) -> None:
    async with FakeModelServer(['{"city": "Oslo"}'], api_key=KEY) as server:
        response = await _call(
            wire,
            server,
            _ask(Message(role="user", content="Capital of Norway?"), response_format=CITY),
        )
        body = server.last_request.body
    assert json.loads(response.message.text or "") == {"city": "Oslo"}
    assert (response.finish_reason, response.message.tool_calls) == ("stop", ())
    if wire == "openai":
        assert body["response_format"] == {
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": CITY.schema_, "strict": True},
        }
        assert "tools" not in body
    else:
        # A forced tool whose input is the answer; the fake answers it as the API does.
        assert body["tools"][-1]["name"] == "city"
        assert body["tools"][-1]["input_schema"] == CITY.schema_
        assert body["tool_choice"] == {"type": "tool", "name": "city"}
        answer = server.last_request.response
        assert answer is not None
        assert [block["type"] for block in answer["content"]] == ["tool_use"]


async def test_structured_output_with_tools_lets_the_model_work_first(
    wire: str,
) -> None:
    replies = [
        {"tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "Norway"}}]},
        '{"city": "Oslo"}',
    ]
    async with FakeModelServer(replies, api_key=KEY) as server:
        first = _ask(
            Message(role="user", content="Capital of Norway?"),
            tools=(SEARCH,),
            response_format=CITY,
        )
        working = await _call(wire, server, first)
        assert working.message.tool_calls[0].name == "search"
        assert working.finish_reason == "tool_calls"
        if wire == "anthropic":
            assert server.last_request.body["tool_choice"] == {"type": "any"}
        second = first.model_copy(
            update={
                "messages": (
                    *first.messages,
                    working.message,
                    Message(
                        role="tool",
                        tool_call_id=working.message.tool_calls[0].id,
                        name="search",
                        content="Oslo",
                    ),
                )
            }
        )
        answered = await _call(wire, server, second)
    assert json.loads(answered.message.text or "") == {"city": "Oslo"}
    assert answered.message.tool_calls == ()


async def test_an_answer_format_named_like_a_tool_is_refused_before_any_request(
    server: FakeModelServer,
) -> None:
    clash = ResponseFormat(name="search", schema={"type": "object"})
    with pytest.raises(ModelProviderError, match="like one of the tools"):
        await _call(
            "anthropic",
            server,
            _ask(Message(role="user", content="Hi"), tools=(SEARCH,), response_format=clash),
        )
    assert server.requests == []


async def test_anthropic_thinking_is_kept_and_sent_back_signed() -> None:
    thought = ReasoningPart(provider="anthropic", text="The user wants the capital.")
    hidden = ReasoningPart(provider="anthropic", data="opaque-bytes", redacted=True)
    replies = [
        {
            "content": [
                thought.model_dump(),
                hidden.model_dump(),
                {"type": "text", "text": "Looking."},
            ],
            "tool_calls": [{"id": "c1", "name": "search", "arguments": {"q": "Norway"}}],
        },
        "Oslo.",
    ]
    async with FakeModelServer(replies, api_key=KEY) as server:
        first = _ask(Message(role="user", content="Capital of Norway?"), tools=(SEARCH,))
        working = await _call("anthropic", server, first)
        signed = ReasoningPart(
            provider="anthropic", text=thought.text, signature=sign_thinking(thought.text)
        )
        assert working.message.content == (signed, hidden, TextPart(text="Looking."))
        result = Message(role="tool", tool_call_id="c1", name="search", content="Oslo")
        follow = (*first.messages, working.message, result)
        answered = await _call("anthropic", server, first.model_copy(update={"messages": follow}))
        assert answered.message.text == "Oslo."
        sent = server.last_request.body["messages"][1]["content"]
        assert sent[:3] == [
            {"type": "thinking", "thinking": thought.text, "signature": signed.signature},
            {"type": "redacted_thinking", "data": "opaque-bytes"},
            {"type": "text", "text": "Looking."},
        ]
        # Thinking altered on the way back is refused, as the real API refuses it.
        altered = working.message.model_copy(
            update={"content": (signed.model_copy(update={"text": "Something else."}),)}
        )
        tampered = (*first.messages, altered, result)
        with pytest.raises(ModelProviderError, match="signature") as caught:
            await _call("anthropic", server, first.model_copy(update={"messages": tampered}))
        assert caught.value.status == 400


async def test_reasoning_of_another_vendor_is_not_sent(wire: str, server: FakeModelServer) -> None:
    other = "openai" if wire == "anthropic" else "anthropic"
    foreign = ReasoningPart(provider=other, text="elsewhere", signature="sig", id="rs_1")
    conversation = (
        Message(role="user", content="Hi"),
        Message(role="assistant", content=(foreign, TextPart(text="Hello."))),
        Message(role="user", content="Again"),
    )
    await _call(wire, server, _ask(*conversation))
    sent = server.last_request.body["messages"][1]["content"]
    assert sent in ("Hello.", [{"type": "text", "text": "Hello."}])


async def test_reasoning_content_of_an_openai_compatible_server_is_kept() -> None:
    reply = {
        "content": [
            {"type": "reasoning", "provider": "openai", "text": "Hmm."},
            {"type": "text", "text": "42"},
        ]
    }
    async with FakeModelServer([reply], api_key=KEY) as server:
        response = await _call("openai", server, _ask(Message(role="user", content="?")))
        assert server.last_request.response is not None
        wire_message = server.last_request.response["choices"][0]["message"]
    assert wire_message["reasoning_content"] == "Hmm."
    assert response.message.content == (
        ReasoningPart(provider="openai", text="Hmm."),
        TextPart(text="42"),
    )
