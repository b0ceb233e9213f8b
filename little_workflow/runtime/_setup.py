"""``RuntimeSetup``: what a runtime needs that a workflow file cannot say.

Model slots (providers hold connections and read API keys from the environment),
tools (Python callables), registered workflows and step functions live in Python. A
program passes them to ``Runtime(...)``; the command line finds them with
``--setup package.module:attr`` (or ``LITTLE_WORKFLOW_SETUP``), where ``attr`` is a
``RuntimeSetup`` or a function returning one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from little_workflow.errors import ConfigError
from little_workflow.lwir import Workflow
from little_workflow.references import import_reference

if TYPE_CHECKING:
    # Only a type here: the CLI imports this module for every command that runs, and a
    # run without models (such as most resumes) need not import the harness.
    from little_workflow.harness._slots import ModelSlot

__all__ = ["RuntimeSetup", "load_setup"]


@dataclass(frozen=True, kw_only=True)
class RuntimeSetup:
    """The Python side of a runtime's configuration (see the module docstring)."""

    model_slots: Mapping[str, ModelSlot] = field(default_factory=dict)
    tools: Iterable[Any] = ()
    workflows: Iterable[Workflow] = ()
    functions: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def runtime_options(self) -> dict[str, Any]:
        """Keyword arguments for ``Runtime(...)``."""
        return {
            "model_slots": dict(self.model_slots),
            "tools": list(self.tools),
            "workflows": list(self.workflows),
            "functions": dict(self.functions),
        }


def load_setup(reference: str) -> RuntimeSetup:
    """Import ``package.module:attr`` and return the ``RuntimeSetup`` it names or makes."""
    target: Any = import_reference(reference, what="--setup")
    if callable(target) and not isinstance(target, RuntimeSetup):
        target = target()
    if not isinstance(target, RuntimeSetup):
        raise ConfigError(
            f"--setup {reference!r} gave a {type(target).__name__}, not a RuntimeSetup"
        )
    return target
