"""Model providers and the provider-neutral conversation model.

Three providers implement ``ModelProvider``: ``OpenAICompatibleProvider`` (OpenAI, vLLM,
Ollama, llama.cpp's server), ``AnthropicProvider`` (the Messages API) and
``ScriptedProvider`` (deterministic replies, for tests and the demo; ``first_user_message``,
``turns``, ``tool_results`` and ``system_prompt`` read a request for a scripted answer).
A ``Script`` also drives ``little_workflow.testing.fake_models.FakeModelServer``, which
speaks both HTTP wire formats, so the same script can stand behind any of the three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): the messages do not need the HTTP clients.
if TYPE_CHECKING:
    from little_workflow.harness.models._anthropic import AnthropicProvider
    from little_workflow.harness.models._messages import (
        Message,
        ModelRequest,
        ModelResponse,
        Role,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from little_workflow.harness.models._openai import (
        RAW_ARGUMENTS_KEY,
        OpenAICompatibleProvider,
        dump_arguments,
        parse_arguments,
    )
    from little_workflow.harness.models._provider import ModelProvider
    from little_workflow.harness.models._scripted import (
        Script,
        ScriptedProvider,
        ScriptFunction,
        ScriptReply,
        first_user_message,
        scripted,
        system_prompt,
        to_model_response,
        tool_results,
        turns,
    )

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.harness.models._anthropic": ("AnthropicProvider",),
    "little_workflow.harness.models._messages": (
        "Message",
        "ModelRequest",
        "ModelResponse",
        "Role",
        "ToolCall",
        "ToolSpec",
        "Usage",
    ),
    "little_workflow.harness.models._openai": (
        "RAW_ARGUMENTS_KEY",
        "OpenAICompatibleProvider",
        "dump_arguments",
        "parse_arguments",
    ),
    "little_workflow.harness.models._provider": ("ModelProvider",),
    "little_workflow.harness.models._scripted": (
        "Script",
        "ScriptedProvider",
        "ScriptFunction",
        "ScriptReply",
        "first_user_message",
        "scripted",
        "system_prompt",
        "to_model_response",
        "tool_results",
        "turns",
    ),
}

__all__ = [
    "RAW_ARGUMENTS_KEY",
    "AnthropicProvider",
    "Message",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatibleProvider",
    "Role",
    "Script",
    "ScriptFunction",
    "ScriptReply",
    "ScriptedProvider",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "dump_arguments",
    "first_user_message",
    "parse_arguments",
    "scripted",
    "system_prompt",
    "to_model_response",
    "tool_results",
    "turns",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
