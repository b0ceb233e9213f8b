"""The ``WORKFLOW`` argument: an LWIR file, or ``module:function`` naming a ``@workflow``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
from click.shell_completion import CompletionItem

__all__ = ["workflow_argument"]

_REFERENCE_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


class WorkflowReference(click.ParamType):  # type: ignore[type-arg]
    """A workflow file that exists, or ``module:function`` (imported by the runtime)."""

    name = "workflow"

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        """Completed by the shell as a file name (a module:function is not listed)."""
        return [CompletionItem(incomplete, type="file")]

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, Path):
            return value
        path = Path(str(value))
        if path.is_file():
            return path
        if _REFERENCE_RE.fullmatch(str(value)):
            return str(value)
        if path.exists():
            self.fail(f"{str(value)!r} is a directory, not a workflow file", param, ctx)
        return self.fail(
            f"{str(value)!r}: no such workflow file, and not a module:function naming a @workflow",
            param,
            ctx,
        )


def workflow_argument(function: Any) -> Any:
    """``WORKFLOW``: a ``.json``/``.yaml`` file, or ``module:function`` (code-first)."""
    return click.argument("workflow", type=WorkflowReference())(function)
