"""Artifacts: files a run produces, each with a manifest, under ``<data_dir>/artifacts/``.

``ArtifactStore`` stores content by SHA-256 (identical bytes once) and one manifest per
artifact (hash, size, media type, the run and step path that made it), both written
atomically, content first. Inside a run a step gets the store bound to it as
``ctx.artifacts`` (``StepArtifacts``); ``ARTIFACT_TOOLS`` offer it to agents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a run needs the store, not the
# agents' artifact tools.
if TYPE_CHECKING:
    from little_workflow.artifacts._manifest import (
        ArtifactManifest,
        artifact_id_for,
        validate_artifact_name,
    )
    from little_workflow.artifacts._scoped import StepArtifacts
    from little_workflow.artifacts._store import ArtifactStore
    from little_workflow.artifacts._tools import (
        ARTIFACT_TOOLS,
        list_artifacts,
        read_artifact,
        write_artifact,
    )

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.artifacts._manifest": (
        "ArtifactManifest",
        "artifact_id_for",
        "validate_artifact_name",
    ),
    "little_workflow.artifacts._scoped": ("StepArtifacts",),
    "little_workflow.artifacts._store": ("ArtifactStore",),
    "little_workflow.artifacts._tools": (
        "ARTIFACT_TOOLS",
        "list_artifacts",
        "read_artifact",
        "write_artifact",
    ),
}

__all__ = [
    "ARTIFACT_TOOLS",
    "ArtifactManifest",
    "ArtifactStore",
    "StepArtifacts",
    "artifact_id_for",
    "list_artifacts",
    "read_artifact",
    "validate_artifact_name",
    "write_artifact",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
