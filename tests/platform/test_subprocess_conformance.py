"""Every ``SubprocessAdapter`` passes the same suite: in process, and as OS processes
over each transport, with and without storage."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from little_workflow.platform import (
    InProcessAdapter,
    LocalSubprocessAdapter,
    SubprocessAdapter,
    create_local_subprocess_adapter,
)
from little_workflow.storage import create_file_storage
from little_workflow.testing.subprocess_conformance import SubprocessAdapterConformance


class TestInProcessAdapter(SubprocessAdapterConformance):
    @pytest.fixture
    def adapter(self) -> InProcessAdapter:
        return InProcessAdapter()

    @pytest.fixture
    def reopen(self) -> Callable[[], SubprocessAdapter]:
        return InProcessAdapter

    @pytest.fixture
    def durable(self) -> bool:
        return False


@pytest.fixture(params=["unix", "tcp", "ws"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestLocalAdapterWithStorage(SubprocessAdapterConformance):
    @pytest.fixture
    def adapter(self, tmp_path: Path, transport: str) -> LocalSubprocessAdapter:
        storage = create_file_storage(root=tmp_path / "subprocess")
        return create_local_subprocess_adapter(storage=storage, transport=transport)  # type: ignore[arg-type]

    @pytest.fixture
    def reopen(self, tmp_path: Path, transport: str) -> Callable[[], SubprocessAdapter]:
        def build() -> SubprocessAdapter:
            storage = create_file_storage(root=tmp_path / "subprocess")
            return create_local_subprocess_adapter(storage=storage, transport=transport)  # type: ignore[arg-type]

        return build

    @pytest.fixture
    def durable(self) -> bool:
        return True


class TestLocalAdapterWithoutStorage(SubprocessAdapterConformance):
    @pytest.fixture
    def adapter(self) -> LocalSubprocessAdapter:
        return create_local_subprocess_adapter()

    @pytest.fixture
    def reopen(self) -> Callable[[], SubprocessAdapter]:
        return create_local_subprocess_adapter

    @pytest.fixture
    def durable(self) -> bool:
        return False
