"""A run's step tree a page at a time: what the UI's run page loads as it is scrolled.

A map of 50,000 branches is a tree of 100,000 nodes; sent whole, with every step row
a second time beside it, its page was 30 MB of JSON and 3.3 s (docs/performance.md,
"One run of 100,000 events"). ``TreePages`` holds the tree once (the read model caches
it with the rows, per run and last seq) and hands out pages of it, each after the
path of the previous page's last node: a keyset cursor, as the runs list's ``before``.
A node is never taken out of a tree (a log only grows), so a cursor stays good while
the run goes on; a path the tree does not hold is a typed error.

Rejected: an offset cursor (``?offset=500``). While a map runs, a new branch is placed
under its map, before nodes already sent, so the next page by position would repeat a
node; a path names the same node whatever came before it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from little_workflow.errors import InvalidInputError

if TYPE_CHECKING:
    from little_workflow.views._read import StepRow, TreeNode

__all__ = ["MAX_PATH_CURSOR", "STEPS_PAGE", "TreePages"]

#: Nodes in a page of the tree unless asked otherwise (the run page's first page too).
STEPS_PAGE: Final = 500
#: The longest ``after`` cursor looked up: no step path of a real run is near it.
MAX_PATH_CURSOR: Final = 10_000

_WORST = {"failed": 2, "running": 1, "completed": 0}


class TreePages:
    """A run's step tree (``step_tree`` of its rows), with what its pages need beside each
    node; built on first use (``show`` draws the nodes, and never asks for a page)."""

    __slots__ = ("_nodes", "_positions", "_statuses", "counts", "rows")

    def __init__(self, rows: Sequence[StepRow]) -> None:
        self.rows = rows
        #: Step rows by status (``completed``, ``running``, ``failed``).
        self.counts: dict[str, int] = dict(Counter(row.status for row in rows))
        self._nodes: Sequence[TreeNode] | None = None
        self._statuses: list[str] | None = None
        self._positions: dict[str, int] | None = None

    @property
    def nodes(self) -> Sequence[TreeNode]:
        """The tree, depth first (``step_tree``)."""
        if self._nodes is None:
            from little_workflow.views._read import step_tree

            self._nodes = step_tree(list(self.rows))
        return self._nodes

    @property
    def statuses(self) -> Sequence[str]:
        """Per node: its step's status, or for a node without a step (a branch, a
        decision's visits) the worst one below it: ``failed``, else ``running``, else
        ``completed``."""
        if self._statuses is None:
            self._statuses = _statuses(self.nodes)
        return self._statuses

    @property
    def positions(self) -> dict[str, int]:
        """Node path -> its index in ``nodes``."""
        if self._positions is None:
            self._positions = {node.path: index for index, node in enumerate(self.nodes)}
        return self._positions

    def page(self, after: str | None, limit: int) -> tuple[list[dict[str, Any]], str | None]:
        """The ``limit`` nodes after the node at path ``after`` (from the first, if
        ``None``), as JSON, and the cursor of the next page (``None`` after the last).

        Raises ``InvalidInputError`` (``unknown_step_path``) for a path not in the tree.
        """
        start = 0
        if after is not None:
            found = self.positions.get(after) if len(after) <= MAX_PATH_CURSOR else None
            if found is None:
                shown = after if len(after) <= 200 else after[:200] + "…"
                raise InvalidInputError(
                    f"this run has no step path {shown!r} (after=): give the next of a "
                    "page of this run's steps, or leave it out for the first page",
                    code="unknown_step_path",
                )
            start = found + 1
        end = min(start + max(limit, 0), len(self.nodes))
        page = [
            {
                "path": node.path,
                "label": node.label,
                "depth": node.depth,
                "status": self.statuses[index],
                "step": None if node.step is None else node.step.to_json(),
            }
            for index, node in zip(range(start, end), self.nodes[start:end], strict=True)
        ]
        return page, (self.nodes[end - 1].path if end < len(self.nodes) else None)


def _statuses(nodes: Sequence[TreeNode]) -> list[str]:
    """``TreePages.statuses`` of ``nodes`` (depth first)."""
    statuses = ["completed"] * len(nodes)
    # Backwards, keeping the worst status of each depth's open subtrees: one pass.
    below: list[int] = []
    for index in range(len(nodes) - 1, -1, -1):
        node = nodes[index]
        depth = node.depth
        worst = max(below[depth + 1 :], default=0)
        del below[depth + 1 :]
        if node.step is not None:
            statuses[index] = node.step.status
            worst = max(worst, _WORST.get(node.step.status, 1))
        else:
            statuses[index] = ("completed", "running", "failed")[worst]
        below += [0] * (depth + 1 - len(below))
        below[depth] = max(below[depth], worst)
    return statuses
