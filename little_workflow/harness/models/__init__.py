"""Model providers and the provider-neutral conversation model."""

from __future__ import annotations

from little_workflow.harness.models._messages import (
    Message,
    ModelRequest,
    ModelResponse,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)
from little_workflow.harness.models._provider import ModelProvider

__all__ = [
    "Message",
    "ModelProvider",
    "ModelRequest",
    "ModelResponse",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]
