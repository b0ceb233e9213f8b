"""Conformance suites for the pluggable interfaces, importable by third-party backends.

``StorageAdapterConformance``, ``EventLogConformance`` and ``BlobStoreConformance`` are
pytest test classes:
subclass them and provide the fixtures their docstrings name. Importing this package
needs pytest.
"""

from __future__ import annotations

from little_workflow.testing.blobstore_conformance import BlobStoreConformance
from little_workflow.testing.eventlog_conformance import EventLogConformance
from little_workflow.testing.storage_conformance import StorageAdapterConformance

__all__ = ["BlobStoreConformance", "EventLogConformance", "StorageAdapterConformance"]
