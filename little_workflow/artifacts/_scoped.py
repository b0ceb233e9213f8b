"""``StepArtifacts``: a run's artifact store as one step (or one agent's tool call) sees it.

A step receives it as ``ctx.artifacts``: ``put`` fills in the run id and the step path,
so the artifact's id is that of where it was made and a step that runs again after a
crash puts to the same artifact (see ``ArtifactStore``).
"""

from __future__ import annotations

import builtins
import dataclasses
from dataclasses import dataclass

from little_workflow.artifacts._manifest import ArtifactManifest
from little_workflow.artifacts._store import ArtifactStore
from little_workflow.errors import ArtifactNotFoundError, InvalidValueError
from little_workflow.ids import is_valid_id

__all__ = ["StepArtifacts"]


@dataclass(frozen=True, slots=True)
class StepArtifacts:
    """The artifacts of ``run_id``, seen from ``step_path`` (see the module docstring)."""

    store: ArtifactStore
    run_id: str
    step_path: str

    def at(self, sub_path: str) -> StepArtifacts:
        """The same run's artifacts seen from a unit inside this step (an agent's tool call)."""
        return dataclasses.replace(self, step_path=f"{self.step_path}/{sub_path}")

    def put(
        self, name: str, data: bytes | str, *, media_type: str | None = None
    ) -> ArtifactManifest:
        """Store ``data`` (text is stored as UTF-8) as artifact ``name`` of this step."""
        content = data.encode("utf-8") if isinstance(data, str) else data
        return self.store.put(
            name, content, media_type=media_type, run_id=self.run_id, step_path=self.step_path
        )

    def get(self, artifact_id: str) -> ArtifactManifest:
        """The manifest of ``artifact_id`` (any run's)."""
        return self.store.get(artifact_id)

    def read_bytes(self, artifact_id: str) -> bytes:
        """The checked content of ``artifact_id`` (any run's)."""
        return self.store.read_bytes(artifact_id)

    def list(self) -> builtins.list[ArtifactManifest]:
        """This run's artifacts, oldest first."""
        return self.store.list(self.run_id)

    def find(self, name: str) -> ArtifactManifest | None:
        """This run's latest artifact named ``name``, if any."""
        return self.store.find(self.run_id, name)

    def resolve(self, reference: str) -> ArtifactManifest:
        """An artifact by id, or else by the name of one of this run's artifacts."""
        if is_valid_id(reference):
            try:
                return self.store.get(reference)
            except ArtifactNotFoundError:
                pass
        found = self.find(reference)
        if found is None:
            raise ArtifactNotFoundError(
                f"no artifact {reference!r}: it is neither an artifact id nor the name of an "
                f"artifact of run {self.run_id!r}"
            )
        return found

    def read_text(self, reference: str) -> str:
        """The content of an artifact (by id or name, as ``resolve``) as UTF-8 text."""
        manifest = self.resolve(reference)
        content = self.store.read_bytes(manifest.artifact_id)
        try:
            return content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidValueError(
                f"artifact {manifest.artifact_id!r} ({manifest.name}, {manifest.media_type}, "
                f"{manifest.size} bytes) is not UTF-8 text"
            ) from exc
