"""Typed Python tools: schemas from type hints, validation, invocation, the registry."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import functools
import math
import os
import subprocess
import sys
import typing
from typing import Annotated, Any, Literal, NotRequired

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict  # pydantic needs it before Python 3.12

import little_workflow.harness
from little_workflow.codec import sha256_digest
from little_workflow.errors import ToolArgumentsError, ToolDefinitionError
from little_workflow.harness import Tool, ToolRegistry, tool
from little_workflow.harness._docstrings import parse_docstring
from little_workflow.harness.models import ToolSpec

if typing.TYPE_CHECKING:
    # Only for type checkers: a tool's ``ctx`` annotation is never evaluated.
    from little_workflow.runtime import StepContext

# --- types the tools below use (module level: annotations resolve in module globals) ---


class Color(enum.Enum):
    """A colour."""

    RED = "red"
    GREEN = "green"


class Point(TypedDict):
    x: int
    y: NotRequired[int]


@dataclasses.dataclass
class Box:
    """A box."""

    width: float
    label: str = "box"


class Filter(BaseModel):
    """What to keep."""

    tag: str
    min_score: float = 0.0


class Answer(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    text: str
    score_value: float = Field(alias="scoreValue")


class Opaque:
    """A class pydantic has no schema for."""


_UNSET: Any = object()


def _schema(
    properties: dict[str, Any], required: list[str], defs: dict[str, Any] | None = None
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if defs is not None:
        schema["$defs"] = defs
    return schema


def _properties(made: Tool[..., Any]) -> dict[str, Any]:
    return typing.cast("dict[str, Any]", made.parameters["properties"])


# --- schemas ---


def scalars(text: str, count: int, ratio: float, flag: bool, nothing: None) -> None:
    """Scalars."""


def test_scalar_parameters() -> None:
    assert tool(scalars).parameters == _schema(
        {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        ["text", "count", "ratio", "flag", "nothing"],
    )


def containers(
    tags: list[str],
    scores: dict[str, int],
    pair: tuple[int, str],
    many: tuple[int, ...],
    mode: Literal["fast", "slow"],
) -> None:
    """Containers."""


def test_container_and_literal_parameters() -> None:
    assert tool(containers).parameters == _schema(
        {
            "tags": {"type": "array", "items": {"type": "string"}},
            "scores": {"type": "object", "additionalProperties": {"type": "integer"}},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
            "many": {"type": "array", "items": {"type": "integer"}},
            "mode": {"type": "string", "enum": ["fast", "slow"]},
        },
        ["tags", "scores", "pair", "many", "mode"],
    )


def structured(color: Color, point: Point, box: Box, filter: Filter, when: datetime.date) -> None:
    """Structured values."""


_COLOR_DEF = {
    "title": "Color",
    "description": "A colour.",
    "type": "string",
    "enum": ["red", "green"],
}
_FILTER_DEF = {
    "title": "Filter",
    "description": "What to keep.",
    "type": "object",
    "properties": {
        "tag": {"type": "string"},
        "min_score": {"type": "number", "default": 0.0},
    },
    "required": ["tag"],
}


def test_enum_typeddict_dataclass_and_model_parameters_are_defs() -> None:
    assert tool(structured).parameters == _schema(
        {
            "color": {"$ref": "#/$defs/Color"},
            "point": {"$ref": "#/$defs/Point"},
            "box": {"$ref": "#/$defs/Box"},
            "filter": {"$ref": "#/$defs/Filter"},
            "when": {"type": "string", "format": "date"},
        },
        ["color", "point", "box", "filter", "when"],
        {
            "Box": {
                "title": "Box",
                "description": "A box.",
                "type": "object",
                "properties": {
                    "width": {"type": "number"},
                    "label": {"type": "string", "default": "box"},
                },
                "required": ["width"],
                # A dataclass or TypedDict without its own config takes the arguments'.
                "additionalProperties": False,
            },
            "Color": _COLOR_DEF,
            "Filter": _FILTER_DEF,
            "Point": {
                "title": "Point",
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                "required": ["x"],
                "additionalProperties": False,
            },
        },
    )


def nested(filters: list[Filter], by_color: dict[str, Color] | None = None) -> None:
    """Nested references."""


def test_references_inside_containers_stay_inside_the_schema() -> None:
    parameters = tool(nested).parameters
    assert parameters == _schema(
        {
            "filters": {"type": "array", "items": {"$ref": "#/$defs/Filter"}},
            "by_color": {
                "anyOf": [
                    {"type": "object", "additionalProperties": {"$ref": "#/$defs/Color"}},
                    {"type": "null"},
                ],
                "default": None,
            },
        },
        ["filters"],
        {"Color": _COLOR_DEF, "Filter": _FILTER_DEF},
    )
    assert _refs(parameters) == {"#/$defs/Filter", "#/$defs/Color"}


def _refs(value: object) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        return found.union(*(_refs(child) for child in value.values()))
    if isinstance(value, list):
        return set().union(*(_refs(child) for child in value))
    return set()


def optional(
    name: str | None, limit: int = 10, tag: str | None = None, mode: Literal["a", 1] = "a"
) -> None:
    """Defaults and Optional."""


def test_defaults_are_not_required_and_optional_allows_null() -> None:
    assert tool(optional).parameters == _schema(
        {
            "name": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "limit": {"type": "integer", "default": 10},
            "tag": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "mode": {"enum": ["a", 1], "default": "a"},
        },
        # Optional is not the same as having a default: ``name`` must be sent (maybe null).
        ["name"],
    )


def constrained(
    query: Annotated[str, Field(min_length=1, description="What to look for.")],
    limit: Annotated[int, Field(ge=1, le=50)] = 5,
) -> None:
    """Constraints.

    Args:
        query: Loses to the Field description.
        limit: How many hits.
    """


def test_annotated_field_gives_constraints_and_wins_over_the_docstring() -> None:
    assert tool(constrained).parameters == _schema(
        {
            "query": {"type": "string", "minLength": 1, "description": "What to look for."},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 50,
                "default": 5,
                "description": "How many hits.",
            },
        },
        ["query"],
    )


def nothing() -> str:
    return "ok"


def test_no_parameters_is_an_empty_object() -> None:
    made = tool(nothing)
    assert made.parameters == _schema({}, [])
    assert made.description == ""


def clashing(json: str, schema: int, model_name: str, _private: bool = False) -> dict[str, Any]:
    """Names that are BaseModel attributes or private in pydantic."""
    return {"json": json, "schema": schema, "model_name": model_name, "_private": _private}


async def test_parameter_names_may_clash_with_basemodel_attributes() -> None:
    made = tool(clashing)
    assert list(_properties(made)) == ["json", "schema", "model_name", "_private"]
    result = await made.invoke({"json": "j", "schema": 2, "model_name": "m", "_private": True})
    assert result == {"json": "j", "schema": 2, "model_name": "m", "_private": True}


# --- ctx ---


def with_ctx(ctx: StepContext, query: str) -> dict[str, Any]:
    """Uses the context; its annotation is imported only for type checkers."""
    return {"query": query, "ctx": ctx}


async def test_ctx_is_not_in_the_schema_and_is_passed() -> None:
    made = tool(with_ctx)
    assert made.takes_ctx
    assert made.parameters == _schema({"query": {"type": "string"}}, ["query"])
    marker = "the context"
    assert await made.invoke({"query": "q"}, ctx=marker) == {"query": "q", "ctx": marker}
    assert await made.invoke({"query": "q"}) == {"query": "q", "ctx": None}


async def test_a_model_cannot_pass_ctx() -> None:
    with pytest.raises(ToolArgumentsError, match="unexpected argument 'ctx'"):
        await tool(with_ctx).invoke({"query": "q", "ctx": "forged"})


def test_a_tool_without_ctx_does_not_take_it() -> None:
    assert not tool(scalars).takes_ctx


# --- docstrings ---


def google(query: str, limit: int = 3) -> None:
    """Search the index.

    Returns the best hits first.

    Args:
        query: The text to look for; it may span
            two lines.
        limit (int, optional): How many hits.

    Returns:
        Hits.

    Raises:
        ValueError: Never.
    """


def rest(query: str, limit: int = 3) -> None:
    """Search the index.

    :param query: The text to look for.
    :param int limit: How many
        hits.
    :returns: Hits.
    """


def numpy(query: str, limit: int = 3) -> None:
    """Search the index.

    Parameters
    ----------
    query : str
        The text to look for.
    limit : int, optional
        How many hits.

    Returns
    -------
    list
        Hits.
    """


def test_google_docstring() -> None:
    made = tool(google)
    assert made.description == "Search the index.\n\nReturns the best hits first."
    assert made.parameters["properties"] == {
        "query": {"type": "string", "description": "The text to look for; it may span two lines."},
        "limit": {"type": "integer", "default": 3, "description": "How many hits."},
    }


def test_rest_docstring() -> None:
    made = tool(rest)
    assert made.description == "Search the index."
    assert made.parameters["properties"] == {
        "query": {"type": "string", "description": "The text to look for."},
        "limit": {"type": "integer", "default": 3, "description": "How many hits."},
    }


def test_numpy_docstring() -> None:
    made = tool(numpy)
    assert made.description == "Search the index."
    assert made.parameters["properties"] == {
        "query": {"type": "string", "description": "The text to look for."},
        "limit": {"type": "integer", "default": 3, "description": "How many hits."},
    }


def test_explicit_name_and_description_win() -> None:
    made = tool(google, name="find", description="Find things.")
    assert (made.name, made.description) == ("find", "Find things.")
    # The parameters are still described by the docstring.
    assert _properties(made)["query"]["description"].startswith("The text")


@pytest.mark.parametrize(
    ("docstring", "description", "parameters"),
    [
        (None, "", {}),
        ("   ", "", {}),
        ("One line.", "One line.", {}),
        ("Note: not a section.\n\nMore.", "Note: not a section.\n\nMore.", {}),
        (
            "Text.\n\nArgs:\n    a: A.\n    b: B.\nExample:\n    call(a)",
            "Text.",
            {"a": "A.", "b": "B."},
        ),
        ("Text.\n\nArgs:\n    *args: Rest.\n    a: A.", "Text.", {"args": "Rest.", "a": "A."}),
        ("Text.\n\nArgs:\n    a:\n        On the next line.", "Text.", {"a": "On the next line."}),
        ("Text.\n\n:param a: A.\n:type a: int\n:param b: B.", "Text.", {"a": "A.", "b": "B."}),
        ("Text.\n:param dict[str, int] m: M.", "Text.", {"m": "M."}),
        (
            "Text.\n\nParameters\n----------\nx, y : int\n    Both.",
            "Text.",
            {"x": "Both.", "y": "Both."},
        ),
        ("Text.\n\nHeading\n-------\nmore", "Text.\n\nHeading\n-------\nmore", {}),
        ("Text.\n\nArgs:\n    a: First.\n    a: Second.", "Text.", {"a": "First."}),
        ("Text.\n\nArgs:\n    a:\n    b: B.", "Text.", {"b": "B."}),
    ],
)
def test_parse_docstring(
    docstring: str | None, description: str, parameters: dict[str, str]
) -> None:
    parsed = parse_docstring(docstring)
    assert parsed.description == description
    assert parsed.parameters == parameters


@given(st.text())
def test_parse_docstring_never_raises(text: str) -> None:
    parsed = parse_docstring(text)
    assert parsed.description == parsed.description.strip()
    assert all(value for value in parsed.parameters.values())


# --- refused definitions ---


def star_args(*values: int) -> None: ...


def star_kwargs(a: int, **options: str) -> None: ...


def unannotated(a: int, b) -> None: ...  # type: ignore[no-untyped-def]


def unresolvable(a: int, b: NotDefinedAnywhere) -> None: ...  # type: ignore[name-defined]  # noqa: F821


def opaque(a: int, thing: Opaque) -> None: ...


def typing_typeddict(a: int, spec: _StdlibTypedDict) -> None: ...


class _StdlibTypedDict(typing.TypedDict):
    # typing.TypedDict before Python 3.12 lacks what pydantic needs.
    a: int


def bad_default(x: float = math.inf) -> None: ...


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (star_args, r"tool 'star_args': parameter '\*values' is not allowed"),
        (star_kwargs, r"tool 'star_kwargs': parameter '\*\*options' is not allowed"),
        (unannotated, r"tool 'unannotated': parameter 'b' has no type annotation"),
        (unresolvable, r"tool 'unresolvable': cannot resolve the type of parameter 'b'"),
        (opaque, r"tool 'opaque': parameter 'thing' has a type with no JSON schema \(Opaque\)"),
        pytest.param(
            typing_typeddict,
            r"tool 'typing_typeddict': parameter 'spec' has a type with no JSON schema",
            marks=pytest.mark.skipif(sys.version_info >= (3, 12), reason="fine from 3.12"),
        ),
        (bad_default, r"tool 'bad_default': parameters.properties.x.default is inf"),
    ],
)
def test_refused_definitions_name_the_parameter(function: Any, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message) as caught:
        tool(function)
    assert caught.value.code == "tool_definition_error"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("has space", "tool name 'has space' is not acceptable"),
        ("", "tool name '' is not acceptable"),
        ("x" * 65, "is not acceptable"),
        ("dotted.name", "is not acceptable"),
        ("ok\n", "is not acceptable"),
    ],
)
def test_refused_names(name: str, message: str) -> None:
    with pytest.raises(ToolDefinitionError, match=message):
        tool(nothing, name=name)


def test_accepted_names() -> None:
    assert tool(nothing, name="a-B_9" + "x" * 59).name == "a-B_9" + "x" * 59


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ToolDefinitionError, match="'<lambda>' is not acceptable"):
        tool(lambda: None)
    assert tool(lambda: None, name="noop").name == "noop"


def test_not_a_callable_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match="must be a callable, not a int"):
        tool(3)  # type: ignore[call-overload]


def test_a_callable_without_a_name_needs_one() -> None:
    with pytest.raises(ToolDefinitionError, match="no __name__"):
        tool(functools.partial(scalars, "t"))


# --- validation of arguments ---


def typed(count: int, ratio: float, flag: bool, color: Color, box: Box, tags: list[str]) -> Any:
    """Echoes what it received, with the Python types."""
    return {
        "count": [type(count).__name__, count],
        "ratio": [type(ratio).__name__, ratio],
        "flag": [type(flag).__name__, flag],
        "color": [type(color).__name__, color],
        "box": [type(box).__name__, box],
        "tags": tags,
    }


_TYPED_OK: dict[str, Any] = {
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "color": "red",
    "box": {"width": 2},
    "tags": ["a"],
}


async def test_arguments_are_converted_to_the_declared_types() -> None:
    assert await tool(typed).invoke(_TYPED_OK) == {
        "count": ["int", 3],
        "ratio": ["float", 0.5],
        "flag": ["bool", True],
        "color": ["Color", "red"],
        "box": ["Box", {"width": 2.0, "label": "box"}],
        "tags": ["a"],
    }


async def test_validation_is_lax_where_nothing_is_lost() -> None:
    result = await tool(typed).invoke({**_TYPED_OK, "count": "3", "ratio": 1, "flag": "true"})
    assert isinstance(result, dict)
    assert result["count"] == ["int", 3]
    assert result["ratio"] == ["float", 1.0]
    assert result["flag"] == ["bool", True]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"count": "three"},
            "argument 'count': Input should be a valid integer, unable to parse string as an "
            'integer (got "three")',
        ),
        (
            {"count": 3.5},
            "argument 'count': Input should be a valid integer, got a number with a fractional "
            "part (got 3.5)",
        ),
        ({"ratio": "nan"}, "argument 'ratio': Input should be a finite number"),
        ({"color": "blue"}, "argument 'color': Input should be 'red' or 'green' (got \"blue\")"),
        ({"box": {"width": 1, "depth": 2}}, "unexpected field 'box.depth'"),
        ({"box": {}}, "missing required field 'box.width'"),
        ({"tags": ["a", 2]}, "argument 'tags[1]': Input should be a valid string (got 2)"),
        ({"tags": "a"}, "argument 'tags': Input should be a valid list"),
    ],
)
async def test_wrong_types_are_refused_with_the_argument_named(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await tool(typed).invoke({**_TYPED_OK, **change})
    assert caught.value.code == "tool_arguments_invalid"
    assert caught.value.message.startswith("invalid arguments for tool 'typed': ")
    assert message in caught.value.message


async def test_missing_and_extra_arguments() -> None:
    arguments = {key: value for key, value in _TYPED_OK.items() if key != "ratio"}
    with pytest.raises(ToolArgumentsError) as caught:
        await tool(typed).invoke({**arguments, "colour": "red", "limit": 3})
    assert caught.value.message == (
        "invalid arguments for tool 'typed': missing required argument 'ratio'; "
        "unexpected arguments 'colour', 'limit' "
        "(it takes: count, ratio, flag, color, box, tags)"
    )


async def test_many_problems_are_summarised() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await tool(typed).invoke({})
    assert caught.value.message == (
        "invalid arguments for tool 'typed': missing required argument 'count'; "
        "missing required argument 'ratio'; missing required argument 'flag'; "
        "missing required argument 'color'; missing required argument 'box'; and 1 more"
    )


async def test_long_inputs_are_cut_in_the_message() -> None:
    with pytest.raises(ToolArgumentsError) as caught:
        await tool(typed).invoke({**_TYPED_OK, "count": "x" * 500})
    assert '(got "xxxxxxxxx' in caught.value.message
    assert len(caught.value.message) < 200


@pytest.mark.parametrize(
    ("arguments", "kind"), [([1], "an array"), ("x", "a string"), (None, "null"), (3, "a number")]
)
async def test_arguments_must_be_an_object(arguments: Any, kind: str) -> None:
    with pytest.raises(ToolArgumentsError, match=f"must be a JSON object, not {kind}"):
        await tool(typed).invoke(arguments)


async def test_the_function_does_not_run_when_arguments_are_invalid() -> None:
    calls: list[int] = []

    def record(n: int) -> None:
        calls.append(n)

    with pytest.raises(ToolArgumentsError):
        await tool(record).invoke({"n": "x"})
    assert calls == []


def _json_values() -> st.SearchStrategy[Any]:
    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=10),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=12,
    )


_ARGUMENT_NAMES = st.sampled_from([*_TYPED_OK, "ctx", "other"]) | st.text(max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_ARGUMENT_NAMES, _json_values(), max_size=8))
def test_any_json_arguments_succeed_or_raise_tool_arguments_error(
    arguments: dict[str, Any],
) -> None:
    outcome: object
    try:
        outcome = asyncio.run(tool(typed).invoke(arguments))
    except ToolArgumentsError as exc:
        outcome = exc
    if isinstance(outcome, ToolArgumentsError):
        assert outcome.message.startswith("invalid arguments for tool 'typed': ")
    else:
        assert isinstance(outcome, dict)


# --- invocation ---


async def test_sync_and_async_functions() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    async def mul(a: int, b: int) -> int:
        await asyncio.sleep(0)
        return a * b

    assert not tool(add).is_async
    assert tool(mul).is_async
    assert await tool(add).invoke({"a": 2, "b": 3}) == 5
    assert await tool(mul).invoke({"a": 2, "b": 3}) == 6


def test_the_tool_is_still_callable_directly() -> None:
    @tool
    def add(a: int, b: int = 1) -> int:
        """Add."""
        return a + b

    assert isinstance(add, Tool)
    assert add(2) == 3
    assert add.function(2, b=5) == 7


async def test_decorator_with_arguments() -> None:
    @tool(name="plus", description="Adds.")
    async def add(a: int, b: int) -> int:
        return a + b

    assert (add.name, add.description, add.is_async) == ("plus", "Adds.", True)
    assert await add.invoke({"a": 1, "b": 1}) == 2


def test_tool_of_a_tool_renames_it() -> None:
    first = tool(google)
    renamed = tool(first, name="lookup")
    assert renamed.function is google
    assert renamed.parameters == first.parameters
    assert renamed.name == "lookup"


def keeps_sentinel(value: Any = _UNSET, items: list[int] | None = None) -> bool:
    return value is _UNSET


async def test_an_omitted_argument_gets_the_functions_own_default() -> None:
    made = tool(keeps_sentinel)
    assert made.parameters == _schema(
        {
            # The sentinel is not JSON: it is left out, the parameter stays optional.
            "value": {},
            "items": {
                "anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}],
                "default": None,
            },
        },
        [],
    )
    assert await made.invoke({}) is True
    assert await made.invoke({"value": 1}) is False


async def test_positional_only_parameters() -> None:
    def span(start: int = 0, stop: int = 10, /, *, step: int = 1) -> list[int]:
        return list(range(start, stop, step))

    made = tool(span)
    assert made.parameters["required"] == []
    assert await made.invoke({"stop": 3}) == [0, 1, 2]
    assert await made.invoke({"start": 2, "step": 2}) == [2, 4, 6, 8]


class Counter:
    """Counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def bump(self, by: int) -> int:
        """Bump the counter.

        Args:
            by: How much.
        """
        self.calls += by
        return self.calls

    async def __call__(self, by: int, ctx: StepContext | None = None) -> int:
        self.calls += by
        return self.calls


async def test_bound_methods_and_callable_objects() -> None:
    counter = Counter()
    method = tool(counter.bump)
    assert method.name == "bump"
    assert method.description == "Bump the counter."
    assert method.parameters == _schema(
        {"by": {"type": "integer", "description": "How much."}}, ["by"]
    )
    assert await method.invoke({"by": 2}) == 2

    instance = tool(counter, name="count")
    assert instance.is_async
    assert instance.takes_ctx
    assert instance.description == "Counts calls."
    assert await instance.invoke({"by": 3}) == 5


async def test_partial_functions() -> None:
    made = tool(functools.partial(google, limit=7), name="google7")
    assert made.description == "Search the index.\n\nReturns the best hits first."
    assert _properties(made)["limit"]["default"] == 7


class ToolBug(Exception):
    pass


async def test_exceptions_from_the_tool_propagate_unchanged() -> None:
    error = ToolBug("boom")

    def failing(x: int) -> None:
        raise error

    async def failing_async(x: int) -> None:
        raise error

    for function in (failing, failing_async):
        with pytest.raises(ToolBug) as caught:
            await tool(function).invoke({"x": 1})
        assert caught.value is error


# --- results ---


@dataclasses.dataclass
class Result:
    hits: tuple[int, ...]
    when: datetime.date
    color: Color


async def test_results_become_plain_json() -> None:
    cases: list[tuple[Any, Any]] = [
        (None, None),
        ("text", "text"),
        ((1, (2, 3)), [1, [2, 3]]),
        ({"a": (1,)}, {"a": [1]}),
        (Answer(text="t", score_value=0.5), {"text": "t", "scoreValue": 0.5}),
        (
            Result(hits=(1, 2), when=datetime.date(2024, 5, 1), color=Color.GREEN),
            {"hits": [1, 2], "when": "2024-05-01", "color": "green"},
        ),
        ({1}, [1]),
    ]
    for value, expected in cases:

        def give(value: Any = value) -> Any:
            return value

        assert await tool(give).invoke({}) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (Opaque(), r"tool 'give' returned a Opaque, which is not JSON"),
        (math.nan, r"tool 'give' returned a float, which is not JSON \(result is nan"),
        ({"a": [math.inf]}, r"returned a dict, which is not JSON \(result\.a\[0\] is inf"),
    ],
)
async def test_a_result_that_is_not_json_is_a_tool_definition_error(
    value: object, message: str
) -> None:
    def give() -> Any:
        return value

    with pytest.raises(ToolDefinitionError, match=message):
        await tool(give).invoke({})


@settings(max_examples=100, deadline=None)
@given(_json_values())
def test_json_results_come_back_equal(value: Any) -> None:
    def give() -> Any:
        return value

    assert asyncio.run(tool(give).invoke({})) == value


# --- spec and schema hash ---


def test_spec() -> None:
    made = tool(rest)
    assert made.spec == ToolSpec(
        name="rest", description="Search the index.", parameters=made.parameters
    )


def test_schema_hash_is_the_digest_of_name_description_and_parameters() -> None:
    made = tool(rest)
    assert made.schema_hash == sha256_digest(
        {"name": "rest", "description": "Search the index.", "parameters": made.parameters}
    )
    assert made.schema_hash == tool(rest).schema_hash


_HASH_SCRIPT = """
from little_workflow.harness import tool

def search(query: str, tags: set[str], limit: int = 3) -> list[str]:
    '''Search.

    Args:
        query: What.
    '''
    return []

print(tool(search).schema_hash)
"""


def test_schema_hash_is_stable_across_processes() -> None:
    hashes = set()
    for seed in ("1", "2"):
        result = subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        hashes.add(result.stdout.strip())
    assert len(hashes) == 1
    assert hashes.pop().startswith("sha256:")


def v1(query: str, limit: int = 3) -> None:
    """Search the index."""


def v2_type(query: str, limit: float = 3) -> None:
    """Search the index."""


def v2_doc(query: str, limit: int = 3) -> None:
    """Search the whole index."""


def v2_param_doc(query: str, limit: int = 3) -> None:
    """Search the index.

    Args:
        query: What to look for.
    """


def v2_default(query: str, limit: int = 4) -> None:
    """Search the index."""


def test_schema_hash_changes_with_the_definition() -> None:
    hashes = [
        tool(function, name="search").schema_hash
        for function in (v1, v2_type, v2_doc, v2_param_doc, v2_default)
    ]
    assert len(set(hashes)) == len(hashes)
    assert tool(v1, name="search").schema_hash != tool(v1, name="find").schema_hash
    assert (
        tool(v1, name="search").schema_hash
        == tool(v2_doc, name="search", description="Search the index.").schema_hash
    )


# --- registry ---


def test_registry_keeps_registration_order() -> None:
    registry = ToolRegistry([tool(rest), google, tool(numpy, name="np")])
    assert registry.names() == ("rest", "google", "np")
    assert [spec.name for spec in registry.specs()] == ["rest", "google", "np"]
    assert list(registry.manifest().items()) == [
        ("rest", tool(rest).schema_hash),
        ("google", tool(google).schema_hash),
        ("np", tool(numpy, name="np").schema_hash),
    ]
    assert [made.name for made in registry] == ["rest", "google", "np"]
    assert len(registry) == 3
    assert "np" in registry
    assert "numpy" not in registry
    assert registry.get("google").function is google
    assert repr(registry) == "ToolRegistry(['rest', 'google', 'np'])"


def test_registry_specs_of_a_subset() -> None:
    registry = ToolRegistry([rest, google, numpy])
    assert [spec.name for spec in registry.specs(["numpy", "rest"])] == ["numpy", "rest"]
    assert registry.specs([]) == ()
    with pytest.raises(ToolArgumentsError, match="unknown tool 'nope'"):
        registry.specs(["rest", "nope"])


def test_registry_refuses_duplicate_names() -> None:
    with pytest.raises(ToolDefinitionError, match="two tools are named 'rest'"):
        ToolRegistry([rest, tool(google, name="rest")])


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("serch", "unknown tool 'serch'; did you mean 'search'? available: search, numpy"),
        ("zzz", "unknown tool 'zzz'; available: search, numpy"),
    ],
)
def test_registry_unknown_tool(name: str, message: str) -> None:
    registry = ToolRegistry([tool(rest, name="search"), numpy])
    with pytest.raises(ToolArgumentsError) as caught:
        registry.get(name)
    assert caught.value.message == message
    assert caught.value.code == "unknown_tool"


def test_empty_registry() -> None:
    registry = ToolRegistry()
    assert registry.specs() == ()
    assert registry.manifest() == {}
    with pytest.raises(ToolArgumentsError, match="unknown tool 'x'; available: none"):
        registry.get("x")


def test_harness_exports_the_tool_names_sorted() -> None:
    names = little_workflow.harness.__all__
    assert {"Tool", "ToolRegistry", "tool"} <= set(names)
    # ruff's RUF022 order: CONSTANTS, Classes, functions.
    assert names == sorted(
        names, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n)
    )
    for name in names:
        assert hasattr(little_workflow.harness, name), name
