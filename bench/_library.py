"""The library as of a git revision, for a benchmark that times one tree against another."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["export_library"]

REPO = Path(__file__).resolve().parents[1]


def export_library(revision: str, target: Path) -> Path:
    """``little_workflow/`` as of ``revision``, unpacked under ``target`` (made here).

    The children put ``target`` first on ``PYTHONPATH``, ahead of the editable install:
    a run measures one fixed library even while the working tree is being edited.
    """
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", revision, "little_workflow"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target
