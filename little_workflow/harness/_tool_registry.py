"""``ToolRegistry``: the tools a session offers, by name, in a fixed order.

The order is the one the tools were given in, so ``specs()`` shows a model the same
list on every turn and after a resume; ``manifest()`` maps each name to its
``schema_hash`` for the capability manifest, where a changed tool is drift.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from little_workflow.errors import ToolArgumentsError, ToolDefinitionError
from little_workflow.harness._redaction import Redaction
from little_workflow.harness._tools import Tool, tool
from little_workflow.harness.models import ToolSpec

__all__ = ["ToolRegistry"]


class ToolRegistry:
    """The tools a session offers, by name, in the order they were given.

    Built once from tools and plain callables (a callable becomes ``tool(callable)``);
    two tools with one name are refused with ``ToolDefinitionError``.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool[..., Any] | Callable[..., Any]] = ()) -> None:
        registered: dict[str, Tool[..., Any]] = {}
        for item in tools:
            made = item if isinstance(item, Tool) else tool(item)
            if made.name in registered:
                raise ToolDefinitionError(
                    f"two tools are named {made.name!r}; rename one with tool(function, name='...')"
                )
            registered[made.name] = made
        self._tools = registered

    def get(self, name: str) -> Tool[..., Any]:
        """The tool called ``name``; else ``ToolArgumentsError`` (code ``unknown_tool``).

        The message lists the available tools, since it goes back to the model that
        asked for the unknown one.
        """
        found = self._tools.get(name)
        if found is not None:
            return found
        available = ", ".join(self._tools) or "none"
        close = difflib.get_close_matches(name, list(self._tools), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ToolArgumentsError(
            f"unknown tool {name!r}; {hint}available: {available}", code="unknown_tool"
        )

    def redactions(self) -> dict[str, Redaction]:
        """``{name: rule}`` of the tools with a ``redact`` rule."""
        return {
            name: made.redaction for name, made in self._tools.items() if made.redaction is not None
        }

    def specs(self, names: Iterable[str] | None = None) -> tuple[ToolSpec, ...]:
        """The ``ToolSpec`` of each tool, for a ``ModelRequest``.

        All of them in registration order, or those in ``names`` in that order (a step
        that offers a subset); an unknown name raises as ``get`` does.
        """
        chosen = self._tools.values() if names is None else [self.get(name) for name in names]
        return tuple(registered.spec for registered in chosen)

    def manifest(self) -> dict[str, str]:
        """``{name: schema_hash}`` in registration order, for capability manifests."""
        return {name: registered.schema_hash for name, registered in self._tools.items()}

    def names(self) -> tuple[str, ...]:
        """The tool names, in registration order."""
        return tuple(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool[..., Any]]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"
