"""Model slots: names (``reviewer``, ``planner``) mapped to a provider and a model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from little_workflow.errors import ConfigError
from little_workflow.harness.models import ModelOptions, ModelProvider

__all__ = ["ModelSlot", "resolve_slot"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSlot:
    """A provider, the model name it serves, and default sampling settings.

    ``model`` is the slot's id in capability manifests: a run started with one model in
    a slot refuses to resume with another (``CapabilityDriftError``). ``options`` (top_p,
    stop, seed, tool choice, parallel tool calls, provider-specific ``extra``) are the
    defaults of every call through the slot; set ones are recorded in the manifest too,
    so changing them is drift, not a silent replay of answers they did not produce.
    """

    provider: ModelProvider
    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    options: ModelOptions = field(default_factory=ModelOptions)

    @property
    def slot_id(self) -> str:
        """What manifests record for this slot: the model name."""
        return self.model


def resolve_slot(slots: Mapping[str, ModelSlot], name: str) -> ModelSlot:
    """The slot called ``name``; ``ConfigError`` naming the known slots if there is none."""
    try:
        return slots[name]
    except KeyError:
        known = ", ".join(sorted(slots)) or "none"
        raise ConfigError(
            f"no model slot {name!r} is configured (configured: {known}); configure it with "
            f"Runtime(model_slots={{{name!r}: ModelSlot(provider=..., model=...)}}), or on the "
            "command line with --setup module:attr naming a RuntimeSetup whose model_slots has it",
            code="unknown_model_slot",
        ) from None
