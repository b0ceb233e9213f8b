"""Views: the read model of runs that the CLI (``runs``, ``show``, ``events``) and the web UI share.

It reads the event log and outer-loop manifests and never writes. A run's page is built
from ``fold`` (``little_workflow.runtime``), like every other reading of a log, so the
command line and the browser cannot disagree about a run. Whether an unfinished run is
driven now is a fact about now, not in the log: a reader given ``Runtime.interrupted_runs``
reports the ones nobody drives as ``interrupted``, once, for both. Model usage (tokens,
cost, what a resume replayed) is folded from the same events (``_usage``, docs/usage.md).
"""

from __future__ import annotations

from little_workflow.views._pages import STEPS_PAGE, TreePages
from little_workflow.views._prices import load_prices, parse_prices
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
from little_workflow.views._usage import (
    CallUsage,
    ModelPrice,
    PassUsage,
    PriceTable,
    UsageFold,
    UsageReport,
    UsageTotals,
    usage_report,
)
from little_workflow.views._usage_read import read_usage

__all__ = [
    "INTERRUPTED",
    "STEPS_PAGE",
    "TERMINAL",
    "WAITING",
    "CallUsage",
    "FindInterrupted",
    "ModelPrice",
    "PassUsage",
    "PriceTable",
    "RunReader",
    "RunSummary",
    "RunView",
    "StepRow",
    "TreeNode",
    "TreePages",
    "UsageFold",
    "UsageReport",
    "UsageTotals",
    "code_of",
    "event_row",
    "load_prices",
    "parse_prices",
    "read_usage",
    "reported_status",
    "segments",
    "step_rows",
    "step_tree",
    "usage_report",
]
