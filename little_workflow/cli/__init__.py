"""The ``little-workflow`` command line (talks to the runtime and the stores only)."""

from __future__ import annotations

from little_workflow.cli._main import main

__all__ = ["main"]
