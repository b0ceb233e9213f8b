"""Views: the read model of runs that the CLI (``runs``, ``show``, ``events``) and the web UI share.

It reads the event log and outer-loop manifests and never writes. A run's page is built
from ``fold`` (``little_workflow.runtime``), like every other reading of a log, so the
command line and the browser cannot disagree about a run. Whether an unfinished run is
driven now is a fact about now, not in the log: a reader given ``Runtime.interrupted_runs``
reports the ones nobody drives as ``interrupted``, once, for both.
"""

from __future__ import annotations

from little_workflow.views._read import (
    INTERRUPTED,
    TERMINAL,
    WAITING,
    FindInterrupted,
    RunReader,
    RunSummary,
    RunView,
    StepRow,
    TreeNode,
    code_of,
    event_row,
    reported_status,
    segments,
    step_rows,
    step_tree,
)

__all__ = [
    "INTERRUPTED",
    "TERMINAL",
    "WAITING",
    "FindInterrupted",
    "RunReader",
    "RunSummary",
    "RunView",
    "StepRow",
    "TreeNode",
    "code_of",
    "event_row",
    "reported_status",
    "segments",
    "step_rows",
    "step_tree",
]
