"""What ``little-workflow validate`` checks: a workflow, against a runtime's resources.

Everything a run checks before it writes its first event, without a store: the
document (loaded and validated), its sub-workflows (files next to it, registered
names), every function, tool and model slot it names (against the runtime's functions,
tools and slots, the ones ``--setup`` gives), and, when one is given, the input
(``lwir._input`` for LWIR, ``_input_types`` and the body's signature for code-first).
The runtime is never opened: nothing is created or written.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from little_workflow.codec import dumps
from little_workflow.lwir import MapStep, Step, Workflow
from little_workflow.lwir._input import check_run_input, input_reads
from little_workflow.runtime._code_api import workflow_spec
from little_workflow.runtime._code_program import code_workflow
from little_workflow.runtime._code_run import bind_input
from little_workflow.runtime._host import RunHost
from little_workflow.runtime._input_types import check_code_input
from little_workflow.runtime._lwir_program import check_callables, load_model
from little_workflow.runtime._workflows import WorkflowCatalog, WorkflowVersion

__all__ = ["StepSummary", "WorkflowReport", "check_workflow_definition"]

_NOT_GIVEN: Any = object()


@dataclass(frozen=True, slots=True)
class StepSummary:
    """One step of an LWIR workflow: its id, kind and place in the document."""

    id: str
    kind: str
    place: str
    #: Map nesting depth (0 at top level), for an indented listing.
    depth: int


@dataclass(frozen=True, slots=True)
class WorkflowReport:
    """What ``validate`` found; every name in it resolved against the runtime."""

    kind: Literal["lwir", "code"]
    name: str
    #: The file, or ``module:qualname`` of a code-first workflow.
    source: str | None
    steps: tuple[StepSummary, ...] = ()
    functions: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    model_slots: tuple[str, ...] = ()
    #: Sub-workflows, as the steps name them (files or registered names).
    workflows: tuple[str, ...] = ()
    #: Whether the workflow has an ``input:`` schema (LWIR).
    input_schema: bool = False
    #: The input fields every completed run reads (``input.query``), LWIR.
    input_reads: tuple[str, ...] = ()
    #: Code-first: the body's parameters after ``ctx``.
    parameters: tuple[str, ...] = ()
    #: Whether an input was given and checked (it fits: otherwise the check raised).
    input_checked: bool = False
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        """The report as ``validate --json`` prints it."""
        return {
            "valid": True,
            "kind": self.kind,
            "name": self.name,
            "source": self.source,
            "steps": [
                {"id": s.id, "kind": s.kind, "place": s.place, "depth": s.depth} for s in self.steps
            ],
            "functions": list(self.functions),
            "tools": list(self.tools),
            "modelSlots": list(self.model_slots),
            "workflows": list(self.workflows),
            "inputSchema": self.input_schema,
            "inputReads": list(self.input_reads),
            "parameters": list(self.parameters),
            "inputChecked": self.input_checked,
        }


def check_workflow_definition(
    host: RunHost,
    workflow: Workflow | str | os.PathLike[str] | Callable[..., Any],
    input: object = _NOT_GIVEN,
) -> WorkflowReport:
    """Check ``workflow`` (and ``input``, when given) as a run would before writing.

    Raises what the run would: ``LwirError`` for the document, ``ConfigError`` (or
    ``FunctionNotAllowedError``) for a function, tool, slot or sub-workflow the runtime
    lacks, ``InvalidValueError``/``RunInputError`` for the input.
    """
    given = input is not _NOT_GIVEN
    if given:
        dumps(input, where="run input")
    function = code_workflow(workflow)
    if function is not None or callable(workflow):
        return _check_code(cast("Callable[..., Any]", function or workflow), input, given=given)
    model, source = load_model(workflow)
    shown = None if source is None else str(workflow)
    if given:
        check_run_input(model, input, source=shown)
    # The catalog resolves sub-workflows from files and registered names alone; its
    # store is used only to pin, which validation never does.
    catalog = WorkflowCatalog(
        cast(Any, None), {item.name: item for item in host.registered_workflows()}
    )
    version = catalog.resolve(model, source=source)
    check_callables(host, version)
    steps = tuple(_summaries(model.steps, "steps", 0))
    everything = list(_all_steps(version))
    return WorkflowReport(
        kind="lwir",
        name=model.name,
        source=shown,
        steps=steps,
        functions=_names(getattr(step, "fn", None) for step in everything),
        tools=_names(name for step in everything for name in _tools(step)),
        model_slots=_names(slot for step in everything for slot in _slots(step)),
        workflows=tuple(sorted(version.children)),
        input_schema=model.input is not None,
        input_reads=_names(_field(reference.accessors) for _, reference in input_reads(model)),
        input_checked=given,
    )


def _check_code(function: Callable[..., Any], input: object, *, given: bool) -> WorkflowReport:
    spec = workflow_spec(function)
    if spec is None:
        from little_workflow.errors import ConfigError

        raise ConfigError(f"{function!r} is not a @workflow function")
    if given:
        check_code_input(function, input, where=repr(spec.qualified))
        bind_input(function, input, where=f"workflow {spec.qualified!r}")
    import inspect

    parameters = tuple(inspect.signature(function).parameters)[1:]
    return WorkflowReport(
        kind="code",
        name=spec.name,
        source=spec.qualified,
        parameters=parameters,
        input_checked=given,
        notes=("a code-first workflow's steps, tools and slots are known only as it runs",),
    )


def _summaries(steps: Iterable[Step], base: str, depth: int) -> Iterator[StepSummary]:
    for index, step in enumerate(steps):
        place = f"{base}[{index}]"
        yield StepSummary(id=step.id, kind=step.kind, place=place, depth=depth)
        yield from _summaries(step.body_steps(), f"{place}.body", depth + 1)


def _all_steps(version: WorkflowVersion) -> Iterator[Step]:
    pending: list[Step] = list(version.workflow.steps)
    while pending:
        step = pending.pop()
        yield step
        if isinstance(step, MapStep):
            pending.extend(step.body)
    for child in version.children.values():
        yield from _all_steps(child)


def _tools(step: Step) -> Iterable[str]:
    found: list[str] = []
    for holder in (step, getattr(step, "agent", None)):
        tools = getattr(holder, "tools", None)
        if isinstance(tools, tuple):
            found.extend(tools)
    tool = getattr(step, "tool", None)
    if isinstance(tool, str):
        found.append(tool)
    return found


def _slots(step: Step) -> Iterable[str]:
    for holder in (step, getattr(step, "agent", None), getattr(step, "fixer", None)):
        slot = getattr(holder, "slot", None)
        if isinstance(slot, str):
            yield slot


def _field(accessors: Iterable[object]) -> str:
    return "input" + "".join(str(accessor) for accessor in accessors)


def _names(values: Iterable[str | None]) -> tuple[str, ...]:
    return tuple(sorted({value for value in values if value}))
