"""Checking a run's input against its workflow, before the run exists.

Two checks, both exact (a problem found here is a run that could not complete):

1. **The ``input:`` schema**, when the workflow has one: the input must validate
   against it (``_jsonschema``, the keywords docs/lwir.md lists).
2. **The references every completed run evaluates.** The steps on the workflow's
   *certain path*, from the first step on, are the ones every run that completes has
   rendered: the path follows each step's ``next`` (given, or the following step) and
   stops after a decision (which route is taken is not known), before a step with
   ``onError`` (its failure, a template that does not render included, goes elsewhere),
   and at an ``output``. A map's ``items`` is on
   the path; its body is not (the list may be empty). Each ``${input...}`` in those
   steps' templates is evaluated against the input as given: the input never changes
   during a run, so one that fails now would fail there. References elsewhere (after a
   decision, in a map body, in a step reached only through ``onError``) depend on the
   run and are left to run time.

``input_problems`` returns every problem; ``check_run_input`` raises ``RunInputError``.
"""

from __future__ import annotations

from collections.abc import Mapping

from little_workflow._object_cache import ObjectCache
from little_workflow.errors import Problem, RunInputError, TemplateSyntaxError
from little_workflow.lwir._jsonschema import field_path, schema_problems, validate
from little_workflow.lwir._models import DecisionStep, StepBase, Workflow
from little_workflow.lwir._template import (
    Index,
    Key,
    Reference,
    iter_template_strings,
    parse_template,
)
from little_workflow.lwir._validate import effective_next

__all__ = ["certain_path", "check_run_input", "input_problems", "input_reads"]


def certain_path(workflow: Workflow) -> list[tuple[str, StepBase]]:
    """The top-level steps every completed run goes through, in order, with their places
    (``steps[0]``); see the module docstring."""
    steps = workflow.steps
    index_of = {step.id: index for index, step in enumerate(steps)}
    path: list[tuple[str, StepBase]] = []
    index: int | None = 0
    seen: set[int] = set()
    while index is not None and index not in seen:
        seen.add(index)
        step = steps[index]
        if any(name == "onError" for name, _ in step.targets()):
            break  # even its own templates: one that does not render is routed too
        path.append((f"steps[{index}]", step))
        if step.is_output or step.chooses_route:
            break
        following = effective_next(steps, index)
        index = None if following is None else index_of.get(following)
    return path


def input_reads(workflow: Workflow) -> tuple[tuple[str, Reference], ...]:
    """The ``${input...}`` references of the certain path, each with where it is read
    (``step 'fetch' at steps[0].with.query``); found once per ``Workflow`` object."""
    return _INPUT_READS(workflow)


def _input_reads(workflow: Workflow) -> tuple[tuple[str, Reference], ...]:
    found: list[tuple[str, Reference]] = []
    for place, step in certain_path(workflow):
        for name, value in step.template_values():
            if name == "with" and isinstance(step, DecisionStep) and step.agent is not None:
                continue  # a decision asked of a model renders no `with`
            if not _mentions_input(value):
                # Most values read no input: skipping them before places are spelled out
                # makes this check cost a fraction of a step's run, not most of one.
                continue
            for where, text in iter_template_strings(value, f"{place}.{name}"):
                try:
                    template = parse_template(text)
                except TemplateSyntaxError:
                    continue  # reported by validation; a trusted copy skipped it
                at = f"step {step.id!r} at {where}"
                found.extend((at, ref) for ref in template.references if ref.root == "input")
    return tuple(found)


_INPUT_READS: ObjectCache[Workflow, tuple[tuple[str, Reference], ...]] = ObjectCache(_input_reads)


def _mentions_input(value: object) -> bool:
    """Whether some string inside ``value`` could hold an ``${input...}`` reference."""
    if isinstance(value, str):
        return "$" in value and "input" in value
    if isinstance(value, Mapping):
        return any(_mentions_input(child) for child in value.values())
    if isinstance(value, list | tuple):
        return any(_mentions_input(child) for child in value)
    return False


def input_problems(workflow: Workflow, input: object) -> list[Problem]:
    """Every way ``input`` does not fit ``workflow``, each at its field (``input.query``)."""
    problems: list[Problem] = []
    if workflow.input is not None:
        broken = schema_problems(workflow.input)
        if broken:
            # Only a trusted (already validated) copy gets here with a broken schema.
            return broken
        problems.extend(
            Problem(p.path, f"{p.message} (the workflow's input schema)")
            for p in validate(input, dict(workflow.input))
        )
    named = {problem.path for problem in problems}
    for where, reference in input_reads(workflow):
        problem = _read_problem(input, reference, where)
        if problem is not None and problem.path not in named:
            named.add(problem.path)
            problems.append(problem)
    return problems


def check_run_input(workflow: Workflow, input: object, *, source: str | None = None) -> None:
    """Raise ``RunInputError`` if ``input`` does not fit ``workflow`` (``source``: its file)."""
    problems = input_problems(workflow, input)
    if problems:
        shown = repr(workflow.name) + (f" ({source})" if source else "")
        raise RunInputError(problems, workflow=shown)


def _read_problem(input: object, reference: Reference, where: str) -> Problem | None:
    current: object = input
    place = "input"
    for accessor in reference.accessors:
        if isinstance(accessor, Key):
            if current is None and place == "input":
                missing = field_path(place, accessor.name)
                return Problem(
                    missing, f"missing (no input was given), and {where} reads it ({reference})"
                )
            if not isinstance(current, Mapping):
                return Problem(place, f"{_what(current)}, but {where} reads {reference} from it")
            place = field_path(place, accessor.name)
            if accessor.name not in current:
                return Problem(place, f"missing, and {where} reads it ({reference})")
            current = current[accessor.name]
        elif isinstance(accessor, Index):
            if not isinstance(current, list):
                return Problem(place, f"{_what(current)}, but {where} reads {reference} from it")
            if not -len(current) <= accessor.index < len(current):
                return Problem(
                    place,
                    f"has {len(current)} item(s), and {where} reads {reference} from it",
                )
            place = field_path(place, accessor.index)
            current = current[accessor.index]
    return None


def _what(value: object) -> str:
    if value is None:
        return "is null (no input given?)"
    if isinstance(value, Mapping):
        return "is an object"
    if isinstance(value, list):
        return "is a list"
    if isinstance(value, bool):
        return "is a boolean"
    if isinstance(value, str):
        return "is a string"
    return "is a number"
