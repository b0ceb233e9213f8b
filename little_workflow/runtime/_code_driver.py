"""``Driver``: what a ``WorkflowContext`` calls, one pass of a run (``_code_run.CodeRun``).

The context claims paths and builds steps; the driver records, replays and runs them. A
protocol so the context can be read (and typed) without the run machinery behind it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from little_workflow.codec import JsonValue
from little_workflow.lwir import AgentStep, DecisionStep, StepPath, ToolStep, Workflow
from little_workflow.runtime._code_api import StepSpec, WorkflowSpec
from little_workflow.runtime._code_scope import CallScope
from little_workflow.runtime._core import DurableRun, Site

__all__ = ["Driver"]


class Driver(Protocol):
    """What a context drives: one pass of a run (``_code_run.CodeRun``)."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    def site(
        self,
        name: str,
        qualified: str,
        scope: CallScope,
        *,
        map_path: StepPath | None = None,
        key: str = "",
        max_visits: int | None = None,
    ) -> Site:
        """Claim the next call position of ``scope`` and the call's path."""
        ...

    def branches(
        self,
        site: Site,
        name: str,
        body: Callable[[Any, Any], Awaitable[Any]],
        branches: list[tuple[str, Any]],
        concurrency: int,
    ) -> Awaitable[list[Any]]:
        """Run ``body`` in a branch of its own per item; the results, in order. (``body``
        takes the branch's ``WorkflowContext`` first: typed where the context calls this,
        since naming it here would make the two modules import each other.)"""
        ...

    def call(
        self,
        site: Site,
        spec: StepSpec,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Awaitable[Any]:
        """A step call's result."""
        ...

    def map(
        self,
        site: Site,
        spec: StepSpec,
        function: Callable[..., Any],
        branches: list[tuple[Site, Any]],
        concurrency: int,
    ) -> Awaitable[list[Any]]:
        """A map's results."""
        ...

    def sub_run(
        self,
        site: Site,
        name: str,
        child: WorkflowSpec,
        function: Callable[..., Any],
        input: object,
    ) -> Awaitable[JsonValue]:
        """A sub-run's output."""
        ...

    def tool(self, site: Site, step: ToolStep, side_effect: bool) -> Awaitable[JsonValue]:
        """A registered tool's result, called as a step."""
        ...

    def plan(self, site: Site, goal_workflow: Workflow, input: JsonValue) -> Awaitable[JsonValue]:
        """A planned workflow's output (``Runtime.run_goal``'s workflow, as a sub-run)."""
        ...

    def value(self, site: Site, name: str, make: Callable[[], JsonValue]) -> Awaitable[JsonValue]:
        """A recorded value."""
        ...

    def decide(self, site: Site, step: DecisionStep) -> Awaitable[tuple[str, JsonValue]]:
        """An agent decision's route and output."""
        ...

    @property
    def run(self) -> DurableRun:
        """The core of the pass (waits use it: ``_code_waits``)."""
        ...

    def agent(
        self, site: Site, step: AgentStep, workflows: Sequence[tuple[WorkflowSpec, Any]] = ()
    ) -> Awaitable[JsonValue]:
        """An agent session's answer; an orchestrator's when ``workflows`` (spec, body) are
        given."""
        ...
