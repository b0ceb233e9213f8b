"""The helpers for a scripted answer read a request the same way after a crash."""

from __future__ import annotations

from little_workflow.harness.models import (
    Message,
    ModelRequest,
    ScriptReply,
    ToolCall,
    first_user_message,
    scripted,
    system_prompt,
    tool_results,
    turns,
)


def _request(*messages: Message) -> ModelRequest:
    return ModelRequest(model="scripted", messages=list(messages))


CALL = ToolCall(id="call_1", name="lookup", arguments={"q": "x"})
CONVERSATION = _request(
    Message(role="system", content="You review."),
    Message(role="user", content="Review a.md"),
    Message(role="assistant", content=None, tool_calls=[CALL]),
    Message(role="tool", content="found", tool_call_id="call_1"),
)


def test_the_helpers_read_the_conversation() -> None:
    assert system_prompt(CONVERSATION) == "You review."
    assert first_user_message(CONVERSATION) == "Review a.md"
    assert turns(CONVERSATION) == 1
    assert [m.content for m in tool_results(CONVERSATION)] == ["found"]
    empty = _request()
    assert (system_prompt(empty), first_user_message(empty), turns(empty)) == ("", "", 0)
    assert tool_results(empty) == []


async def test_a_script_written_with_them() -> None:
    def answer(request: ModelRequest) -> ScriptReply:
        if turns(request) == 0:
            return {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}
        return f"{first_user_message(request)}: {tool_results(request)[0].content}"

    provider = scripted(answer)
    response = await provider.complete(CONVERSATION)
    assert response.message.content == "Review a.md: found"
