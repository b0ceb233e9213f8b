"""The ``${...}`` template language: each form, escaping, errors, and property tests."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from little_workflow.codec import JsonValue
from little_workflow.lwir import (
    Index,
    Key,
    Reference,
    TemplateError,
    TemplateSyntaxError,
    Text,
    parse_template,
    referenced_step_ids,
    render,
)

SCOPE: dict[str, Any] = {
    "input": {"query": "cats", "n": 3, "flags": [True, None], "a.b": {"c d": 1}, "empty": {}},
    "steps": {
        "fetch": {"output": {"candidates": [{"id": "c1"}, {"id": "c2"}]}},
        "judge": {"output": {"score": 0.5}, "route": "accept"},
    },
    "item": {"id": "cand_123", "text": "hello"},
    "run": {"id": "run_abc123"},
}


def ev(text: str, scope: dict[str, Any] | None = None) -> JsonValue:
    return parse_template(text).evaluate(SCOPE if scope is None else scope)


# --- evaluation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("${input.query}", "cats"),
        ("${input.n}", 3),
        ("${input.flags}", [True, None]),
        ("${input.flags[1]}", None),
        ("${input.flags[-1]}", None),
        ('${input["a.b"]["c d"]}', 1),
        ("${ input.query }", "cats"),
        ("${steps.fetch.output.candidates[1].id}", "c2"),
        ("${steps.judge.route}", "accept"),
        ("${item}", {"id": "cand_123", "text": "hello"}),
        ("${item.id}", "cand_123"),
        ("${run.id}", "run_abc123"),
        ("${input.empty}", {}),
    ],
)
def test_a_single_reference_is_the_value_itself(text: str, expected: JsonValue) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("q=${input.query}", "q=cats"),
        ("${input.query}${input.query}", "catscats"),
        ("n: ${input.n}", "n: 3"),
        ("${input.flags} ", "[true,null] "),
        ("${steps.judge.output}!", '{"score":0.5}!'),
        ("x${input.flags[1]}", "xnull"),
        ("[${item.id}]", "[cand_123]"),
    ],
)
def test_interpolation_stringifies_non_strings_as_compact_json(text: str, expected: str) -> None:
    assert ev(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$${input.query}", "${input.query}"),
        ("cost: $5 and $$ and $", "cost: $5 and $$ and $"),
        ("$$${input.query}", "$${input.query}"),
        ("a $${x} b ${input.n}", "a ${x} b 3"),
        ("{}", "{}"),
        ("$", "$"),
        ("}", "}"),
    ],
)
def test_escapes_and_literal_dollars(text: str, expected: str) -> None:
    assert ev(text) == expected


def test_parse_builds_an_ast() -> None:
    template = parse_template('a ${steps.fetch.output.xs[0]["k"]} b')
    assert template.parts == (
        Text("a "),
        Reference("steps", (Key("fetch"), Key("output"), Key("xs"), Index(0), Key("k"))),
        Text(" b"),
    )
    assert not template.is_single_reference
    assert template.references[0].step_id == "fetch"
    assert str(template.references[0]) == "${steps.fetch.output.xs[0].k}"


def test_render_walks_dicts_and_lists() -> None:
    value = {"q": "${input.query}", "list": ["${input.n}", {"deep": "${item.id}!"}], "n": 1}
    value["${input.query}"] = "keys stay literal"
    assert render(value, SCOPE) == {
        "q": "cats",
        "list": [3, {"deep": "cand_123!"}],
        "n": 1,
        "${input.query}": "keys stay literal",
    }


def test_referenced_step_ids() -> None:
    value = {"a": "${steps.fetch.output}", "b": ["x ${steps.judge.route} ${input.q}", 3]}
    assert referenced_step_ids(value) == {"fetch", "judge"}
    assert referenced_step_ids("no templates") == frozenset()


# --- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${input.nope}", "${input.nope}: input has no key 'nope' (its keys are: a.b, empty, "),
        ("${input.query.x}", "${input.query.x}: input.query is a string, not an object"),
        ("${input.flags[5]}", "${input.flags[5]}: index [5] is out of range; input.flags has 2"),
        ("${input.n[0]}", "${input.n[0]}: input.n is a number, not a list"),
        ("${input.empty.x}", "${input.empty.x}: input.empty has no key 'x' (it is empty)"),
        ("${steps.other.output}", "${steps.other.output}: step 'other' has not completed yet"),
        ("${steps.fetch.route}", "${steps.fetch.route}: step 'fetch' recorded no route"),
    ],
)
def test_evaluation_errors_say_which_reference(text: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        ev(text)
    assert caught.value.code == "template_error"
    assert caught.value.message.startswith(message)
    assert caught.value.reference is not None


def test_item_outside_a_map_and_where() -> None:
    with pytest.raises(TemplateError) as caught:
        render({"x": ["${item.id}"]}, {"input": {}}, where="steps[0].with")
    assert caught.value.message == (
        "steps[0].with.x[0]: ${item.id}: there is no item here; ${item} exists only inside a "
        "map body"
    )
    assert caught.value.where == "steps[0].with.x[0]"


def test_no_attribute_access_ever() -> None:
    class Secretive:
        secret = "leaked"

        def __getitem__(self, key: str) -> str:
            return "leaked"

    with pytest.raises(TemplateError, match="has no key '__class__'"):
        ev("${input.__class__}")
    with pytest.raises(TemplateError, match="is a string, not an object"):
        ev("${input.query.__class__}")
    with pytest.raises(TemplateError, match="is a string, not an object"):
        ev("${input.query.upper}")
    with pytest.raises(TemplateError, match="is a Secretive, not an object"):
        ev("${input.secret}", {"input": Secretive()})


def test_values_that_are_not_json_cannot_be_interpolated() -> None:
    with pytest.raises(TemplateError, match="cannot be interpolated"):
        ev("x ${input}", {"input": float("nan")})


@pytest.mark.parametrize(
    "text",
    [
        "${",
        "${}",
        "${input",
        "${input.}",
        "${input[}",
        '${input["x}',
        "${input[x]}",
        "${input[1}",
        "${input[99999999999999999999999]}",
        "${foo}",
        "${steps}",
        "${steps[0].output}",
        "${steps.a}",
        "${steps.a.outputs}",
        "${steps.a.route.x}",
        "${steps.-a.output}",
        "${run}",
        "${run.name}",
        "${input.${x}}",
        "${input. x}",
        "${input x}",
        '${input["\\q"]}',
        "a ${input.x",
    ],
)
def test_syntax_errors(text: str) -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        parse_template(text)
    assert caught.value.code == "template_syntax"
    assert 0 <= caught.value.position <= len(text)
    assert isinstance(caught.value, TemplateError)


def test_render_reports_syntax_errors_with_their_place() -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        render({"q": "${input.}"}, SCOPE, where="steps[2].with")
    assert caught.value.where == "steps[2].with.q"
    assert caught.value.message.startswith("steps[2].with.q: template ")


# --- properties ----------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@given(st.text())
def test_the_parser_raises_only_template_syntax_errors(text: str) -> None:
    try:
        template = parse_template(text)
    except TemplateSyntaxError:
        return
    # What parsed can be written back canonically and parses to the same AST.
    canonical = "".join(
        part.text.replace("${", "$${") if isinstance(part, Text) else str(part)
        for part in template.parts
    )
    assert parse_template(canonical).parts == template.parts
    if "$" not in text:
        assert template.parts == ((Text(text),) if text else ())


@given(st.text(alphabet=st.sampled_from('${}[]."\\ input0-steps.output item run.id _ab')))
def test_the_parser_survives_template_shaped_noise(text: str) -> None:
    with contextlib.suppress(TemplateSyntaxError):
        parse_template(text)


@given(st.text())
def test_escaping_makes_any_text_literal(text: str) -> None:
    escaped = text.replace("${", "$${")
    assert parse_template(escaped).evaluate({}) == text


@st.composite
def value_and_path(draw: st.DrawFn) -> tuple[JsonValue, list[Key | Index], JsonValue]:
    root = draw(json_values)
    accessors: list[Key | Index] = []
    current: JsonValue = root
    while draw(st.booleans()):
        if isinstance(current, dict) and current:
            key = draw(st.sampled_from(sorted(current)))
            accessors.append(Key(key))
            current = current[key]
        elif isinstance(current, list) and current:
            index = draw(st.integers(-len(current), len(current) - 1))
            accessors.append(Index(index))
            current = current[index]
        else:
            break
    return root, accessors, current


@given(value_and_path())
def test_a_reference_reaches_the_value_it_names(
    case: tuple[JsonValue, list[Any], JsonValue],
) -> None:
    root, accessors, expected = case
    reference = Reference("input", tuple(accessors))
    text = str(reference)
    template = parse_template(text)
    assert template.parts == (reference,)
    assert template.evaluate({"input": root}) == expected
    assert (
        parse_template(f"${{item{reference.expression[len('input') :]}}}").evaluate({"item": root})
        == expected
    )


# --- the fast render decides as the placed one ------------------------------------------

_NAMES = st.sampled_from(["a", "b", "items", "x y", "0"])
_LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=False))
_SCOPE_VALUES = st.recursive(
    _LEAVES | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children, children)
        | st.dictionaries(_NAMES, children, max_size=3)
    ),
    max_leaves=8,
)
_REFERENCES = st.builds(
    lambda root, path: "${" + root + path + "}",
    st.sampled_from(["input", "steps", "item", "run", "nope"]),
    st.lists(
        st.one_of(
            _NAMES.map(lambda name: f".{name}" if name.isalnum() else f'["{name}"]'),
            st.integers(-3, 3).map(lambda index: f"[{index}]"),
        ),
        max_size=3,
    ).map("".join),
)
_TEMPLATE_STRINGS = _REFERENCES | st.builds(lambda r: f"say {r}!", _REFERENCES) | st.just("${")
_TEMPLATED = st.recursive(
    _LEAVES | _TEMPLATE_STRINGS | st.text(max_size=3),
    lambda children: (
        st.lists(children, max_size=3)
        | st.tuples(children)
        | st.dictionaries(_NAMES | st.integers(0, 2), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=300)
@example(value={"n": "${input[2]}", "m": "${input[-3]}"}, scope={"input": [1, 2]})
@example(value=["${item.a[1]}", ("${item.a}",)], scope={"item": {"a": (True, None)}})
@example(value={"k": "at ${steps.x}"}, scope={"steps": {"x": {"y": [1.5]}}})
@given(
    value=_TEMPLATED,
    scope=st.fixed_dictionaries(
        {}, optional={"input": _SCOPE_VALUES, "steps": _SCOPE_VALUES, "item": _SCOPE_VALUES}
    ),
)
def test_the_fast_render_gives_what_the_placed_one_gives(value: Any, scope: Any) -> None:
    from little_workflow.lwir._template import _render_placed

    try:
        expected: Any = _render_placed(value, scope, "steps[0].with")
    except TemplateError as exc:
        expected = exc
    try:
        got: Any = render(value, scope, where="steps[0].with")
    except TemplateError as exc:
        got = exc
    if isinstance(expected, TemplateError):
        assert type(got) is type(expected)
        assert str(got) == str(expected)
    else:
        assert got == expected
        assert json_kinds(got) == json_kinds(expected)


def json_kinds(value: Any) -> Any:
    """``value`` with every node replaced by its type: ``1 == True`` must not hide a change."""
    if isinstance(value, dict):
        return {key: json_kinds(child) for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [type(value), *(json_kinds(child) for child in value)]
    return type(value)
