"""Model providers and the provider-neutral conversation model.

Three providers implement ``ModelProvider``: ``OpenAICompatibleProvider`` (OpenAI, vLLM,
Ollama, llama.cpp's server), ``AnthropicProvider`` (the Messages API) and
``ScriptedProvider`` (deterministic replies, for tests and the demo; ``first_user_message``,
``turns``, ``tool_results`` and ``system_prompt`` read a request for a scripted answer).
A ``Script`` also drives ``little_workflow.testing.fake_models.FakeModelServer``, which
speaks both HTTP wire formats, so the same script can stand behind any of the three.
``OpenAISDKProvider`` and ``AnthropicSDKProvider`` speak the same two wire formats through
a client of the official SDK the caller configured (the ``openai`` and ``anthropic``
extras; the SDK is imported when one is built).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): the messages do not need the HTTP clients.
if TYPE_CHECKING:
    from little_workflow.harness.models._anthropic import AnthropicProvider
    from little_workflow.harness.models._anthropic_sdk import AnthropicSDKProvider
    from little_workflow.harness.models._messages import (
        ContentPart,
        FilePart,
        ImagePart,
        Message,
        ModelDelta,
        ModelOptions,
        ModelRequest,
        ModelResponse,
        ReasoningPart,
        ResponseFormat,
        Role,
        TextPart,
        ToolCall,
        ToolChoice,
        ToolSpec,
        Usage,
    )
    from little_workflow.harness.models._openai import (
        RAW_ARGUMENTS_KEY,
        OpenAICompatibleProvider,
        dump_arguments,
        parse_arguments,
    )
    from little_workflow.harness.models._openai_sdk import OpenAISDKProvider
    from little_workflow.harness.models._provider import (
        DeltaSink,
        ModelProvider,
        StreamingModelProvider,
        call_model,
    )
    from little_workflow.harness.models._scripted import (
        Script,
        ScriptedProvider,
        ScriptFunction,
        ScriptReply,
        estimated_usage,
        first_user_message,
        scripted,
        system_prompt,
        to_model_response,
        tool_results,
        turns,
    )

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.harness.models._anthropic": ("AnthropicProvider",),
    "little_workflow.harness.models._anthropic_sdk": ("AnthropicSDKProvider",),
    "little_workflow.harness.models._messages": (
        "ContentPart",
        "FilePart",
        "ImagePart",
        "Message",
        "ModelDelta",
        "ModelOptions",
        "ModelRequest",
        "ModelResponse",
        "ReasoningPart",
        "ResponseFormat",
        "Role",
        "TextPart",
        "ToolCall",
        "ToolChoice",
        "ToolSpec",
        "Usage",
    ),
    "little_workflow.harness.models._openai": (
        "RAW_ARGUMENTS_KEY",
        "OpenAICompatibleProvider",
        "dump_arguments",
        "parse_arguments",
    ),
    "little_workflow.harness.models._openai_sdk": ("OpenAISDKProvider",),
    "little_workflow.harness.models._provider": (
        "DeltaSink",
        "ModelProvider",
        "StreamingModelProvider",
        "call_model",
    ),
    "little_workflow.harness.models._scripted": (
        "Script",
        "ScriptedProvider",
        "ScriptFunction",
        "ScriptReply",
        "estimated_usage",
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
    "AnthropicSDKProvider",
    "ContentPart",
    "DeltaSink",
    "FilePart",
    "ImagePart",
    "Message",
    "ModelDelta",
    "ModelOptions",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "OpenAICompatibleProvider",
    "OpenAISDKProvider",
    "ReasoningPart",
    "ResponseFormat",
    "Role",
    "Script",
    "ScriptFunction",
    "ScriptReply",
    "ScriptedProvider",
    "StreamingModelProvider",
    "TextPart",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Usage",
    "call_model",
    "dump_arguments",
    "estimated_usage",
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
