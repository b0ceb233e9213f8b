"""``${...}`` references cannot reach Python: no attribute, dunder, private name, format
spec or conversion, whatever the scope holds. ``tests/lwir/test_templates.py`` already
fuzzes the parser with text; these aim at the evaluator with the names an attacker tries."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.codec import JsonValue
from little_workflow.errors import TemplateError, TemplateSyntaxError
from little_workflow.lwir import parse_template, render
from tests.hostile.support import FUZZ

DUNDERS = [
    "__class__", "__dict__", "__globals__", "__builtins__", "__init__", "__subclasses__",
    "__mro__", "__base__", "__module__", "__code__", "__getattribute__", "__reduce__",
    "_private", "_", "__", "mro", "keys", "items", "get", "upper", "format", "real", "f_globals",
]  # fmt: skip


class Gadget:
    """An object with attributes an attribute-walking evaluator would reach."""

    secret = "leaked"

    def __init__(self) -> None:
        self.x = {"y": "leaked"}

    def __getitem__(self, key: object) -> str:
        return "leaked"


def scope() -> dict[str, object]:
    return {
        "input": {"x": 1, "s": "text", "l": [1, 2]},
        "steps": {"a": {"output": {"v": "ok"}, "route": "b"}},
        "run": {"id": "run_1"},
        "item": {"id": "i"},
    }


@pytest.mark.parametrize("name", DUNDERS)
@pytest.mark.parametrize(
    "base", ["input", "input.x", "input.s", "input.l", "steps.a.output", "item"]
)
def test_a_name_is_a_key_never_an_attribute(base: str, name: str) -> None:
    for text in (f"${{{base}.{name}}}", f"${{{base}[{json.dumps(name)}]}}"):
        with pytest.raises(TemplateError) as caught:
            render(text, scope(), where="steps[0].with.q")
        assert caught.value.code == "template_error"
        assert caught.value.where == "steps[0].with.q"
        assert repr(name) in caught.value.message
        assert "leaked" not in caught.value.message


@pytest.mark.parametrize(
    "text",
    [
        "${steps.a.__class__}",
        "${steps.__class__.output}",
        "${steps.a.route.__class__}",
        "${run.__class__}",
        "${run.id.__class__}",
        "${__class__}",
        "${__import__}",
        "${input.__class__.__mro__[1].__subclasses__()}",
        "${input!r}",
        "${input!s}",
        "${input:>10}",
        "${input.x:{input.s}}",
        "${input['x']}",
        "${input.x()}",
        "${input.x if 1 else 2}",
        "${input + input}",
        "${input|attr('x')}",
        "${ input . x }",
        "${input[0:1]}",
        "${input[-0x1]}",
        "${input[1e3]}",
        "${{input}}",
    ],
)
def test_python_syntax_is_a_template_syntax_error(text: str) -> None:
    with pytest.raises(TemplateSyntaxError) as caught:
        render({"q": text}, scope(), where="steps[2].with")
    assert caught.value.code == "template_syntax"
    assert caught.value.where == "steps[2].with.q"
    assert caught.value.message.startswith("steps[2].with.q: template ")


@pytest.mark.parametrize(
    "text",
    [
        "{input.__class__}",
        "{0.__class__}",
        "%(input)s",
        "{input!r:>{input}}",
        "$input",
        "$(input)",
        "$$${input}",
    ],
)
def test_format_string_syntax_is_literal_text(text: str) -> None:
    assert render(text, scope()) == text.replace("$${", "${")


@pytest.mark.parametrize(
    "value",
    [Gadget(), object(), os, json.dumps, type, (lambda: "leaked")],
    ids=["gadget", "object", "module", "function", "type", "lambda"],
)
def test_objects_in_the_scope_are_opaque(value: object) -> None:
    for text in (
        "${input.secret}",
        "${input.x}",
        "${input.__class__}",
        '${input["x"]}',
        "${input[0]}",
    ):
        with pytest.raises(TemplateError) as caught:
            render(text, {"input": value})
        assert "not an object" in caught.value.message or "not a list" in caught.value.message
    with pytest.raises(TemplateError, match=r"not JSON|cannot be interpolated"):
        render("x ${input}", {"input": value})


@FUZZ
@given(
    st.lists(st.sampled_from(DUNDERS) | st.text(min_size=1, max_size=6), min_size=1, max_size=4),
    st.sampled_from(["input", "item", "steps.a.output"]),
    st.booleans(),
)
def test_fuzzed_name_chains_reach_only_json(names: list[str], base: str, quoted: bool) -> None:
    accessors = "".join(f"[{json.dumps(n)}]" if quoted else f".{n}" for n in names)
    value: JsonValue
    try:
        value = render("${" + base + accessors + "}", {**scope(), "input": Gadget()})
    except TemplateError:  # TemplateSyntaxError included
        return
    assert isinstance(value, str | int | float | bool | list | dict | type(None))
    assert value != "leaked"


@pytest.mark.timeout(20)
def test_huge_templates_parse_in_linear_time() -> None:
    # A quarter of a 1 MB document each: a quadratic parser would take minutes here,
    # past the timeout mark (no time is asserted: the mark bounds a hang).
    cases = [
        "${input.x}" * 25_000,
        "$${" * 80_000,
        "$" * 250_000,
        "${input" + ".a" * 120_000 + "}",
        "${input" + "[0]" * 80_000 + "}",
        '${input["' + "\\\\" * 120_000 + '"]}',
    ]
    for text in cases:
        with contextlib.suppress(TemplateSyntaxError):
            parse_template(text)
    with pytest.raises(TemplateError, match="has no key 'a'"):
        render(cases[3], scope())
