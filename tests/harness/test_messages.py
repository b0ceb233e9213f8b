"""The neutral conversation model: content parts, options, usage, and their stored form."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from little_workflow.harness.models import (
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    Usage,
)

USER = Message(role="user", content="hi")


def test_a_request_without_options_dumps_the_keys_logs_always_had() -> None:
    dumped = ModelRequest(model="m", messages=(USER,)).model_dump(mode="json", by_alias=True)
    assert set(dumped) == {"model", "messages", "tools", "temperature", "maxTokens"}


def test_options_round_trip_through_their_stored_form() -> None:
    request = ModelRequest(
        model="m",
        messages=(USER,),
        top_p=0.9,
        stop=("END",),
        seed=7,
        tool_choice="required",
        parallel_tool_calls=False,
        response_format=ResponseFormat(name="verdict", schema={"type": "object"}),
        extra={"service_tier": "flex"},
    )
    dumped = request.model_dump(mode="json", by_alias=True)
    assert dumped["topP"] == 0.9
    assert dumped["responseFormat"] == {
        "name": "verdict",
        "schema": {"type": "object"},
        "strict": True,
    }
    assert ModelRequest.model_validate(dumped) == request


def test_usage_leaves_out_zero_details_and_adds_up() -> None:
    assert Usage(input_tokens=3, output_tokens=1).model_dump(by_alias=True) == {
        "inputTokens": 3,
        "outputTokens": 1,
    }
    total = Usage(input_tokens=3, cached_input_tokens=2) + Usage(
        output_tokens=4, reasoning_tokens=1
    )
    assert total == Usage(
        input_tokens=3, output_tokens=4, cached_input_tokens=2, reasoning_tokens=1
    )


def test_parts_keep_their_order_and_text_reads_either_form() -> None:
    image = ImagePart.of(b"\x89PNG", "image/png")
    message = Message(
        role="assistant",
        content=(
            ReasoningPart(provider="anthropic", text="think", signature="sig"),
            TextPart(text="a"),
            image,
            TextPart(text="b"),
        ),
    )
    assert message.text == "ab"
    assert Message(role="user", content="plain").text == "plain"
    assert Message(role="user", content="plain").parts == (TextPart(text="plain"),)
    stored = message.model_dump(mode="json", by_alias=True)
    assert [part["type"] for part in stored["content"]] == ["reasoning", "text", "image", "text"]
    assert Message.model_validate(stored) == message
    assert image.decoded() == b"\x89PNG"


def test_a_media_part_has_data_or_url_not_both() -> None:
    with pytest.raises(ValidationError, match="either data or url"):
        ImagePart(media_type="image/png")
    with pytest.raises(ValidationError, match="either data or url"):
        FilePart(media_type="application/pdf", data="AA==", url="https://example.test/a.pdf")
    with pytest.raises(ValueError, match="has a url"):
        ImagePart(media_type="image/png", url="https://example.test/a.png").decoded()
