"""The providers over the official SDKs: the conformance suite, then what only they do.

Each provider is built over an SDK client the test configures, as a user would, pointed
at a local ``FakeModelServer``; the fake records every request, so retries are counted
on the server, not in the client.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow import WorkflowContext, workflow
from little_workflow.errors import ModelProviderError
from little_workflow.events import HarnessModelCalled
from little_workflow.harness import ModelSlot
from little_workflow.harness.models import (
    AnthropicSDKProvider,
    Message,
    ModelProvider,
    ModelRequest,
    OpenAISDKProvider,
)
from little_workflow.testing.fake_models import FakeModelServer
from little_workflow.testing.provider_conformance import (
    CONFORMANCE_KEY,
    ModelProviderConformance,
    ProviderUnderTest,
    ScriptSource,
)
from tests.runtime.agent_flows import Tools, script
from tests.runtime.support import runtime

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

KINDS = ("openai-sdk", "anthropic-sdk")
#: Claude through the clouds' clients of the anthropic SDK: the same provider, another
#: client. Azure is OpenAI's (the Azure tests below).
CLOUD_KINDS = ("anthropic-vertex", "anthropic-bedrock")

#: Bedrock signs with an AWS secret key the fake never sees (it checks the key id).
AWS_SECRET = "aws-secret-lw-0123456789abcdefghij"


def anthropic_client(kind: str, server: FakeModelServer, key: str, **options: Any) -> Any:
    """An anthropic SDK client of ``kind`` aimed at ``server``, with ``key`` as its
    credential: the API key, Vertex's access token, or Bedrock's AWS access key id."""
    if kind == "anthropic-vertex":
        # With an access token given, the client makes no google-auth call at all.
        return anthropic.AsyncAnthropicVertex(
            region="us-east5",
            project_id="lw-project",
            access_token=key,
            base_url=server.vertex_base_url,
            **options,
        )
    if kind == "anthropic-bedrock":
        pytest.importorskip("botocore", reason="Bedrock's client signs with botocore")
        return anthropic.AsyncAnthropicBedrock(
            aws_access_key=key,
            aws_secret_key=AWS_SECRET,
            aws_region="us-east-1",
            base_url=server.url,
            **options,
        )
    return anthropic.AsyncAnthropic(base_url=server.url, api_key=key, **options)


def sdk_provider(
    kind: str, server: FakeModelServer, key: str, **options: Any
) -> tuple[ModelProvider, Any]:
    """A provider of ``kind`` over a default-configured SDK client aimed at ``server``,
    and the client (the caller's to close).

    The client keeps the SDK's default ``max_retries`` (2): the provider must turn it off.
    """
    if kind == "openai-sdk":
        client: Any = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=key)
        return OpenAISDKProvider(client, **options), client
    client = anthropic_client(kind, server, key)
    return AnthropicSDKProvider(client, **options), client


class SdkProviders:
    """Opens SDK providers behind fake servers; ``aclose`` closes them all."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._opened: list[tuple[ProviderUnderTest, Any]] = []

    async def __call__(
        self, script: ScriptSource, *, max_retries: int = 2, client_key: str | None = None
    ) -> ProviderUnderTest:
        sleeps: list[float] = []

        async def sleep(seconds: float) -> None:
            sleeps.append(seconds)

        server = FakeModelServer(script, api_key=CONFORMANCE_KEY, echo_credentials=True)
        server.start()
        key = client_key or CONFORMANCE_KEY
        provider, client = sdk_provider(
            self.kind, server, key, max_retries=max_retries, sleep=sleep
        )
        opened = ProviderUnderTest(
            provider=provider,
            server=server,
            api_key=key,
            sleeps=sleeps,
            refused_key_status=403 if self.kind == "anthropic-bedrock" else 401,
        )
        self._opened.append((opened, client))
        return opened

    async def aclose(self) -> None:
        for opened, client in self._opened:
            await opened.provider.aclose()
            await client.close()  # the caller's client: the provider leaves it open
            if opened.server is not None:
                await asyncio.to_thread(opened.server.stop)
        self._opened.clear()


class TestSdkProviderConformance(ModelProviderConformance):
    @pytest.fixture(params=KINDS + CLOUD_KINDS)
    async def open_provider(self, request: pytest.FixtureRequest) -> AsyncIterator[SdkProviders]:
        providers = SdkProviders(request.param)
        yield providers
        await providers.aclose()


def _request(text: str = "hi") -> ModelRequest:
    return ModelRequest(model="sdk-model", messages=(Message(role="user", content=text),))


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


KEY = "sk-sdk-provider-key-7777"


# -- the SDK's own retries are off: ours are the only ones ----------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_two_503s_then_success_take_exactly_our_three_requests(kind: str) -> None:
    async with FakeModelServer(["third time"], api_key=KEY) as server:
        if kind == "openai-sdk":
            client: Any = openai.AsyncOpenAI(
                base_url=server.openai_base_url, api_key=KEY, max_retries=5
            )
            provider: ModelProvider = OpenAISDKProvider(client, sleep=(sleeps := Sleeps()))
        else:
            client = anthropic.AsyncAnthropic(base_url=server.url, api_key=KEY, max_retries=5)
            provider = AnthropicSDKProvider(client, sleep=(sleeps := Sleeps()))
        server.fail_next(2, status=503)
        async with client:
            response = await provider.complete(_request())
            await provider.aclose()
            # Left as the caller configured it; only the provider's copy has retries off.
            assert client.max_retries == 5
        statuses = [r.status for r in server.requests]
    assert response.message.content == "third time"
    # With the SDK's retries on too, the first 503 alone would have been asked 6 times.
    assert statuses == [503, 503, 200]
    assert sleeps.calls == [0.5, 1.0]  # our backoff, through our injected sleep


@pytest.mark.parametrize("kind", KINDS)
async def test_no_retries_means_one_request(kind: str) -> None:
    async with FakeModelServer(["never"], api_key=KEY) as server:
        provider, client = sdk_provider(kind, server, KEY, max_retries=0, sleep=Sleeps())
        server.fail_next(1, status=503)
        async with client:
            with pytest.raises(ModelProviderError) as caught:
                await provider.complete(_request())
        assert [r.status for r in server.requests] == [503]
    assert (caught.value.status, caught.value.retryable) == (503, True)


# -- the client as the user configured it ---------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_custom_http_client_and_base_url_are_honoured(kind: str) -> None:
    import httpx2

    seen: list[str] = []

    async def hook(request: Any) -> None:
        seen.append(str(request.url))

    async with (
        FakeModelServer(["through the proxy"], api_key=KEY) as server,
        httpx2.AsyncClient(
            headers={"x-proxy-tag": "lw-7"}, event_hooks={"request": [hook]}
        ) as http,
    ):
        if kind == "openai-sdk":
            # The fake also answers /chat/completions: a base URL without /v1 shows it is
            # the client's base URL that is used, not a default.
            client: Any = openai.AsyncOpenAI(base_url=server.url, api_key=KEY, http_client=http)
            provider: ModelProvider = OpenAISDKProvider(client)
            path = "/chat/completions"
        else:
            client = anthropic.AsyncAnthropic(base_url=server.url, api_key=KEY, http_client=http)
            provider = AnthropicSDKProvider(client)
            path = "/v1/messages"
        response = await provider.complete(_request())
        await provider.aclose()
        assert not http.is_closed  # the caller's client stays the caller's
        recorded, url = server.last_request, server.url
    assert response.message.content == "through the proxy"
    assert (recorded.path, recorded.headers["x-proxy-tag"]) == (path, "lw-7")
    assert seen == [f"{url}{path}"]


async def test_openai_takes_an_httpx_client_too_and_a_cut_stream_is_ours() -> None:
    # The openai SDK also accepts an httpx (not httpx2) client; a stream it reads then
    # fails with httpx's errors, which must be classified like httpx2's.
    import httpx

    script = ["one two three four five six", "again"]
    async with (
        FakeModelServer(script, api_key=KEY) as server,
        httpx.AsyncClient(headers={"x-legacy-client": "yes"}) as http,
    ):
        client = openai.AsyncOpenAI(base_url=server.openai_base_url, api_key=KEY, http_client=http)
        provider = OpenAISDKProvider(client, sleep=Sleeps())
        server.cut_stream_after(3)
        pieces: list[str] = []

        async def sink(delta: Any) -> None:
            pieces.append(delta.text)

        with pytest.raises(ModelProviderError, match="cut after 3 events") as caught:
            await provider.stream(_request(), sink)
        answered = await provider.complete(_request())
        recorded = server.requests
    assert caught.value.retryable
    assert pieces
    assert "one two three four five six".startswith("".join(pieces))
    assert answered.message.content == "again"
    assert [r.headers["x-legacy-client"] for r in recorded] == ["yes", "yes"]


async def test_an_azure_client_reaches_its_deployment() -> None:
    async with FakeModelServer(["from azure", "streamed from azure"], api_key=KEY) as server:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=server.url, api_version="2024-10-21", api_key=KEY
        )
        async with client:
            provider = OpenAISDKProvider(client)
            request = ModelRequest(
                model="my-gpt-deployment", messages=(Message(role="user", content="hi"),)
            )
            completed = await provider.complete(request)
            pieces: list[str] = []

            async def sink(delta: Any) -> None:
                pieces.append(delta.text)

            streamed = await provider.stream(request, sink)
        recorded = server.requests
    assert completed.message.content == "from azure"
    assert streamed.message.content == "streamed from azure"
    assert "".join(pieces) == "streamed from azure"
    assert {r.path for r in recorded} == {"/openai/deployments/my-gpt-deployment/chat/completions"}
    assert all(r.headers["api-key"] == KEY and r.status == 200 for r in recorded)
    assert "authorization" not in recorded[0].headers


async def test_an_azure_key_refused_is_redacted() -> None:
    wrong = "azure-wrong-key-0123456789"
    async with FakeModelServer(["never"], api_key=KEY, echo_credentials=True) as server:
        client = openai.AsyncAzureOpenAI(
            azure_endpoint=server.url, api_version="2024-10-21", api_key=wrong
        )
        async with client:
            provider = OpenAISDKProvider(client)
            with pytest.raises(ModelProviderError) as caught:
                await provider.complete(_request())
        assert wrong in str(server.last_request.response)
    message = str(caught.value)
    assert caught.value.status == 401
    assert wrong not in message
    assert "[redacted]" in message
    assert "/openai/deployments/sdk-model/chat/completions" in message
    assert "api-version" not in message


async def test_a_call_the_anthropic_sdk_refuses_to_send_is_a_typed_error() -> None:
    async with FakeModelServer(["never"], api_key=KEY) as server:
        provider, client = sdk_provider("anthropic-sdk", server, KEY)
        request = ModelRequest(
            model="sdk-model", messages=(Message(role="user", content="hi"),), max_tokens=64_000
        )
        async with client:
            with pytest.raises(ModelProviderError, match="refused by the SDK") as caught:
                await provider.complete(request)
        assert server.requests == []
    assert not caught.value.retryable


# -- an agent run through the runtime --------------------------------------------------


@workflow
async def judged(ctx: WorkflowContext, who: str) -> str:
    answer = await ctx.agent(
        "worker", prompt=f"Score {who}", tools=["lookup", "score"], instructions="Score."
    )
    assert isinstance(answer, str)
    return answer


@pytest.mark.parametrize("kind", KINDS)
async def test_an_agent_run_end_to_end_through_an_sdk_provider(kind: str, tmp_path: Path) -> None:
    async with FakeModelServer(script, api_key=KEY) as server:
        provider, client = sdk_provider(kind, server, KEY)
        tools = Tools()
        slots = {"worker": ModelSlot(provider=provider, model="worker-model")}
        rt = runtime(tmp_path, model_slots=slots, tools=tools.all())
        async with client, rt:
            result = await rt.run(judged, {"who": "Ada"}, run_id="run_sdk")
            records = await rt.events.read("run_sdk")
            again = await rt.resume("run_sdk")
        recorded = server.requests
    assert result.output == "Ada scores 70"
    assert [name for name, _ in tools.calls] == ["lookup", "score"]
    assert sum(isinstance(r.event, HarnessModelCalled) for r in records) == 3
    # Three turns over the wire, the tool results sent back the wire's way.
    assert [r.status for r in recorded] == [200, 200, 200]
    last = recorded[-1].request
    assert last is not None
    assert [m.role for m in last.messages if m.role == "tool"] == ["tool", "tool"]
    # A finished run's resume returns its output without calling the model again.
    assert again.output == "Ada scores 70"
    assert len(server.requests) == 3


# -- without the extra ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("blocked", "name", "extra"),
    [("openai", "OpenAISDKProvider", "openai"), ("anthropic", "AnthropicSDKProvider", "anthropic")],
)
def test_without_its_sdk_a_provider_names_the_extra(blocked: str, name: str, extra: str) -> None:
    code = (
        "import sys\n"
        "sys.modules['openai'] = None\n"
        "sys.modules['anthropic'] = None\n"
        "import little_workflow.harness.models as models\n"
        "from little_workflow.errors import MissingExtraError\n"
        # The package, and the provider's name, import without the SDK.
        f"provider = getattr(models, {name!r})\n"
        "try:\n"
        "    provider()\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.code, exc.extra, exc.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith(f"missing_extra {extra} "), done.stdout + done.stderr
    assert f"{name} needs the {extra!r} extra ({blocked} is not installed)" in done.stdout
    assert f"pip install 'little-workflow[{extra}]'" in done.stdout
