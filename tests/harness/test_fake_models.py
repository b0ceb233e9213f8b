"""The fake model server: as a separate OS process with a count file that outlives a
killed client, and in-process, checking requests the way the real APIs do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from little_workflow.harness.models import Message, ModelRequest, OpenAICompatibleProvider
from little_workflow.testing.fake_models import FakeModelServer

KEY = "sk-fake-server-key-42"

CLIENT = """
import asyncio, sys
from little_workflow.harness.models import AnthropicProvider, Message, ModelRequest
from little_workflow.harness.models import OpenAICompatibleProvider

async def main(kind, url, count):
    if kind == "openai":
        provider = OpenAICompatibleProvider(url + "/v1", max_retries=0)
    else:
        provider = AnthropicProvider(url, max_retries=0)
    request = ModelRequest(model="m", messages=(Message(role="user", content="hi"),))
    for _ in range(count):
        response = await provider.complete(request)
        print(response.message.content, flush=True)
    sys.stdin.readline()  # stay alive until killed

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""


class Processes:
    """Children started by a test; all killed and reaped at teardown."""

    def __init__(self) -> None:
        self.children: list[subprocess.Popen[str]] = []

    def start(self, args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
        child = subprocess.Popen(
            [sys.executable, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        self.children.append(child)
        return child

    def close(self) -> None:
        for child in self.children:
            if child.poll() is None:
                child.kill()
            child.communicate(timeout=30)


@pytest.fixture
def processes() -> Iterator[Processes]:
    started = Processes()
    yield started
    started.close()


def start_server(processes: Processes, tmp_path: Path, script: object, *extra: str) -> str:
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script), encoding="utf-8")
    server = processes.start(
        [
            "-m",
            "little_workflow.testing.fake_models",
            "--port",
            "0",
            "--script",
            str(script_file),
            "--count-file",
            str(tmp_path / "count.txt"),
            "--api-key-env",
            "FAKE_SERVER_KEY",
            *extra,
        ],
        env={"FAKE_SERVER_KEY": KEY},
    )
    assert server.stdout is not None
    url = server.stdout.readline().strip()
    assert url.startswith("http://127.0.0.1:"), server.stderr.read() if server.stderr else ""
    return url


def start_client(processes: Processes, kind: str, url: str, count: int) -> subprocess.Popen[str]:
    return processes.start(
        ["-c", CLIENT, kind, url, str(count)],
        env={"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY},
    )


def count_lines(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "count.txt"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_count_survives_a_killed_client(processes: Processes, tmp_path: Path) -> None:
    url = start_server(processes, tmp_path, {"replies": ["one", "two", "three"]})
    first = start_client(processes, "openai", url, 2)
    assert first.stdout is not None
    assert [first.stdout.readline().strip() for _ in range(2)] == ["one", "two"]
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert [line["seq"] for line in count_lines(tmp_path)] == [1, 2]
    # The server outlived its client: the next client, of the other wire format, gets
    # the next reply.
    second = start_client(processes, "anthropic", url, 1)
    assert second.stdout is not None
    assert second.stdout.readline().strip() == "three"
    lines = count_lines(tmp_path)
    assert [(line["seq"], line["path"]) for line in lines] == [
        (1, "/v1/chat/completions"),
        (2, "/v1/chat/completions"),
        (3, "/v1/messages"),
    ]


def test_a_call_in_flight_is_counted_when_it_arrives(processes: Processes, tmp_path: Path) -> None:
    url = start_server(processes, tmp_path, ["too late"], "--delay", "60")
    client = start_client(processes, "openai", url, 1)
    deadline = time.monotonic() + 30
    while not count_lines(tmp_path):
        assert client.poll() is None, client.stderr.read() if client.stderr else ""
        assert time.monotonic() < deadline, "the request never reached the server"
        time.sleep(0.01)
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=30)
    assert len(count_lines(tmp_path)) == 1


def test_the_server_process_stops_on_sigterm(processes: Processes, tmp_path: Path) -> None:
    url = start_server(processes, tmp_path, ["x"])
    server = processes.children[0]
    server.terminate()
    assert server.wait(timeout=30) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{url}/v1/messages", json={})


# -- in-process ------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeModelServer]:
    with FakeModelServer(["ok"], api_key=KEY, count_file=tmp_path / "count.txt") as running:
        yield running


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as http:
        yield http


def post_openai(client: httpx.Client, server: FakeModelServer, body: object) -> httpx.Response:
    return client.post(
        f"{server.openai_base_url}/chat/completions",
        content=json.dumps(body) if not isinstance(body, str) else body,
        headers={"authorization": f"Bearer {KEY}"},
    )


def post_anthropic(
    client: httpx.Client, server: FakeModelServer, body: object, **headers: str
) -> httpx.Response:
    return client.post(
        f"{server.url}/v1/messages",
        json=body,
        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01", **headers},
    )


USER = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("not json", "could not parse the JSON body"),
        ({"messages": [USER]}, "you must provide a model parameter"),
        ({"model": "m"}, "Missing required parameter: 'messages'"),
        ({"model": "m", "messages": []}, "empty array"),
        ({"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "Invalid value: 'robot'"),
        (
            {
                "model": "m",
                "messages": [USER, {"role": "tool", "tool_call_id": "c9", "content": "x"}],
            },
            "must be a response to a preceeding message with 'tool_calls'",
        ),
        (
            {"model": "m", "messages": [USER, {"role": "assistant", "tool_calls": [CALL]}, USER]},
            "did not have response messages: c1",
        ),
        (
            {
                "model": "m",
                "messages": [
                    USER,
                    {
                        "role": "assistant",
                        "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {}}}],
                    },
                ],
            },
            "expected a string",
        ),
        ({"model": "m", "messages": [USER], "temperature": 3}, "Invalid 'temperature'"),
        ({"model": "m", "messages": [USER], "tools": [{"type": "function"}]}, "tools[0]"),
    ],
)
def test_openai_requests_are_checked(
    server: FakeModelServer, client: httpx.Client, body: object, fragment: str
) -> None:
    response = post_openai(client, server, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert fragment in error["message"]
    assert error["type"] == "invalid_request_error"
    assert set(error) == {"message", "type", "param", "code"}
    assert server.last_request.status == 400
    assert server.last_request.request is None


TOOL_USE = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "m", "messages": [USER]}, "max_tokens: Field required"),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]},
            'Unexpected role "system"',
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [
                    USER,
                    {"role": "assistant", "content": "hm"},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]},
                ],
            },
            "unexpected `tool_use_id` found in `tool_result` blocks: t9",
        ),
        (
            {
                "model": "m",
                "max_tokens": 5,
                "messages": [USER, {"role": "assistant", "content": [TOOL_USE]}, USER],
            },
            "`tool_use` ids were found without `tool_result` blocks immediately after: t1",
        ),
        (
            {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]},
            "text content blocks must be non-empty",
        ),
        ({"model": "m", "max_tokens": 0, "messages": [USER]}, "greater than or equal to 1"),
        (
            {"model": "m", "max_tokens": 5, "messages": [USER], "tools": [{"name": "f"}]},
            "tools.0.input_schema: Field required",
        ),
    ],
)
def test_anthropic_requests_are_checked(
    server: FakeModelServer, client: httpx.Client, body: object, fragment: str
) -> None:
    response = post_anthropic(client, server, body)
    assert response.status_code == 400
    assert response.json()["type"] == "error"
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert fragment in response.json()["error"]["message"]


def test_anthropic_version_header_is_required(
    server: FakeModelServer, client: httpx.Client
) -> None:
    body = {"model": "m", "max_tokens": 5, "messages": [USER]}
    response = client.post(f"{server.url}/v1/messages", json=body, headers={"x-api-key": KEY})
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "anthropic-version: header is required",
    }


ANTHROPIC_BODY = {"model": "m", "max_tokens": 5, "messages": [USER]}


@pytest.mark.parametrize(
    "credentials",
    [
        {"x-api-key": KEY},
        {"authorization": f"Bearer {KEY}"},
        {"authorization": f"bearer {KEY}"},
        # x-api-key is the one checked when both come.
        {"x-api-key": KEY, "authorization": "Bearer sk-something-else"},
    ],
)
@pytest.mark.parametrize("version", ["2023-06-01", "2024-02-29", "2026-10-21", "2099-12-31"])
def test_anthropic_takes_either_credential_and_any_dated_version(
    server: FakeModelServer, client: httpx.Client, credentials: dict[str, str], version: str
) -> None:
    headers = {**credentials, "anthropic-version": version}
    response = client.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["content"] == [{"type": "text", "text": "ok"}]
    assert server.last_request.headers["anthropic-version"] == version


@pytest.mark.parametrize(
    ("credentials", "message"),
    [
        ({"authorization": "Bearer sk-wrong-token-9999"}, "invalid bearer token: sk-***9999"),
        ({"x-api-key": "sk-wrong-key-8888"}, "invalid x-api-key: sk-***8888"),
        (
            {"x-api-key": "sk-wrong-key-8888", "authorization": f"Bearer {KEY}"},
            "invalid x-api-key: sk-***8888",
        ),
        (
            {"authorization": f"Basic {KEY}"},
            "invalid authorization header: expected the Bearer scheme",
        ),
        ({}, "x-api-key header is required"),
    ],
)
def test_anthropic_refusal_names_the_wrong_credential_and_masks_it(
    server: FakeModelServer,
    client: httpx.Client,
    credentials: dict[str, str],
    message: str,
) -> None:
    headers = {**credentials, "anthropic-version": "2023-06-01"}
    refused = client.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY, headers=headers)
    assert refused.status_code == 401
    assert refused.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": message},
    }
    assert "wrong-token" not in refused.text
    assert "wrong-key" not in refused.text
    assert KEY not in refused.text


@pytest.mark.parametrize(
    "version",
    ["latest", "2023-01-01", "2023-05-31", "2023-13-01", "2023-02-30", "20230601", "2023-6-1"],
)
def test_anthropic_refuses_a_malformed_or_early_version(
    server: FakeModelServer, client: httpx.Client, version: str
) -> None:
    headers = {"x-api-key": KEY, "anthropic-version": version}
    refused = client.post(f"{server.url}/v1/messages", json=ANTHROPIC_BODY, headers=headers)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        "type": "invalid_request_error",
        "message": f"anthropic-version: {version!r} is not a valid version "
        "(a date, 2023-06-01 or later)",
    }
    assert server.last_request.request is None  # refused before the script saw it


def test_credentials_are_checked_and_masked(server: FakeModelServer, client: httpx.Client) -> None:
    body = {"model": "m", "messages": [USER]}
    missing = client.post(f"{server.openai_base_url}/chat/completions", json=body)
    assert missing.status_code == 401
    assert "You didn't provide an API key" in missing.json()["error"]["message"]
    wrong = client.post(
        f"{server.openai_base_url}/chat/completions",
        json=body,
        headers={"authorization": "Bearer sk-wrong-123456"},
    )
    assert wrong.json()["error"] == {
        "message": "Incorrect API key provided: sk-***3456.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
    anthropic = client.post(
        f"{server.url}/v1/messages",
        json={**body, "max_tokens": 5},
        headers={"anthropic-version": "2023-06-01"},
    )
    assert anthropic.json()["error"] == {
        "type": "authentication_error",
        "message": "x-api-key header is required",
    }


def test_unknown_routes_are_404(server: FakeModelServer, client: httpx.Client) -> None:
    assert client.post(f"{server.url}/v1/embeddings", json={}).status_code == 404
    assert client.get(f"{server.url}/v1/messages").status_code == 404
    assert [r.wire for r in server.requests] == [None, None]


def test_answers_in_each_format(client: httpx.Client) -> None:
    reply = {"content": "a", "tool_calls": [{"id": "t1", "name": "f", "arguments": {"x": 1}}]}
    with FakeModelServer([reply, reply]) as local:
        openai = client.post(
            f"{local.openai_base_url}/chat/completions", json={"model": "m", "messages": [USER]}
        ).json()
        anthropic = client.post(
            f"{local.url}/v1/messages",
            json={"model": "m", "max_tokens": 9, "messages": [USER]},
            headers={"anthropic-version": "2023-06-01"},
        ).json()
    assert openai["object"] == "chat.completion"
    assert openai["choices"][0]["finish_reason"] == "tool_calls"
    assert openai["choices"][0]["message"]["tool_calls"] == [
        {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    ]
    # No usage scripted: the estimate, ceil(characters / 4): "hi" and its role (1 + 4),
    # "a" and the call, f and {"x":1}: 9 characters, so 3.
    assert openai["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert anthropic["usage"] == {
        "input_tokens": 5,
        "output_tokens": 3,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    assert anthropic["type"] == "message"
    assert anthropic["content"] == [
        {"type": "text", "text": "a"},
        {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}},
    ]
    assert anthropic["stop_reason"] == "tool_use"


def test_scripted_usage_fills_each_formats_usage_fields(client: httpx.Client) -> None:
    usage = {
        "input_tokens": 1200,
        "output_tokens": 90,
        "cached_input_tokens": 1000,
        "cache_write_tokens": 150,
        "reasoning_tokens": 40,
    }
    reply = {"content": "a", "usage": usage}
    with FakeModelServer([reply, reply]) as local:
        openai = client.post(
            f"{local.openai_base_url}/chat/completions", json={"model": "m", "messages": [USER]}
        ).json()
        anthropic = client.post(
            f"{local.url}/v1/messages",
            json={"model": "m", "max_tokens": 9, "messages": [USER]},
            headers={"anthropic-version": "2023-06-01"},
        ).json()
    assert openai["usage"] == {
        "prompt_tokens": 1200,
        "completion_tokens": 90,
        "total_tokens": 1290,
        "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 150},
        "completion_tokens_details": {"reasoning_tokens": 40},
    }
    assert anthropic["usage"] == {
        "input_tokens": 50,  # the uncached rest: 1200 - 1000 read - 150 written
        "output_tokens": 90,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 150,
        "output_tokens_details": {"thinking_tokens": 40},
    }


def test_requests_are_recorded_and_counted(
    server: FakeModelServer, client: httpx.Client, tmp_path: Path
) -> None:
    post_openai(client, server, {"model": "m", "messages": [USER]})
    server.fail_next(1, status=500)
    post_openai(client, server, {"model": "m", "messages": [USER]})
    first, second = server.requests
    assert (first.seq, first.wire, first.status) == (1, "openai", 200)
    assert first.request == ModelRequest(model="m", messages=(Message(role="user", content="hi"),))
    assert first.response["choices"][0]["message"]["content"] == "ok"
    assert (second.seq, second.status, second.request) == (2, 500, None)
    assert second.response["error"]["type"] == "server_error"
    lines = (tmp_path / "count.txt").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2]


def test_a_script_function_that_raises_is_a_500(client: httpx.Client) -> None:
    def broken(request: ModelRequest) -> str:
        raise RuntimeError("bug in the script")

    with FakeModelServer(broken) as local:
        response = client.post(
            f"{local.openai_base_url}/chat/completions", json={"model": "m", "messages": [USER]}
        )
    assert response.status_code == 500
    assert "RuntimeError: bug in the script" in response.json()["error"]["message"]


def test_sync_start_stop_is_idempotent_and_frees_the_port() -> None:
    local = FakeModelServer(["x"]).start()
    assert local.start() is local
    url = local.url
    with httpx.Client() as http:
        ok = http.post(f"{url}/chat/completions", json={"model": "m", "messages": [USER]})
        assert ok.json()["choices"][0]["message"]["content"] == "x"
        local.stop()
        local.stop()
        with pytest.raises(httpx.TransportError):
            http.post(f"{url}/chat/completions", json={"model": "m", "messages": [USER]})
    with pytest.raises(RuntimeError, match="not started"):
        _ = local.port
    with pytest.raises(ValueError, match="HTTP error status"):
        local.fail_next(status=200)


async def test_async_context_manager_and_async_script() -> None:
    async def answer(request: ModelRequest) -> str:
        return f"async {request.model}"

    async with FakeModelServer(answer) as local:
        provider = OpenAICompatibleProvider(local.openai_base_url, environ={})
        try:
            response = await provider.complete(
                ModelRequest(model="m", messages=(Message(role="user", content="hi"),))
            )
        finally:
            await provider.aclose()
    assert response.message.content == "async m"
