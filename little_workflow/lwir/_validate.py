"""Validation of a workflow beyond its shape: ids, the step graph, loops and templates.

Every problem is collected (not only the first) and points at its place with the
document's own field names: ``steps[3].next: unknown step "judg" (did you mean
"judge"?)``. The rules, per steps list (a *scope*: the top level, or a map's body):

* step ids are unique in their scope and do not reuse an id of an enclosing scope;
* ``next`` and ``routes`` lead to steps of the same scope;
* every step is reachable from the scope's first step;
* at top level, no step falls off the end of the list (the run would end without an
  output), and at least one ``output`` step exists;
* every step on a loop (a cycle of the step graph) has ``maxVisits > 1``, and every
  loop has a way out (some route leaving it);
* templates parse; ``${steps.X...}`` names a step of this scope or an enclosing one
  (``.route`` only for a decision); ``${item}`` only inside a map body; a map's
  ``items`` string is a single reference;
* the ``input`` schema is one the input check can apply (``_jsonschema.schema_problems``).

Rejected: requiring that a referenced step always runs before the referring one
(dominance). In a decision loop the judge legitimately reads what ``revise`` wrote on
the previous lap, and the language has no fallback operator yet to express that, so a
reference to a step that has not run is a ``TemplateError`` at run time instead.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from little_workflow.errors import LwirValidationError, Problem, TemplateSyntaxError
from little_workflow.lwir._jsonschema import schema_problems
from little_workflow.lwir._template import Key, Reference, iter_template_strings, parse_template

if TYPE_CHECKING:
    from little_workflow.lwir._models import StepBase, Workflow

__all__ = ["MAX_MAP_NESTING", "check_workflow", "collect_problems", "effective_next"]

#: Maps may nest this deep (a body inside a body ...).
MAX_MAP_NESTING = 16
_STEP_INDEX_RE = re.compile(r"(?:^steps|\.body)\[(\d+)\]")


def effective_next(steps: Sequence[StepBase], index: int) -> str | None:
    """The id of the step that follows ``steps[index]`` when it finishes without a route.

    Its ``next`` if given; otherwise, for kinds that fall through, the following step
    in the list, or ``None`` at the end of the list (the end of the scope). ``None``
    for decisions (they follow a route) and outputs (they end the scope).
    """
    step = steps[index]
    explicit = [target for name, target in step.targets() if name == "next"]
    if explicit:
        return explicit[0]
    if step.falls_through and index + 1 < len(steps):
        return steps[index + 1].id
    return None


def check_workflow(workflow: Workflow) -> None:
    """Raise ``LwirValidationError`` listing every problem, if there are any."""
    problems = collect_problems(workflow)
    if problems:
        raise LwirValidationError(problems)


def collect_problems(workflow: Workflow) -> list[Problem]:
    """Every problem with the workflow's graph and templates, ordered by step."""
    checker = _Checker(workflow)
    checker.scope(workflow.steps, "steps", enclosing={}, depth=0)
    if workflow.input is not None:
        checker.problems.extend(schema_problems(dict(workflow.input)))
    if not any(step.is_output for step in workflow.steps):
        checker.problems.append(
            Problem(
                "steps",
                "no output step at the top level; add one ({kind: output, value: ...}) "
                "so the run has a result",
            )
        )
    # Stable sort: a step's problems stay in rule order; whole-document ones go last.
    return sorted(checker.problems, key=_document_order)


def _document_order(problem: Problem) -> tuple[int, ...]:
    indexes = tuple(int(i) for i in _STEP_INDEX_RE.findall(problem.path))
    return indexes if indexes else (sys.maxsize,)


@dataclass(slots=True)
class _Checker:
    workflow: Workflow
    problems: list[Problem] = field(default_factory=list)
    # Step id -> id of the map whose body holds it (None at top level), over the whole
    # document: says "it is inside map X" instead of "unknown step" when out of scope.
    owners: dict[str, str | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        pending: list[tuple[Sequence[StepBase], str | None]] = [(self.workflow.steps, None)]
        while pending:
            steps, owner = pending.pop()
            for step in steps:
                self.owners.setdefault(step.id, owner)
                if step.body_steps():
                    pending.append((step.body_steps(), step.id))

    def add(self, path: str, message: str) -> None:
        self.problems.append(Problem(path, message))

    def scope(
        self,
        steps: Sequence[StepBase],
        base: str,
        *,
        enclosing: dict[str, tuple[str, StepBase]],
        depth: int,
    ) -> None:
        places = [f"{base}[{i}]" for i in range(len(steps))]
        here: dict[str, int] = {}
        for i, step in enumerate(steps):
            if step.id in here:
                also = places[here[step.id]]
                self.add(f"{places[i]}.id", f'duplicate step id "{step.id}" (also {also})')
            elif step.id in enclosing:
                self.add(
                    f"{places[i]}.id",
                    f'step id "{step.id}" is already used by {enclosing[step.id][0]} in an '
                    "enclosing scope; pick another id",
                )
            else:
                here[step.id] = i

        successors, targets_ok = self.graph(steps, places, here, top_level=depth == 0)
        if targets_ok:
            # With a bad target, "never reached" is mostly an echo of that one mistake.
            self.reachability(steps, places, successors)
        self.loops(steps, places, successors)

        visible = {**enclosing, **{sid: (places[i], steps[i]) for sid, i in here.items()}}
        for i, step in enumerate(steps):
            self.templates(step, places[i], visible, in_body=depth > 0)
        for i, step in enumerate(steps):
            body = step.body_steps()
            if not body:
                continue
            if depth + 1 > MAX_MAP_NESTING:
                self.add(f"{places[i]}.body", f"maps nest more than {MAX_MAP_NESTING} deep")
                continue
            self.scope(body, f"{places[i]}.body", enclosing=visible, depth=depth + 1)

    def graph(
        self,
        steps: Sequence[StepBase],
        places: list[str],
        here: dict[str, int],
        *,
        top_level: bool,
    ) -> tuple[list[list[int]], bool]:
        successors: list[list[int]] = [[] for _ in steps]
        targets_ok = True
        for i, step in enumerate(steps):
            targets = step.targets()
            for field_name, target in targets:
                if target in here:
                    successors[i].append(here[target])
                    continue
                targets_ok = False
                self.add(f"{places[i]}.{field_name}", self.unknown_target(target, here))
            # ``onError`` (on failure) and ``onTimeout`` (a wait's) are ways out: without
            # ``next`` the step still falls through to the following one.
            if any(name not in ("onError", "onTimeout") for name, _ in targets) or (
                not step.falls_through
            ):
                continue
            if i + 1 < len(steps):
                successors[i].append(i + 1)
            elif top_level:
                self.add(
                    places[i],
                    f'the run would end after step "{step.id}" without reaching an output '
                    'step; give it a "next" or add an output step after it',
                )
        return successors, targets_ok

    def unknown_target(self, target: str, here: dict[str, int]) -> str:
        if target in self.owners:
            return (
                f'step "{target}" is not in this steps list; next and routes can only lead '
                "to steps of the same list"
            )
        return f'unknown step "{target}"{_did_you_mean(target, here)}'

    def reachability(
        self, steps: Sequence[StepBase], places: list[str], successors: list[list[int]]
    ) -> None:
        reached = {0}
        queue = deque([0])
        while queue:
            for j in successors[queue.popleft()]:
                if j not in reached:
                    reached.add(j)
                    queue.append(j)
        for i, step in enumerate(steps):
            if i not in reached:
                self.add(
                    places[i],
                    f'step "{step.id}" is never reached: no next, route or preceding step '
                    f"leads to it from {places[0]}",
                )

    def loops(
        self, steps: Sequence[StepBase], places: list[str], successors: list[list[int]]
    ) -> None:
        for component in _strongly_connected(successors):
            members = set(component)
            first = min(component)
            if len(component) == 1 and first not in successors[first]:
                continue
            for i in sorted(component):
                if steps[i].visit_limit <= 1:
                    self.add(
                        f"{places[i]}.maxVisits",
                        f'step "{steps[i].id}" is on the loop '
                        f"{_cycle_text(steps, successors, members, i)} and needs "
                        "maxVisits > 1 (how many times it may run)",
                    )
            leaves = any(j not in members for i in component for j in successors[i])
            if not leaves:
                self.add(
                    places[first],
                    f"the loop {_cycle_text(steps, successors, members, first)} has no way "
                    "out: no route leaves it",
                )

    def templates(
        self,
        step: StepBase,
        place: str,
        visible: dict[str, tuple[str, StepBase]],
        *,
        in_body: bool,
    ) -> None:
        for field_name, value in step.template_values():
            field_place = f"{place}{Key(field_name)}"
            if field_name == "items" and isinstance(value, str):
                self.items_template(value, field_place)
            for where, text in iter_template_strings(value, field_place):
                try:
                    template = parse_template(text)
                except TemplateSyntaxError as exc:
                    self.add(where, exc.bare_message)
                    continue
                for reference in template.references:
                    message = self.reference_problem(reference, visible, in_body=in_body)
                    if message is not None:
                        self.add(where, message)

    def items_template(self, value: str, where: str) -> None:
        try:
            single = parse_template(value).is_single_reference
        except TemplateSyntaxError:
            return  # reported with the other template problems
        if not single:
            self.add(
                where,
                "must be a single ${...} reference that evaluates to a list (or a list), "
                f"not text: {value!r}",
            )

    def reference_problem(
        self,
        reference: Reference,
        visible: dict[str, tuple[str, StepBase]],
        *,
        in_body: bool,
    ) -> str | None:
        if reference.root == "item" and not in_body:
            return f"{reference}: there is no item here; ${{item}} exists only inside a map body"
        step_id = reference.step_id
        if step_id is None:
            return None
        if step_id in visible:
            return _field_problem(reference, step_id, visible[step_id][1])
        if step_id in self.owners:
            return (
                f'{reference}: step "{step_id}" is inside the body of map '
                f'"{self.owners[step_id]}" and cannot be referred to from here; refer to '
                f"${{steps.{self.owners[step_id]}.output}}, the list of branch results"
            )
        return f'{reference}: unknown step "{step_id}"{_did_you_mean(step_id, visible)}'


def _field_problem(reference: Reference, step_id: str, step: StepBase) -> str | None:
    """What is wrong with ``${steps.<id>.<field>}`` of a visible step, if anything."""
    if reference.step_field == "route" and not step.chooses_route:
        return f'{reference}: step "{step_id}" is not a decision, so it has no route'
    if reference.step_field == "error" and getattr(step, "on_error", None) is None:
        return (
            f'{reference}: step "{step_id}" has no onError, so it has no error (a failure '
            "without onError fails the run)"
        )
    return None


def _did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f' (did you mean "{close[0]}"?)' if close else ""


def _cycle_text(
    steps: Sequence[StepBase], successors: list[list[int]], members: set[int], start: int
) -> str:
    """The shortest cycle through ``start`` inside its component, as ``a → b → a``."""
    if start in successors[start]:
        return f"{steps[start].id} → {steps[start].id}"
    previous = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in successors[node]:
            if nxt == start:
                chain = [node]
                while chain[-1] != start:
                    chain.append(previous[chain[-1]])
                return " → ".join([*(steps[i].id for i in reversed(chain)), steps[start].id])
            if nxt in members and nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return steps[start].id  # not reached: every member of a looping component is on a cycle


def _strongly_connected(successors: list[list[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative: a document may hold thousands of steps."""
    index_of: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(len(successors)):
        if root in index_of:
            continue
        work: list[tuple[int, int]] = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index_of[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if child < len(successors[node]):
                work.append((node, child + 1))
                nxt = successors[node][child]
                if nxt not in index_of:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index_of[nxt])
                continue
            if low[node] == index_of[node]:
                component: list[int] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components
