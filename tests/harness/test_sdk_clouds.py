"""Claude on the clouds: ``AnthropicSDKProvider`` over ``AsyncAnthropicVertex`` and
``AsyncAnthropicBedrock``, and the fake's routes for them.

The conformance suite runs over both clients in test_sdk_providers.py; here is what it
does not look at: that each request took the cloud's route, with the model in the
path and the credential the cloud wants, and that the fake refuses what the cloud
would. The Bedrock stream's framing is checked against botocore's own decoder, which
is the one the SDK reads it with.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from little_workflow.errors import ModelProviderError
from little_workflow.harness.models import AnthropicSDKProvider, Message, ModelRequest
from little_workflow.testing._fake_aws import chunk_message, exception_message
from little_workflow.testing.fake_models import FakeModelServer
from tests.harness.test_sdk_providers import AWS_SECRET, anthropic_client

anthropic = pytest.importorskip("anthropic")

KEY = "sk-lw-clouds-key-31415926"
MODEL = "claude-sonnet-4@20250514"
PROJECT_PATH = "/v1/projects/lw-project/locations/us-east5/publishers/anthropic/models"


def _request(model: str = MODEL) -> ModelRequest:
    return ModelRequest(model=model, messages=(Message(role="user", content="hi"),))


async def _complete_and_stream(kind: str, server: FakeModelServer) -> list[str]:
    """One completed and one streamed call through the provider; the streamed deltas."""
    client = anthropic_client(kind, server, KEY)
    pieces: list[str] = []

    async def sink(delta: Any) -> None:
        pieces.append(delta.text)

    async with client:
        provider = AnthropicSDKProvider(client)
        completed = await provider.complete(_request())
        streamed = await provider.stream(_request(), sink)
        await provider.aclose()
    assert (completed.message.content, streamed.message.content) == ("whole", "in pieces")
    return pieces


# -- Vertex AI -----------------------------------------------------------------------


async def test_vertex_calls_take_the_model_from_the_path() -> None:
    async with FakeModelServer(["whole", "in pieces"], api_key=KEY) as server:
        pieces = await _complete_and_stream("anthropic-vertex", server)
        recorded = server.requests
    assert "".join(pieces) == "in pieces"
    assert [r.path for r in recorded] == [
        f"{PROJECT_PATH}/{MODEL}:rawPredict",
        f"{PROJECT_PATH}/{MODEL}:streamRawPredict",
    ]
    for seen in recorded:
        assert (seen.platform, seen.status, seen.wire) == ("vertex", 200, "anthropic")
        assert seen.headers["authorization"] == f"Bearer {KEY}"
        assert "model" not in seen.body  # the SDK moved it into the path
        assert seen.body["anthropic_version"]
        assert seen.request is not None
        assert seen.request.model == MODEL  # what the script saw: the path's model
    assert [r.streamed for r in recorded] == [False, True]


async def test_a_refused_vertex_token_is_googles_401_and_redacted() -> None:
    wrong = "ya29.wrong-access-token-271828"
    async with FakeModelServer(["never"], api_key=KEY, echo_credentials=True) as server:
        async with anthropic_client("anthropic-vertex", server, wrong) as client:
            with pytest.raises(ModelProviderError) as caught:
                await AnthropicSDKProvider(client).complete(_request())
        refusal = server.last_request.response
    assert refusal["error"]["status"] == "UNAUTHENTICATED"
    assert wrong in refusal["error"]["message"]
    assert (caught.value.status, caught.value.retryable) == (401, False)
    assert wrong not in str(caught.value)
    assert "invalid authentication credentials" in str(caught.value)
    assert f"{PROJECT_PATH}/{MODEL}:rawPredict" in str(caught.value)


@pytest.mark.parametrize(
    ("body", "refused"),
    [
        ({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, "is required"),
        (
            {
                "anthropic_version": "2021-01-01",
                "max_tokens": 8,
                "messages": [{"role": "user", "content": "hi"}],
            },
            "not a valid version",
        ),
    ],
)
async def test_vertex_needs_anthropic_version_in_the_body(body: Any, refused: str) -> None:
    async with FakeModelServer(["never"], api_key=KEY) as server, httpx.AsyncClient() as http:
        answer = await http.post(
            f"{server.url}{PROJECT_PATH}/{MODEL}:rawPredict",
            json=body,
            headers={"authorization": f"Bearer {KEY}"},
        )
    assert answer.status_code == 400
    assert refused in answer.json()["error"]["message"]
    assert "anthropic_version" in answer.json()["error"]["message"]


# -- Amazon Bedrock ------------------------------------------------------------------


async def test_bedrock_calls_are_signed_and_take_the_model_from_the_path() -> None:
    pytest.importorskip("botocore")
    async with FakeModelServer(["whole", "in pieces"], api_key=KEY) as server:
        pieces = await _complete_and_stream("anthropic-bedrock", server)
        recorded = server.requests
    assert "".join(pieces) == "in pieces"
    quoted = MODEL.replace("@", "%40")  # the SDK quotes the id; the fake unquotes it
    assert [r.path for r in recorded] == [
        f"/model/{quoted}/invoke",
        f"/model/{quoted}/invoke-with-response-stream",
    ]
    for seen in recorded:
        assert (seen.platform, seen.status) == ("bedrock", 200)
        signature = seen.headers["authorization"]
        assert signature.startswith(f"AWS4-HMAC-SHA256 Credential={KEY}/")
        assert "/us-east-1/bedrock/aws4_request" in signature
        assert AWS_SECRET not in json.dumps(dict(seen.headers))  # signed with, never sent
        assert "model" not in seen.body
        assert "stream" not in seen.body  # Bedrock says it in the path only
        assert seen.request is not None
        assert seen.request.model == MODEL
    assert [r.streamed for r in recorded] == [False, True]


async def test_a_throttled_bedrock_stream_is_a_retryable_rate_limit() -> None:
    pytest.importorskip("botocore")
    async with FakeModelServer(["throttled halfway", "unused"], api_key=KEY) as server:
        server.error_mid_stream(after=3, status=429, message="Too many tokens, slow down")
        async with anthropic_client("anthropic-bedrock", server, KEY) as client:
            provider = AnthropicSDKProvider(client)

            async def sink(delta: Any) -> None:
                pass

            with pytest.raises(ModelProviderError) as caught:
                await provider.stream(_request(), sink)
        assert len(server.requests) == 1  # cut after events: raised, not retried here
    assert (caught.value.status, caught.value.retryable) == (429, True)
    assert "throttlingException: Too many tokens, slow down" in caught.value.message


async def test_an_unsigned_bedrock_request_is_refused() -> None:
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with FakeModelServer(["never"], api_key=KEY) as server, httpx.AsyncClient() as http:
        unsigned = await http.post(f"{server.url}/model/{MODEL}/invoke", json=body)
        as_anthropic = await http.post(
            f"{server.url}/model/{MODEL}/invoke", json=body, headers={"x-api-key": KEY}
        )
        keyed = await http.post(
            f"{server.url}/model/{MODEL}/invoke",
            json={**body, "stream": True},
            headers={"authorization": f"Bearer {KEY}"},  # a Bedrock API key
        )
    for refused in (unsigned, as_anthropic):
        assert refused.status_code == 403
        assert refused.headers["x-amzn-errortype"] == "MissingAuthenticationTokenException"
        assert refused.json() == {"message": "Missing Authentication Token"}
    # Let in by the key, then refused as Bedrock refuses a field its path holds.
    assert keyed.status_code == 400
    assert keyed.json()["message"] == "extraneous key [stream] is not permitted"
    assert keyed.headers["x-amzn-errortype"] == "ValidationException"


# -- the event stream's framing, read by botocore ------------------------------------


def test_the_fakes_event_stream_is_what_botocore_decodes() -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    event = {"type": "content_block_delta", "index": 0, "delta": {"text": "héllo"}}
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(chunk_message(event) + exception_message(429, "slow down"))
    chunk, error = list(buffer)
    assert chunk.headers == {
        ":event-type": "chunk",
        ":content-type": "application/json",
        ":message-type": "event",
    }
    data = json.loads(chunk.payload)["bytes"]
    assert json.loads(base64.b64decode(data)) == event
    assert error.headers[":message-type"] == "exception"
    assert error.headers[":exception-type"] == "throttlingException"
    assert json.loads(error.payload) == {"message": "slow down"}


@pytest.mark.parametrize("where", [5, -6])  # a byte of the prelude, one of the payload
def test_a_corrupted_frame_fails_botocores_checksums(where: int) -> None:
    eventstream = pytest.importorskip("botocore.eventstream")
    frame = bytearray(chunk_message({"type": "ping"}))
    frame[where] ^= 0x01
    buffer = eventstream.EventStreamBuffer()
    buffer.add_data(bytes(frame))
    with pytest.raises(eventstream.ParserError):
        list(buffer)
