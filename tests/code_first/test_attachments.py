"""Images and files sent with an agent's prompt: ``ctx.agent(attachments=...)`` and
LWIR's ``attachments``.

The parts reach the provider after the prompt's text, in order; they are recorded with
the call like the rest of the request, stored once however many turns repeat them, and
a malformed one fails the step with an error naming it before any model is called.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from little_workflow import WorkflowContext, workflow
from little_workflow.errors import InvalidValueError, RunFailedError
from little_workflow.events import HarnessModelCalled, StepAttemptFailed
from little_workflow.harness.models import (
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    TextPart,
    scripted,
)
from little_workflow.lwir import parse_workflow
from tests.runtime.agent_flows import Crash
from tests.runtime.session_support import make

PHOTO = os.urandom(200_000)  # incompressible: a stored copy shows in the blob sizes
PDF = b"%PDF-1.4 a tiny file"
SEEN: list[ModelRequest] = []


def _describe(request: ModelRequest) -> object:
    """Look at the first user message's parts; ask for one tool-free extra turn first."""
    SEEN.append(request)
    first = next(m for m in request.messages if m.role == "user")
    kinds = [part.type for part in first.parts]
    turns = sum(1 for m in request.messages if m.role == "assistant")
    if turns < 2:
        return {"tool_calls": [{"name": "lookup", "arguments": {"name": "photo"}}]}
    return f"saw {'+'.join(kinds)}"


@workflow
async def look(ctx: WorkflowContext, caption: str) -> object:
    return await ctx.agent(
        "worker",
        prompt=f"Describe: {caption}",
        attachments=[
            ImagePart.of(PHOTO, "image/png"),
            FilePart.of(PDF, "application/pdf", "a.pdf"),
        ],
        tools=["lookup"],
    )


@workflow
async def not_a_part(ctx: WorkflowContext) -> object:
    return await ctx.agent("worker", prompt="x", attachments=["a picture"])  # type: ignore[list-item]


CAT_URL = "https://example.invalid/cat.jpg"
LWIR = parse_workflow(
    {
        "lwir": 1,
        "name": "look-lwir",
        "input": {"type": "object"},
        "steps": [
            {
                "id": "agent",
                "kind": "agent",
                "slot": "worker",
                "prompt": "Describe: ${input.caption}",
                "attachments": [
                    "${input.photo}",
                    {"type": "image", "mediaType": "image/jpeg", "url": CAT_URL},
                ],
                "tools": ["lookup"],
            },
            {"id": "out", "kind": "output", "value": "${steps.agent.output}"},
        ],
    }
)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SEEN.clear()


def _first_user(request: ModelRequest) -> Message:
    return next(m for m in request.messages if m.role == "user")


async def test_parts_reach_the_model_after_the_text_and_are_stored_once(tmp_path: Path) -> None:
    provider = scripted(_describe)
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        result = await rt.run(look, {"caption": "a cat"}, run_id="run_look")
        records = await rt.events.read("run_look")
        stored = await rt.blobs.list()
    assert result.output == "saw text+image+file"
    assert provider.calls == 3
    for request in SEEN:
        text, image, file = _first_user(request).parts
        assert text == TextPart(text="Describe: a cat")
        assert isinstance(image, ImagePart)
        assert image.decoded() == PHOTO
        assert isinstance(file, FilePart)
        assert (file.decoded(), file.filename) == (PDF, "a.pdf")
    # Recorded with each call as sent, so a resume and the UI see the same request.
    called = [r.event for r in records if isinstance(r.event, HarnessModelCalled)]
    assert len(called) == 3
    assert [ModelRequest.model_validate(c.request) for c in called] == SEEN
    # Three requests repeat the photo; the store holds it once (its base64, compressed
    # back to about the bytes' size: they are random), not three times.
    total = sum(blob.size for blob in stored)
    assert 0.9 * len(PHOTO) < total < 1.5 * len(PHOTO), (total, len(PHOTO))


async def test_a_resume_replays_the_calls_with_their_parts(tmp_path: Path) -> None:
    rt, provider, tools = make(tmp_path, provider=scripted(_describe))
    tools.crash_at = "lookup"  # the process's work stops at the first tool call
    async with rt:
        with pytest.raises(Crash):
            await rt.run(look, {"caption": "a cat"}, run_id="run_crash")
    assert provider.calls == 1
    rt, provider, _ = make(tmp_path, provider=scripted(_describe))
    async with rt:
        result = await rt.resume("run_crash")
        records = await rt.events.read("run_crash")
    assert result.output == "saw text+image+file"
    assert len([r for r in records if r.type == "harness.model.responded"]) == 3
    assert provider.calls == 2  # the committed first answer is replayed, not asked again
    for request in SEEN:
        assert [p.type for p in _first_user(request).parts] == ["text", "image", "file"]


async def test_lwir_attachments_are_templates_rendered_from_the_input(tmp_path: Path) -> None:
    provider = scripted(_describe)
    rt, _, _ = make(tmp_path, provider=provider)
    photo = ImagePart.of(PHOTO[:64], "image/png").model_dump(mode="json", by_alias=True)
    async with rt:
        result = await rt.run(LWIR, {"caption": "a dog", "photo": photo}, run_id="run_lwir")
    assert result.output == "saw text+image+image"
    text, inline, linked = _first_user(SEEN[0]).parts
    assert text == TextPart(text="Describe: a dog")
    assert isinstance(inline, ImagePart)
    assert inline.decoded() == PHOTO[:64]
    assert isinstance(linked, ImagePart)
    assert (linked.url, linked.media_type) == (CAT_URL, "image/jpeg")


@pytest.mark.parametrize(
    ("photo", "named"),
    [
        ({"type": "image", "mediaType": "image/png"}, "either data or url"),
        ({"type": "image", "mediaType": "image/png", "data": "not base64!"}, "base64"),
        ({"type": "video", "mediaType": "video/mp4", "url": "https://x.invalid"}, "video"),
        ("just a string", "an image or file part"),
    ],
)
async def test_a_malformed_attachment_fails_the_step_before_any_call(
    tmp_path: Path, photo: object, named: str
) -> None:
    provider = scripted(_describe)
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(LWIR, {"caption": "x", "photo": photo}, run_id="run_bad")
        records = await rt.events.read("run_bad")
    assert provider.calls == 0
    message = str(caught.value)
    assert f"{InvalidValueError.code}: agent.attachments[0]" in message
    assert named in message
    # Recorded as the step's failure, not left as a run that seems to be running.
    failed = [r.event for r in records if isinstance(r.event, StepAttemptFailed)]
    assert [(e.step_path, e.error_code) for e in failed] == [("agent", InvalidValueError.code)]
    assert records[-1].type == "RunFailed"
    assert not any(isinstance(r.event, HarnessModelCalled) for r in records)


async def test_a_code_first_attachment_must_be_a_part(tmp_path: Path) -> None:
    rt, provider, _ = make(tmp_path, provider=scripted(_describe))
    async with rt:
        with pytest.raises(RunFailedError, match="ImagePart or FilePart objects, not str"):
            await rt.run(not_a_part, {}, run_id="run_str")
    assert provider.calls == 0
