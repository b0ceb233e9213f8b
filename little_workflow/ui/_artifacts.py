"""The artifacts panel's reads, through ``little_workflow.artifacts.ArtifactStore``.

The store is synchronous file I/O (manifests are read and hashes checked on every
download), so each call runs in a worker thread rather than on the server's loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from little_workflow.errors import LittleWorkflowError

__all__ = ["Artifacts"]


class Artifacts:
    """The artifacts of one data directory, as the UI shows and serves them."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    async def listing(self, run_id: str) -> dict[str, Any]:
        """``{"items": [manifest JSON, ...], "error": message or null}`` for ``run_id``.

        A corrupt manifest is reported in ``error`` (the store refuses to skip it), so
        the rest of the run's page still shows.
        """
        from little_workflow.artifacts import ArtifactStore

        store = ArtifactStore(self.data_dir)
        try:
            found = await asyncio.to_thread(store.list, run_id)
        except LittleWorkflowError as exc:
            return {"items": [], "error": f"{exc.code}: {exc.message}"}
        return {"items": [manifest.to_json() for manifest in found], "error": None}

    async def download(self, run_id: str, artifact_id: str) -> tuple[str, bytes] | None:
        """The name and checked content of ``artifact_id`` if ``run_id`` made it, else ``None``."""
        from little_workflow.artifacts import ArtifactStore

        store = ArtifactStore(self.data_dir)
        manifests = await asyncio.to_thread(store.list, run_id)
        manifest = next((m for m in manifests if m.artifact_id == artifact_id), None)
        if manifest is None:
            return None
        return manifest.name, await asyncio.to_thread(store.read_bytes, artifact_id)
