"""Each validation rule fails with a message that points at the place in the document."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from little_workflow.errors import InvalidInputError
from little_workflow.lwir import STEP_KINDS, LwirError, LwirValidationError, parse_workflow

OUTPUT = {"id": "done", "kind": "output", "value": 1}


def doc(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"lwir": 1, "name": "w", "steps": list(steps), **top}


def problems(document: object, **kwargs: Any) -> list[str]:
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(document, **kwargs)  # type: ignore[arg-type]
    assert caught.value.code == "lwir_invalid"
    assert isinstance(caught.value, InvalidInputError)
    return [str(problem) for problem in caught.value.problems]


def execute(step_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "execute", "fn": "pkg.mod:f", **fields}


# --- shape (pydantic errors, rewritten) ----------------------------------------------


def test_unknown_next_points_at_the_field_with_a_suggestion() -> None:
    document = doc(
        execute("fetch"),
        execute("score"),
        {"id": "judge", "kind": "decision", "fn": "p:j", "routes": {"ok": "done"}},
        execute("revise", next="judg"),
        OUTPUT,
    )
    assert problems(document) == ['steps[3].next: unknown step "judg" (did you mean "judge"?)']


def test_missing_and_unknown_fields() -> None:
    assert problems(doc({"id": "a", "kind": "execute"}, OUTPUT)) == [
        "steps[0].fn: required field is missing"
    ]
    decision = {"id": "j", "kind": "decision", "fn": "p:j", "routes": {"a": "done"}, "next": "done"}
    assert problems(doc(decision, OUTPUT)) == [
        'steps[0].next: unknown field "next" for a decision step; a decision goes on through '
        '"routes" instead of "next" (allowed: agent, description, fn, id, kind, maxVisits, '
        "retry, routes, with)"
    ]
    assert problems(doc(OUTPUT, colour="red")) == [
        'colour: unknown field "colour" for a workflow (allowed: description, input, lwir, '
        "name, steps)"
    ]
    assert problems(doc(execute("a", retry={"tries": 2}), OUTPUT)) == [
        'steps[0].retry.tries: unknown field "tries" for a retry policy (allowed: attempts, '
        "backoff, maxBackoff, multiplier, retryOn)"
    ]


def test_kind_errors() -> None:
    assert problems(doc({"id": "a", "kind": "exec"}, OUTPUT)) == [
        'steps[0].kind: unknown step kind "exec"; use one of: execute, tool, agent, decision, '
        "map, workflow, output, wait, sleep"
    ]
    assert problems(doc({"id": "a"}, OUTPUT)) == [
        'steps[0].kind: a step needs a "kind": one of execute, tool, agent, decision, map, '
        "workflow, output, wait, sleep"
    ]


def test_version_and_missing_lwir() -> None:
    assert problems({"lwir": 2, "name": "w", "steps": [OUTPUT]}) == [
        "lwir: unsupported LWIR version 2; this program reads lwir: 1"
    ]
    assert problems({"name": "w", "steps": [OUTPUT]}) == [
        "lwir: missing; a workflow document starts with lwir: 1"
    ]


def test_document_must_be_a_mapping() -> None:
    assert problems("- a\n- b\n") == ["document: a workflow is an object (mapping), not a list"]
    assert problems("") == [
        "document: a workflow is an object (mapping), not null (is the document empty?)"
    ]


def test_types_are_strict() -> None:
    assert problems(doc(execute("a", maxVisits="3"), OUTPUT)) == [
        'steps[0].maxVisits: must be an integer, not the string "3"'
    ]
    assert problems(doc(execute("a", maxVisits=True), OUTPUT)) == [
        "steps[0].maxVisits: must be an integer, not true"
    ]
    assert problems(doc({"id": 7, "kind": "output", "value": 1})) == [
        "steps[0].id: must be a string, not 7"
    ]
    assert problems(doc(execute("a", maxVisits=0), OUTPUT)) == [
        "steps[0].maxVisits: must be at least 1, not 0"
    ]


def test_invalid_step_ids() -> None:
    for bad in ["a.b", "x[1]", "-lead", "", "a b"]:
        assert problems(doc(execute(bad), OUTPUT)) == [
            f"steps[0].id: invalid step id {bad!r}: use letters, digits, '_' and '-', starting "
            "with a letter or digit, at most 100 characters ('.', '[' and ']' are step-path "
            "syntax)"
        ]


def test_fn_must_look_like_module_attr() -> None:
    for bad in ["pkg.mod", "pkg.mod:", ":f", "pkg..mod:f", "pkg.mod:f()", "os.system('x'):f"]:
        assert problems(doc(execute("a", fn=bad), OUTPUT)) == [
            f"steps[0].fn: invalid callable reference {bad!r}: write 'package.module:function' "
            "(or 'package.module:Class.method')"
        ]
    parse_workflow(doc(execute("a", fn="pkg.mod:Class.method"), OUTPUT))


def test_workflow_references() -> None:
    def sub(ref: str) -> dict[str, Any]:
        return {"id": "s", "kind": "workflow", "workflow": ref}

    for ok in ["candidate.scoring", "flows/score.yaml", "score.json", "a/b/c.yml"]:
        parse_workflow(doc(sub(ok), OUTPUT))
    for bad in ["../x.yaml", "/abs.yaml", "a/../b.yaml", "flows/x", "a//b.yaml"]:
        (problem,) = problems(doc(sub(bad), OUTPUT))
        assert problem.startswith("steps[0].workflow: ")


def test_empty_lists() -> None:
    assert problems(doc()) == ["steps: must not be empty"]
    map_step = {"id": "m", "kind": "map", "items": [], "body": []}
    assert problems(doc(map_step, OUTPUT)) == ["steps[0].body: must not be empty"]
    decision = {"id": "j", "kind": "decision", "fn": "p:j", "routes": {}}
    assert problems(doc(decision, OUTPUT)) == ["steps[0].routes: must not be empty"]
    keyless = {"id": "m", "kind": "map", "items": [], "key": "", "body": [execute("w")]}
    assert problems(doc(keyless, OUTPUT)) == ["steps[0].key: must not be empty"]


def test_errors_in_a_body_point_into_the_body() -> None:
    map_step = {"id": "m", "kind": "map", "items": [], "body": [execute("w", fn="nope")]}
    assert problems(doc(map_step, OUTPUT)) == [
        "steps[0].body[0].fn: invalid callable reference 'nope': write 'package.module:function' "
        "(or 'package.module:Class.method')"
    ]


def test_map_items_must_be_a_reference_or_a_list() -> None:
    map_step = {"id": "m", "kind": "map", "items": 5, "body": [execute("w")]}
    assert problems(doc(map_step, OUTPUT)) == [
        "steps[0].items: must be a ${...} reference that evaluates to a list, or a list"
    ]
    map_step["items"] = "items: ${input.xs}"
    assert problems(doc(map_step, OUTPUT)) == [
        "steps[0].items: must be a single ${...} reference that evaluates to a list (or a "
        "list), not text: 'items: ${input.xs}'"
    ]


# --- graph rules ---------------------------------------------------------------------


def test_duplicate_ids_in_a_scope() -> None:
    assert problems(doc(execute("a"), execute("a", next="done"), OUTPUT)) == [
        'steps[1].id: duplicate step id "a" (also steps[0])'
    ]


def test_body_ids_may_not_shadow_enclosing_ids() -> None:
    map_step = {"id": "m", "kind": "map", "items": [], "body": [execute("fetch")]}
    assert problems(doc(execute("fetch"), map_step, OUTPUT)) == [
        'steps[1].body[0].id: step id "fetch" is already used by steps[0] in an enclosing '
        "scope; pick another id"
    ]


def test_sibling_maps_may_reuse_body_ids() -> None:
    first = {"id": "m1", "kind": "map", "items": [], "body": [execute("worker")]}
    second = {"id": "m2", "kind": "map", "items": [], "body": [execute("worker")]}
    parse_workflow(doc(first, second, OUTPUT))


def test_targets_stay_in_their_scope() -> None:
    body = [execute("w", next="done")]
    map_step = {"id": "m", "kind": "map", "items": [], "body": body}
    assert problems(doc(map_step, OUTPUT)) == [
        'steps[0].body[0].next: step "done" is not in this steps list; next and routes can '
        "only lead to steps of the same list"
    ]


def test_route_targets() -> None:
    decision = {"id": "j", "kind": "decision", "fn": "p:j", "routes": {"ok": "done", "no": "nop"}}
    assert problems(doc(decision, OUTPUT)) == ['steps[0].routes.no: unknown step "nop"']


def test_unreachable_steps() -> None:
    assert problems(doc(execute("a", next="done"), execute("orphan"), OUTPUT)) == [
        'steps[1]: step "orphan" is never reached: no next, route or preceding step leads to '
        "it from steps[0]"
    ]


def test_top_level_must_not_fall_off_the_end() -> None:
    judge = {"id": "j", "kind": "decision", "fn": "p:j", "routes": {"ok": "done", "more": "late"}}
    assert problems(doc(judge, OUTPUT, execute("late"))) == [
        'steps[2]: the run would end after step "late" without reaching an output step; give '
        'it a "next" or add an output step after it',
    ]


def test_a_body_may_end_without_an_output() -> None:
    map_step = {"id": "m", "kind": "map", "items": [], "body": [execute("w")]}
    parse_workflow(doc(map_step, OUTPUT))


def test_an_output_step_is_required_at_top_level() -> None:
    map_step = {"id": "m", "kind": "map", "items": [], "body": [OUTPUT], "next": "m"}
    assert problems(doc(map_step)) == [
        'steps[0].maxVisits: step "m" is on the loop m → m and needs maxVisits > 1 (how many '
        "times it may run)",
        "steps[0]: the loop m → m has no way out: no route leaves it",
        "steps: no output step at the top level; add one ({kind: output, value: ...}) so the "
        "run has a result",
    ]


def test_loops_need_max_visits_on_every_step() -> None:
    judge: dict[str, Any] = {
        "id": "judge",
        "kind": "decision",
        "fn": "p:j",
        "routes": {"r": "revise", "ok": "done"},
    }
    document = doc(execute("draft"), judge, execute("revise", next="judge"), OUTPUT)
    assert problems(document) == [
        'steps[1].maxVisits: step "judge" is on the loop judge → revise → judge and needs '
        "maxVisits > 1 (how many times it may run)",
        'steps[2].maxVisits: step "revise" is on the loop revise → judge → revise and needs '
        "maxVisits > 1 (how many times it may run)",
    ]
    judge = {**judge, "maxVisits": 3}
    document = doc(execute("draft"), judge, execute("revise", next="judge", maxVisits=3), OUTPUT)
    parse_workflow(document)


def test_a_loop_without_a_way_out_is_refused() -> None:
    document = doc(
        execute("a", maxVisits=2),
        execute("b", maxVisits=2, next="a"),
        OUTPUT,
    )
    assert problems(document) == [
        "steps[0]: the loop a → b → a has no way out: no route leaves it",
        'steps[2]: step "done" is never reached: no next, route or preceding step leads to it '
        "from steps[0]",
    ]


def test_on_error_may_sit_on_a_loop() -> None:
    # A failed visit counts as a visit (the runtime numbers the next one after it), so a
    # step that loops may route its failures: a → done, or on failure b → a again.
    document = doc(
        execute("a", maxVisits=3, onError="b"),
        OUTPUT,
        execute("b", maxVisits=3, next="a", **{"with": {"why": "${steps.a.error}"}}),
    )
    workflow = parse_workflow(document)
    assert [step.visit_limit for step in workflow.steps] == [3, 1, 3]


def test_a_loop_inside_a_body() -> None:
    judge = {"id": "j", "kind": "decision", "fn": "p:j", "routes": {"again": "w", "ok": "r"}}
    body = [execute("w"), judge, {"id": "r", "kind": "output", "value": "${steps.w.output}"}]
    map_step = {"id": "m", "kind": "map", "items": [], "body": body}
    assert problems(doc(map_step, OUTPUT)) == [
        'steps[0].body[0].maxVisits: step "w" is on the loop w → j → w and needs maxVisits > 1 '
        "(how many times it may run)",
        'steps[0].body[1].maxVisits: step "j" is on the loop j → w → j and needs maxVisits > 1 '
        "(how many times it may run)",
    ]


# --- templates -----------------------------------------------------------------------


def test_template_syntax_errors_point_at_the_argument() -> None:
    assert problems(doc(execute("a", **{"with": {"q": "${input.}"}}), OUTPUT)) == [
        "steps[0].with.q: template \"${input.}\": expected a name after '.' (at offset 8)"
    ]
    assert problems(doc(execute("a", **{"with": {"xs": [1, "${oops}"]}}), OUTPUT)) == [
        "steps[0].with.xs[1]: template \"${oops}\": unknown root 'oops'; a reference starts "
        "with input, steps, item or run (at offset 2)"
    ]


def test_references_must_name_existing_steps() -> None:
    value = {"id": "done", "kind": "output", "value": "${steps.fecth.output}"}
    assert problems(doc(execute("fetch"), value)) == [
        'steps[1].value: ${steps.fecth.output}: unknown step "fecth" (did you mean "fetch"?)'
    ]


def test_item_only_inside_a_map_body() -> None:
    assert problems(doc(execute("a", **{"with": {"x": "${item.id}"}}), OUTPUT)) == [
        "steps[0].with.x: ${item.id}: there is no item here; ${item} exists only inside a map body"
    ]
    map_items = {"id": "m", "kind": "map", "items": "${item}", "body": [execute("w")]}
    assert problems(doc(map_items, OUTPUT)) == [
        "steps[0].items: ${item}: there is no item here; ${item} exists only inside a map body"
    ]


def test_body_steps_are_invisible_from_outside() -> None:
    map_step = {"id": "m", "kind": "map", "items": [], "body": [execute("worker")]}
    value = {"id": "done", "kind": "output", "value": "${steps.worker.output}"}
    assert problems(doc(map_step, value)) == [
        'steps[1].value: ${steps.worker.output}: step "worker" is inside the body of map "m" '
        "and cannot be referred to from here; refer to ${steps.m.output}, the list of branch "
        "results"
    ]


def test_body_steps_see_siblings_and_enclosing_steps() -> None:
    body = [
        execute("w", **{"with": {"i": "${item}", "f": "${steps.fetch.output}"}}),
        {"id": "r", "kind": "output", "value": ["${steps.w.output}", "${item.id}"]},
    ]
    map_step = {"id": "m", "kind": "map", "items": "${steps.fetch.output}", "body": body}
    parse_workflow(doc(execute("fetch"), map_step, OUTPUT))


def test_route_only_for_decisions() -> None:
    value = {"id": "done", "kind": "output", "value": "${steps.a.route}"}
    assert problems(doc(execute("a"), value)) == [
        'steps[1].value: ${steps.a.route}: step "a" is not a decision, so it has no route'
    ]


def test_every_problem_is_listed_in_the_message() -> None:
    document = doc(execute("a", next="x"), execute("a"), {"id": "o", "kind": "output", "value": 1})
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(document, source="flow.json")
    assert str(caught.value) == (
        "invalid LWIR workflow in flow.json (2 problems):\n"
        '  steps[0].next: unknown step "x"\n'
        '  steps[1].id: duplicate step id "a" (also steps[0])'
    )


def test_lwir_version_is_exactly_the_integer_one() -> None:
    for value, shown in [(True, "true"), (1.0, "1.0"), ("1", '"1"'), (None, "null"), (2, "2")]:
        assert problems({"lwir": value, "name": "w", "steps": [OUTPUT]}) == [
            f"lwir: unsupported LWIR version {shown}; this program reads lwir: 1"
        ]


# --- property: whatever the document, the only failure is a typed one ----------------

_ids = st.sampled_from(["a", "b", "done", "m", "a.b", ""])
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=5)
    | st.sampled_from(["${item}", "${steps.a.output}", "${steps.b.route}", "${", "$${x}"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(["id", "kind", "fn", "next", "routes", "body", "items", "value", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)
_body_steps = st.fixed_dictionaries(
    {"id": _ids, "kind": st.sampled_from(list(STEP_KINDS))},
    optional={"fn": st.just("p:f"), "value": _values, "next": _ids},
)
_steps = st.fixed_dictionaries(
    {"id": _ids, "kind": st.sampled_from([*STEP_KINDS, "bad"])},
    optional={
        "fn": st.sampled_from(["p:f", "bad"]),
        "next": _ids,
        "routes": st.dictionaries(_ids, _ids, max_size=3),
        "body": st.lists(_body_steps, max_size=3),
        "items": _values,
        "value": _values,
        "with": st.dictionaries(st.text(max_size=3), _values, max_size=3),
        "maxVisits": st.integers(0, 3),
        "tool": st.just("t"),
        "workflow": st.just("w"),
    },
)


@given(st.lists(_steps, max_size=5), _values)
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_random_documents_fail_only_with_typed_errors(steps: list[Any], junk: Any) -> None:
    for document in ({"lwir": 1, "name": "w", "steps": steps}, junk):
        with contextlib.suppress(LwirError):
            parse_workflow(document)
