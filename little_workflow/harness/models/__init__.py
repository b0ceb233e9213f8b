"""Model providers and the provider-neutral conversation model.

Three providers implement ``ModelProvider``: ``OpenAICompatibleProvider`` (OpenAI, vLLM,
Ollama, llama.cpp's server), ``AnthropicProvider`` (the Messages API) and
``ScriptedProvider`` (deterministic replies, for tests and the demo). A ``Script`` also
drives ``little_workflow.testing.fake_models.FakeModelServer``, which speaks both HTTP
wire formats, so the same script can stand behind any of the three.
"""

from __future__ import annotations

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
    scripted,
    to_model_response,
)

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
    "parse_arguments",
    "scripted",
    "to_model_response",
]
