"""Every StorageAdapter backend through the one conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from little_workflow.storage import ManagedStorage, open_storage
from little_workflow.testing import StorageAdapterConformance

BACKENDS = ["memory", "file", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class TestStorageConformance(StorageAdapterConformance):
    @pytest.fixture(params=BACKENDS)
    def storage_url(self, request: pytest.FixtureRequest) -> str | None:
        if request.param == "memory":
            return None
        url: str = request.getfixturevalue(f"{request.param}_url")
        return url

    @pytest.fixture
    async def storage(self, storage_url: str | None) -> AsyncIterator[ManagedStorage]:
        store = await open_storage(storage_url or "memory:")
        yield store
        await store.close()
