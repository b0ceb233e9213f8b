"""The fake model servers driven by the official ``openai`` and ``anthropic`` SDKs.

Each SDK is pointed at the local fake's base_url (no network), with its own retries off
(``max_retries=0``) so that an injected error reaches the test as the SDK's exception.
Every test asserts what came back and what the fake recorded.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from pydantic import BaseModel

from little_workflow.harness.models import ScriptReply
from little_workflow.testing.fake_models import FakeModelServer

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

KEY = "sk-sdk-fake-key-5678"
USAGE = {
    "input_tokens": 1200,
    "output_tokens": 90,
    "cached_input_tokens": 1000,
    "cache_write_tokens": 150,
    "reasoning_tokens": 40,
}
CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
WEATHER_OPENAI = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "The weather in a city.",
        "parameters": CITY_SCHEMA,
    },
}
WEATHER_ANTHROPIC = {
    "name": "weather",
    "description": "The weather in a city.",
    "input_schema": CITY_SCHEMA,
}
CALL = {"id": "call_w1", "name": "weather", "arguments": {"city": "Oslo"}}
USER = {"role": "user", "content": "Weather in Oslo?"}


class City(BaseModel):
    name: str
    population: int


def openai_client(server: FakeModelServer, key: str = KEY) -> Any:
    return openai.OpenAI(base_url=server.openai_base_url, api_key=key, max_retries=0)


def async_openai_client(server: FakeModelServer) -> Any:
    return openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=KEY, max_retries=0)


def anthropic_client(server: FakeModelServer, **credentials: str) -> Any:
    return anthropic.Anthropic(
        base_url=server.url, max_retries=0, **(credentials or {"api_key": KEY})
    )


def async_anthropic_client(server: FakeModelServer) -> Any:
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=KEY, max_retries=0)


# -- OpenAI ----------------------------------------------------------------------------


def test_openai_plain_answer() -> None:
    with FakeModelServer(["Hello from the fake."], api_key=KEY) as server:
        with openai_client(server) as client:
            completion = client.chat.completions.create(model="gpt-x", messages=[USER])
        recorded = server.last_request
    assert completion.choices[0].message.content == "Hello from the fake."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.model == "gpt-x"
    assert (recorded.path, recorded.status) == ("/v1/chat/completions", 200)
    assert recorded.headers["authorization"] == f"Bearer {KEY}"
    assert recorded.request is not None
    assert recorded.request.messages[0].text == "Weather in Oslo?"


def test_openai_tool_call_and_its_result_sent_back() -> None:
    script: list[ScriptReply] = [{"tool_calls": [CALL]}, "It is 4 degrees in Oslo."]
    with FakeModelServer(script, api_key=KEY) as server:
        with openai_client(server) as client:
            first = client.chat.completions.create(
                model="gpt-x", messages=[USER], tools=[WEATHER_OPENAI]
            )
            call = first.choices[0].message.tool_calls[0]
            second = client.chat.completions.create(
                model="gpt-x",
                messages=[
                    USER,
                    first.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "4 degrees"},
                ],
                tools=[WEATHER_OPENAI],
            )
        turn = server.last_request.request
    assert first.choices[0].finish_reason == "tool_calls"
    assert (call.id, call.function.name) == ("call_w1", "weather")
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    assert second.choices[0].message.content == "It is 4 degrees in Oslo."
    assert turn is not None
    assert [tool.name for tool in turn.tools] == ["weather"]
    assert turn.messages[-1].role == "tool"
    assert (turn.messages[-1].tool_call_id, turn.messages[-1].content) == ("call_w1", "4 degrees")


def test_openai_structured_output_parsed_by_the_sdk() -> None:
    with FakeModelServer(['{"name": "Oslo", "population": 709000}'], api_key=KEY) as server:
        with openai_client(server) as client:
            completion = client.chat.completions.parse(
                model="gpt-x", messages=[USER], response_format=City
            )
        request = server.last_request.request
    assert completion.choices[0].message.parsed == City(name="Oslo", population=709000)
    assert request is not None
    assert request.response_format is not None
    assert request.response_format.name == "City"
    assert request.response_format.strict is True


def test_openai_error_status_is_the_sdks_exception() -> None:
    with FakeModelServer(["never"], api_key=KEY) as server:
        server.fail_next(1, status=429, message="slow down")
        with openai_client(server) as client, pytest.raises(openai.RateLimitError) as limited:
            client.chat.completions.create(model="gpt-x", messages=[USER])
        wrong_client = openai_client(server, key="sk-wrong-key-0000")
        with wrong_client as wrong, pytest.raises(openai.AuthenticationError) as refused:
            wrong.chat.completions.create(model="gpt-x", messages=[USER])
        statuses = [r.status for r in server.requests]
    assert limited.value.status_code == 429
    assert "slow down" in str(limited.value)
    assert refused.value.status_code == 401
    assert "sk-wrong-key-0000" not in str(refused.value)
    assert statuses == [429, 401]  # one request each: the SDK did not retry


def test_openai_usage_as_scripted() -> None:
    with (
        FakeModelServer([{"content": "ok", "usage": USAGE}], api_key=KEY) as server,
        openai_client(server) as client,
    ):
        usage = client.chat.completions.create(model="gpt-x", messages=[USER]).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (1200, 90, 1290)
    assert usage.prompt_tokens_details.cached_tokens == 1000
    assert usage.prompt_tokens_details.cache_write_tokens == 150
    assert usage.completion_tokens_details.reasoning_tokens == 40


def test_openai_usage_without_a_script_is_not_zero() -> None:
    with (
        FakeModelServer(["A short answer."], api_key=KEY) as server,
        openai_client(server) as client,
    ):
        usage = client.chat.completions.create(model="gpt-x", messages=[USER]).usage
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


async def test_openai_async_client_tool_call_then_answer() -> None:
    script: list[ScriptReply] = [{"tool_calls": [CALL], "usage": USAGE}, "Cold."]
    async with FakeModelServer(script, api_key=KEY) as server:
        async with async_openai_client(server) as client:
            first = await client.chat.completions.create(
                model="gpt-x", messages=[USER], tools=[WEATHER_OPENAI]
            )
            call = first.choices[0].message.tool_calls[0]
            second = await client.chat.completions.create(
                model="gpt-x",
                messages=[
                    USER,
                    first.choices[0].message.model_dump(exclude_none=True),
                    {"role": "tool", "tool_call_id": call.id, "content": "4 degrees"},
                ],
            )
            server.fail_next(1, status=503)
            with pytest.raises(openai.InternalServerError):
                await client.chat.completions.create(model="gpt-x", messages=[USER])
        recorded = server.requests
    assert (call.function.name, json.loads(call.function.arguments)) == (
        "weather",
        CALL["arguments"],
    )
    assert first.usage.prompt_tokens == 1200
    assert second.choices[0].message.content == "Cold."
    assert recorded[1].headers["x-stainless-async"].startswith("async")
    assert [r.status for r in recorded] == [200, 200, 503]


# -- Anthropic -------------------------------------------------------------------------


def test_anthropic_plain_answer() -> None:
    with FakeModelServer(["Hello from the fake."], api_key=KEY) as server:
        with anthropic_client(server) as client:
            message = client.messages.create(model="claude-x", max_tokens=100, messages=[USER])
        recorded = server.last_request
    assert [block.text for block in message.content] == ["Hello from the fake."]
    assert message.stop_reason == "end_turn"
    assert (recorded.path, recorded.status) == ("/v1/messages", 200)
    # Whatever dated version this SDK release sends, the fake took it.
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", recorded.headers["anthropic-version"])
    assert recorded.headers["anthropic-version"] >= "2023-06-01"
    assert recorded.headers["authorization"] == f"Bearer {KEY}"  # the SDK's api_key form


def test_anthropic_tool_call_and_its_result_sent_back() -> None:
    script: list[ScriptReply] = [
        {"content": "Looking.", "tool_calls": [CALL]},
        "It is 4 degrees in Oslo.",
    ]
    with FakeModelServer(script, api_key=KEY) as server:
        with anthropic_client(server) as client:
            first = client.messages.create(
                model="claude-x", max_tokens=100, messages=[USER], tools=[WEATHER_ANTHROPIC]
            )
            use = next(block for block in first.content if block.type == "tool_use")
            second = client.messages.create(
                model="claude-x",
                max_tokens=100,
                tools=[WEATHER_ANTHROPIC],
                messages=[
                    USER,
                    {"role": "assistant", "content": first.content},
                    {
                        "role": "user",
                        "content": [
                            {"type": "tool_result", "tool_use_id": use.id, "content": "4 degrees"}
                        ],
                    },
                ],
            )
        turn = server.last_request.request
    assert first.stop_reason == "tool_use"
    assert (use.id, use.name, use.input) == ("call_w1", "weather", {"city": "Oslo"})
    assert [block.text for block in second.content] == ["It is 4 degrees in Oslo."]
    assert turn is not None
    assert turn.messages[-1].role == "tool"
    assert (turn.messages[-1].tool_call_id, turn.messages[-1].content) == ("call_w1", "4 degrees")


def test_anthropic_structured_output_as_a_forced_tool() -> None:
    answer_tool = {"name": "city", "input_schema": City.model_json_schema()}
    with FakeModelServer(['{"name": "Oslo", "population": 709000}'], api_key=KEY) as server:
        with anthropic_client(server) as client:
            message = client.messages.create(
                model="claude-x",
                max_tokens=100,
                messages=[USER],
                tools=[answer_tool],
                tool_choice={"type": "tool", "name": "city"},
            )
        request = server.last_request.request
    (block,) = message.content
    assert (block.type, block.name) == ("tool_use", "city")
    assert City.model_validate(block.input) == City(name="Oslo", population=709000)
    assert request is not None
    assert request.tool_choice == "city"


def test_anthropic_error_status_is_the_sdks_exception() -> None:
    with FakeModelServer(["never"], api_key=KEY) as server:
        server.fail_next(1, status=429, message="slow down")
        server.fail_next(1, status=529)
        with anthropic_client(server) as client:
            with pytest.raises(anthropic.RateLimitError) as limited:
                client.messages.create(model="claude-x", max_tokens=10, messages=[USER])
            with pytest.raises(anthropic.InternalServerError) as overloaded:
                client.messages.create(model="claude-x", max_tokens=10, messages=[USER])
        statuses = [r.status for r in server.requests]
    assert limited.value.status_code == 429
    assert limited.value.body["error"]["type"] == "rate_limit_error"
    assert overloaded.value.status_code == 529
    assert statuses == [429, 529]


def test_anthropic_usage_as_scripted() -> None:
    reply = {"content": "ok", "usage": USAGE}
    with FakeModelServer([reply], api_key=KEY) as server, anthropic_client(server) as client:
        usage = client.messages.create(model="claude-x", max_tokens=10, messages=[USER]).usage
    assert (usage.input_tokens, usage.output_tokens) == (50, 90)  # uncached: 1200 - 1000 - 150
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (1000, 150)
    assert usage.output_tokens_details.thinking_tokens == 40


def test_anthropic_auth_token_is_sent_as_bearer_and_checked() -> None:
    with FakeModelServer(["Token accepted."], api_key=KEY) as server:
        with anthropic_client(server, auth_token=KEY) as client:
            message = client.messages.create(model="claude-x", max_tokens=10, messages=[USER])
        accepted = server.last_request
        wrong_client = anthropic_client(server, auth_token="sk-wrong-token-4321")
        with wrong_client as wrong, pytest.raises(anthropic.AuthenticationError) as refused:
            wrong.messages.create(model="claude-x", max_tokens=10, messages=[USER])
    assert [block.text for block in message.content] == ["Token accepted."]
    assert accepted.headers["authorization"] == f"Bearer {KEY}"
    assert "x-api-key" not in accepted.headers
    assert refused.value.status_code == 401
    assert refused.value.body["error"]["message"] == "invalid bearer token: sk-***4321"
    assert "sk-wrong-token-4321" not in str(refused.value)


async def test_anthropic_async_client_tool_call_then_answer() -> None:
    script: list[ScriptReply] = [{"tool_calls": [CALL], "usage": USAGE}, "Cold."]
    async with FakeModelServer(script, api_key=KEY) as server:
        async with async_anthropic_client(server) as client:
            first = await client.messages.create(
                model="claude-x", max_tokens=50, messages=[USER], tools=[WEATHER_ANTHROPIC]
            )
            (use,) = first.content
            second = await client.messages.create(
                model="claude-x",
                max_tokens=50,
                messages=[
                    USER,
                    {"role": "assistant", "content": first.content},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "4"}],
                    },
                ],
            )
            server.fail_next(1, status=429)
            with pytest.raises(anthropic.RateLimitError):
                await client.messages.create(model="claude-x", max_tokens=5, messages=[USER])
        recorded = server.requests
    assert (use.name, use.input) == ("weather", {"city": "Oslo"})
    assert first.usage.cache_read_input_tokens == 1000
    assert [block.text for block in second.content] == ["Cold."]
    assert [r.status for r in recorded] == [200, 200, 429]


# -- Streaming (the fakes answer "stream": true with server-sent events) ---------------


def test_openai_stream_joins_to_the_text_and_ends_with_usage() -> None:
    reply = {"content": "Four degrees and clear skies over Oslo.", "usage": USAGE}
    with FakeModelServer([reply], api_key=KEY) as server, openai_client(server) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-x",
                messages=[USER],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Four degrees and clear skies over Oslo."
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1
    (last,) = [c for c in chunks if c.usage is not None]
    assert last is chunks[-1]
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (1200, 90)
    assert last.usage.prompt_tokens_details.cached_tokens == 1000
    assert last.usage.completion_tokens_details.reasoning_tokens == 40


async def test_openai_async_stream_of_a_tool_call() -> None:
    async with (
        FakeModelServer([{"tool_calls": [CALL]}], api_key=KEY) as server,
        async_openai_client(server) as client,
    ):
        stream = await client.chat.completions.create(
            model="gpt-x", messages=[USER], tools=[WEATHER_OPENAI], stream=True
        )
        chunks = [chunk async for chunk in stream]
    deltas = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
    assert {d.id for d in deltas if d.id} == {"call_w1"}
    assert {d.function.name for d in deltas if d.function and d.function.name} == {"weather"}
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"city": "Oslo"}
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert all(c.usage is None for c in chunks)  # usage only when asked for


def test_anthropic_stream_text_and_final_message_usage() -> None:
    reply = {"content": "Four degrees and clear skies over Oslo.", "usage": USAGE}
    with FakeModelServer([reply], api_key=KEY) as server, anthropic_client(server) as client:
        with client.messages.stream(model="claude-x", max_tokens=100, messages=[USER]) as stream:
            pieces = list(stream.text_stream)
            final = stream.get_final_message()
        assert server.last_request.body["stream"] is True
    assert "".join(pieces) == "Four degrees and clear skies over Oslo."
    assert len(pieces) > 1
    assert [block.text for block in final.content] == ["Four degrees and clear skies over Oslo."]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (50, 90)
    assert (final.usage.cache_read_input_tokens, final.usage.cache_creation_input_tokens) == (
        1000,
        150,
    )


async def test_anthropic_async_stream_of_a_tool_call() -> None:
    reply = {"tool_calls": [CALL], "usage": USAGE}
    async with (
        FakeModelServer([reply], api_key=KEY) as server,
        async_anthropic_client(server) as client,
        client.messages.stream(
            model="claude-x", max_tokens=100, messages=[USER], tools=[WEATHER_ANTHROPIC]
        ) as stream,
    ):
        final = await stream.get_final_message()
    (use,) = final.content
    assert (use.type, use.id, use.name, use.input) == (
        "tool_use",
        "call_w1",
        "weather",
        CALL["arguments"],
    )
    assert final.stop_reason == "tool_use"
    assert (final.usage.output_tokens, final.usage.cache_read_input_tokens) == (90, 1000)
