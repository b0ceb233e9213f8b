"""Tools an agent can be offered to write and read the run's artifacts.

Plain typed callables (the harness makes them tools): register them with
``Runtime(tools=[*ARTIFACT_TOOLS, ...])`` and offer them by name in an agent step's
``tools``. Each takes ``ctx``, whose ``artifacts`` is the run's store bound to the call
(a ``StepContext`` in a ``tool`` step, a ``ToolContext`` in an agent's session), so an
artifact written by a tool call re-issued after a crash is the same artifact.
"""

from __future__ import annotations

from typing import Protocol

from little_workflow.artifacts._scoped import StepArtifacts
from little_workflow.codec import JsonValue

__all__ = ["ARTIFACT_TOOLS", "list_artifacts", "read_artifact", "write_artifact"]


class _HasArtifacts(Protocol):
    @property
    def artifacts(self) -> StepArtifacts: ...


def write_artifact(
    name: str, content: str, ctx: _HasArtifacts, media_type: str | None = None
) -> dict[str, JsonValue]:
    """Save text as a named file (an artifact) of this run, for people and later steps.

    Args:
        name: A file name such as "report.md" (no directories).
        content: The file's text.
        media_type: Its media type, e.g. "text/markdown"; guessed from the name if omitted.

    Returns the artifact's manifest (its artifactId, size and SHA-256).
    """
    return ctx.artifacts.put(name, content, media_type=media_type).to_json()


def read_artifact(artifact: str, ctx: _HasArtifacts) -> str:
    """Read the text of an artifact.

    Args:
        artifact: An artifact id (art_...) or the name of an artifact of this run.
    """
    return ctx.artifacts.read_text(artifact)


def list_artifacts(ctx: _HasArtifacts) -> list[dict[str, JsonValue]]:
    """List this run's artifacts (id, name, media type, size), oldest first."""
    return [manifest.to_json() for manifest in ctx.artifacts.list()]


#: The artifact tools, to register with a runtime.
ARTIFACT_TOOLS = (write_artifact, read_artifact, list_artifacts)
