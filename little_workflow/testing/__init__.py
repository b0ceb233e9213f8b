"""Conformance suites for the pluggable interfaces, importable by third-party backends.

Also ``SimulatedKill``: raised by a step, tool or hook in a test, it stands for the
process dying there (nothing records it; the run resumes as after a real kill).

``StorageAdapterConformance``, ``EventLogConformance``, ``BlobStoreConformance`` and
``RunQueueConformance`` are pytest test classes:
subclass them and provide the fixtures their docstrings name. Importing them needs
pytest (this package itself does not: ``subprocess_targets`` runs in spawned children).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a child running a target of
# ``subprocess_targets`` must not import pytest.
if TYPE_CHECKING:
    from little_workflow._failures import SimulatedKill
    from little_workflow.testing.blobstore_conformance import BlobStoreConformance
    from little_workflow.testing.eventlog_conformance import EventLogConformance
    from little_workflow.testing.runqueue_conformance import RunQueueConformance
    from little_workflow.testing.storage_conformance import StorageAdapterConformance

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow._failures": ("SimulatedKill",),
    "little_workflow.testing.blobstore_conformance": ("BlobStoreConformance",),
    "little_workflow.testing.eventlog_conformance": ("EventLogConformance",),
    "little_workflow.testing.runqueue_conformance": ("RunQueueConformance",),
    "little_workflow.testing.storage_conformance": ("StorageAdapterConformance",),
}

__all__ = [
    "BlobStoreConformance",
    "EventLogConformance",
    "RunQueueConformance",
    "SimulatedKill",
    "StorageAdapterConformance",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
