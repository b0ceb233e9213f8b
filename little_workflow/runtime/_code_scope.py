"""Where a code-first call is made: the top level of the body, or one of its branches."""

from __future__ import annotations

from dataclasses import dataclass, field

from little_workflow.lwir import StepPath

__all__ = ["CallScope"]


@dataclass(slots=True)
class CallScope:
    """Where a context's calls go: the top level, or one branch of ``ctx.branches``.

    Visits (``name.visit[N]``) and call positions are counted per scope, so the calls of
    branches running at once never take each other's numbers.
    """

    #: The branch's path (``review[doc_1]``); ``None`` at the top level.
    prefix: StepPath | None = None
    visits: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    @property
    def text(self) -> str:
        """The branch's path as text; ``""`` at the top level."""
        return "" if self.prefix is None else str(self.prefix)
