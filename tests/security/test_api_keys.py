"""A planted provider API key reaches nothing that is stored or shown.

The key is put in the environment, as a user would; the providers read it from there and
talk to ``FakeModelServer``, a local server speaking the OpenAI and Anthropic wire
formats, which checks it. Some of its answers are failures whose error body quotes the
key (as careless servers do), long enough that a shortened message would cut the key in
two. The runs then cover a step retried after such a failure, a provider's own retry of
an HTTP 500, a tool call, an artifact, a harness checkpoint (snapshot and step ledger)
and a run that fails for good. Then every byte under the data directory (the SQLite
database and its WAL, blobs, artifacts, memory, checkpoints), the output of the CLI's
``show`` and ``events`` (run as real processes), the UI's JSON endpoints and every error
message are searched for the key, pieces of it and its base64 form.
"""

from __future__ import annotations

import base64
import contextlib
import secrets
import zlib
from pathlib import Path
from typing import Any

import pytest

from little_workflow.artifacts import ARTIFACT_TOOLS
from little_workflow.errors import LittleWorkflowError, RunFailedError
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import (
    AnthropicProvider,
    ModelRequest,
    OpenAICompatibleProvider,
)
from little_workflow.runtime import Runtime
from little_workflow.storage import open_storage, open_store
from little_workflow.testing.fake_models import FakeModelServer
from tests.harness.durable_support import durable_harness
from tests.runtime.support import FakeSleep, cli
from tests.ui.support import client

FLOW = Path(__file__).resolve().parent / "flows" / "keys.yaml"
SECRET = secrets.token_hex(20)
KEY = f"sk-planted-{SECRET}"


def needles() -> dict[str, bytes]:
    """What must not appear anywhere: the key, each half of its secret part, base64 forms."""
    found = {
        "key": KEY.encode(),
        # Ten hex digits: long enough never to occur by chance in the scanned bytes.
        "secret head": SECRET[:10].encode(),
        "secret tail": SECRET[-10:].encode(),
    }
    for shift in range(3):  # base64 of the key at any offset in a longer text
        encoded = base64.b64encode(b"x" * shift + KEY.encode())[4:-4]
        found[f"base64/{shift}"] = encoded
        found[f"urlsafe base64/{shift}"] = base64.urlsafe_b64encode(b"x" * shift + KEY.encode())[
            4:-4
        ]
    return found


def leaks(data: bytes | str, where: str) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [f"{name} in {where}" for name, needle in needles().items() if needle in raw]


def echo(status: int) -> dict[str, Any]:
    """A failure whose body quotes the key across the 300th character: a message shortened
    before it is redacted would keep the key's first 23 characters."""
    return {"status": status, "message": "x" * 273 + f" {KEY} was the key you sent"}


@tool
def lookup(topic: str) -> dict[str, str]:
    """Look a topic up.

    Args:
        topic: What to look up.
    """
    return {"topic": topic, "facts": "three facts"}


def script(request: ModelRequest) -> Any:
    """The writer writes an artifact, looks something up, answers; the critic answers."""
    if not request.tools:
        return "Looks good."
    results = [m for m in request.messages if m.role == "tool"]
    if not results:
        return {
            "tool_calls": [
                {
                    "id": "c_write",
                    "name": "write_artifact",
                    "arguments": {"name": "draft.md", "content": "Draft"},
                }
            ]
        }
    if len(results) == 1:
        return {"tool_calls": [{"id": "c_look", "name": "lookup", "arguments": {"topic": "x"}}]}
    return "Written."


def slots(server: FakeModelServer) -> dict[str, ModelSlot]:
    sleep = FakeSleep()
    return {
        "openai": ModelSlot(
            provider=OpenAICompatibleProvider(server.openai_base_url, max_retries=1, sleep=sleep),
            model="gpt-test",
        ),
        "anthropic": ModelSlot(
            provider=AnthropicProvider(server.url, max_retries=1, sleep=sleep),
            model="claude-test",
        ),
    }


async def _runs(data: Path, server: FakeModelServer, errors: list[str]) -> None:
    options: dict[str, Any] = {
        "model_slots": slots(server),
        "tools": [*ARTIFACT_TOOLS, lookup],
        "sleep": FakeSleep(),
        "inline_payload_bytes": 256,  # most payloads become blobs: those are scanned too
    }
    providers = [slot.provider for slot in options["model_slots"].values()]
    async with Runtime(data, **options) as rt:
        # Attempt 1 of the writer: a 400 quoting the key (not retried by the provider,
        # so the step fails and is retried); attempt 2: a 500 quoting it, which the
        # provider retries itself; then the tool calls and the critic.
        server.fail_next(**echo(400))
        server.fail_next(**echo(500))
        result = await rt.run(FLOW, {"topic": "keys"}, run_id="run_ok")
        assert result.output == {"writer": "Written.", "critic": "Looks good."}
        # A run whose every attempt (two; a 401 is not retried by the provider) is
        # refused with a 401 quoting the key.
        server.fail_next(2, status=401, message=f"Incorrect API key provided: {KEY}.")
        with pytest.raises(RunFailedError) as caught:
            await rt.run(FLOW, {"topic": "keys"}, run_id="run_failed")
        errors.append(str(caught.value))
        errors.append(repr(caught.value))
        assert "OPENAI_API_KEY" in caught.value.message  # the variable is named, not its value
    for provider in providers:
        await provider.aclose()


async def _checkpoint(data: Path, server: FakeModelServer, errors: list[str]) -> None:
    storage = await open_storage(f"file://{data}/checkpoints")
    provider = OpenAICompatibleProvider(server.openai_base_url, max_retries=0, sleep=FakeSleep())
    try:
        harness = durable_harness(storage, provider=provider, tools=[*ARTIFACT_TOOLS, lookup])
        ctx = harness.create_context(id="exec_keys")
        server.fail_next(**echo(400))
        with pytest.raises(LittleWorkflowError) as caught:
            await harness.execute(ctx, "Write")
        errors.append(str(caught.value))
        assert await harness.execute(ctx) == "Written."
        await harness.checkpoint(ctx)
        assert await storage.get("execution:exec_keys:snapshot") is not None
    finally:
        await provider.aclose()
        await storage.close()


async def test_a_planted_key_is_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    data = tmp_path / "data"
    errors: list[str] = []
    async with FakeModelServer(script, api_key=KEY) as server:
        await _runs(data, server, errors)
        await _checkpoint(data, server, errors)
        authorized = [r for r in server.requests if r.status == 200]
        assert len(authorized) >= 5  # the key was really sent, and accepted
    found: list[str] = []
    for message in errors:
        found += leaks(message, "an error message")
    # The provider's retry of the 500 was logged, with the server's reason.
    assert any("retrying" in record.getMessage() for record in caplog.records)
    for record in caplog.records:
        found += leaks(record.getMessage(), f"a log record of {record.name}")
    scanned = 0
    for path in sorted(data.rglob("*")):
        if path.is_file():
            found += leaks(path.read_bytes(), str(path.relative_to(data)))
            scanned += 1
    assert scanned >= 10
    assert {p.name for p in data.iterdir()} >= {"little-workflow.db", "artifacts"}
    # Blobs are rows of the database (or files) and conversation nodes are compressed: a
    # byte scan of the files cannot see into them, so each is read back and inflated.
    store = await open_store(f"sqlite:///{data}/little-workflow.db")
    try:
        blobs = await store.blobs.list()
        assert len(blobs) >= 5
        for info in blobs:
            content = await store.blobs.get(info.digest)
            with contextlib.suppress(zlib.error):
                content = zlib.decompress(content)
            found += leaks(content, f"blob {info.digest}")
    finally:
        await store.close()

    for run_id in ("run_ok", "run_failed"):
        for args in (("show",), ("show", "--json"), ("events",), ("events", "--json")):
            shown = cli(data, args[0], run_id, *args[1:])
            assert shown.returncode == 0, shown.stderr
            assert "harness.model" in shown.stdout or args[0] == "show"
            found += leaks(shown.stdout + shown.stderr, f"`{' '.join(args)} {run_id}`")

    async with client(data) as http:
        pages = ["/api/runs", "/api/loops"]
        for run_id in ("run_ok", "run_failed"):
            pages += [f"/api/runs/{run_id}", f"/api/runs/{run_id}/events"]
            pages.append(f"/api/runs/{run_id}/artifacts")
        listed = (await http.get("/api/runs/run_ok/artifacts")).json()
        artifact_ids = [a["artifactId"] for a in listed["items"]]
        assert artifact_ids
        pages += [f"/api/runs/run_ok/artifacts/{a}" for a in artifact_ids]
        for page in pages:
            response = await http.get(page)
            assert response.status_code == 200, page
            found += leaks(response.content, page)
    assert not found, "\n".join(found)
