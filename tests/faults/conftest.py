"""The fixtures of the fault tests: a small real filesystem that can be filled."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.disk import SmallDisk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A tmpfs of 8 MiB at ``tmp_path/disk``; skips the test if it cannot be mounted."""
    disk = SmallDisk(tmp_path / "disk")
    reason = disk.mount()
    if reason is not None:
        pytest.skip(reason)
    try:
        yield disk
    finally:
        disk.unmount()
