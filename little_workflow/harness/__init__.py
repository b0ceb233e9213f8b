"""Harness: the agent harness, its context, model slots, tools and sessions (Layer C).

Work in progress: ``models`` (the conversation model and the providers) and the typed
Python tools (``tool``, ``Tool``, ``ToolRegistry``) land first.
"""

from __future__ import annotations

from little_workflow.harness._tool_registry import ToolRegistry
from little_workflow.harness._tools import Tool, tool

__all__ = ["Tool", "ToolRegistry", "tool"]
