"""A streamed, structured, multimodal agent step, for the mid-stream kill test.

``describe`` sends a photo with its prompt and asks for a ``Caption``; the model (the
fake server, another process, at ``LW_TEST_MODEL_URL``) first calls ``measure``, then
answers with the caption as JSON written over many lines, so that a stream paced by
the server's ``--event-delay`` is long enough to be killed in the middle.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pydantic import BaseModel

from little_workflow import WorkflowContext, workflow
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import tool
from little_workflow.harness.models import ImagePart, ModelRequest, OpenAICompatibleProvider
from little_workflow.runtime import RuntimeSetup

PHOTO = bytes(range(256)) * 40


class Caption(BaseModel):
    subject: str
    width_px: int
    details: list[str]


@tool
def measure(image_bytes: int) -> dict[str, int]:
    """Measure the photo.

    Args:
        image_bytes: The photo's size in bytes.
    """
    path = os.environ.get("LW_TEST_TOOL_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"measure {image_bytes}\n")
    return {"width_px": image_bytes // 16}


@workflow
async def describe(ctx: WorkflowContext, title: str) -> dict[str, Any]:
    caption = await ctx.agent(
        "vision",
        prompt=f"Describe the photo {title!r}; measure it first.",
        attachments=[ImagePart.of(PHOTO, "image/png")],
        tools=["measure"],
        output=Caption,
    )
    return {"title": title, **caption.model_dump()}


def script(request: ModelRequest) -> Any:
    """A tool call first; then the caption, one detail per line, 40 of them."""
    first = next(m for m in request.messages if m.role == "user")
    image = next(p for p in first.parts if p.type == "image")
    assert isinstance(image, ImagePart)
    size = len(image.decoded())
    tool_results = [m for m in request.messages if m.role == "tool"]
    if not tool_results:
        return {"tool_calls": [{"name": "measure", "arguments": {"image_bytes": size}}]}
    width = json.loads(tool_results[-1].text or "{}")["width_px"]
    caption = {
        "subject": "a gradient of every byte value",
        "width_px": width,
        "details": [f"band {n} of {size // 256} bytes each" for n in range(40)],
    }
    return json.dumps(caption, indent=2)


def setup() -> RuntimeSetup:
    """The ``vision`` slot on the fake server at ``LW_TEST_MODEL_URL``; the ``measure`` tool."""
    base = os.environ["LW_TEST_MODEL_URL"]
    provider = OpenAICompatibleProvider(f"{base}/v1", api_key_env=None, max_retries=0, timeout=30)
    return RuntimeSetup(
        model_slots={"vision": ModelSlot(provider=provider, model="vision-model")},
        tools=[measure],
    )


__all__ = ["PHOTO", "Caption", "describe", "measure", "script", "setup"]
