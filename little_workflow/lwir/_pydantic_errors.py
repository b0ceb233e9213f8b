"""Turning pydantic's shape errors into problems that point into the document.

Pydantic reports ``('steps', 3, 'decision', 'nxt')`` with a generic message; a person
reading a workflow file wants ``steps[3].nxt: unknown field "nxt" for a decision step``.
This module drops the union tags pydantic inserts after each step, spells the place
with the document's field names, and rewrites the common messages.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from little_workflow.errors import Problem
from little_workflow.lwir._models import STEP_KINDS, RetryPolicy, Workflow

__all__ = ["problems_from_validation_error"]

_SIMPLE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Fields whose value is a list of steps: the element after their index is a union tag.
_STEP_LISTS = ("steps", "body")
_NESTED_MODELS: dict[str, type[BaseModel]] = {"retry": RetryPolicy}


def problems_from_validation_error(exc: ValidationError) -> list[Problem]:
    """One ``Problem`` per pydantic error, in pydantic's order.

    A list whose only item failed is also reported "too short" by pydantic (it counts
    the items that validated); that echo is dropped when the item's own error is there.
    """
    problems: list[tuple[str, Problem]] = []
    for error in exc.errors(include_url=False):
        path, model = _walk(error["loc"])
        if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
            path += ".kind"
        problem = Problem(path or "document", _message(error, path, model))
        problems.append((error["type"], problem))
    return [
        problem
        for kind, problem in problems
        if kind != "too_short"
        or not any(other.path.startswith(problem.path + "[") for _, other in problems)
    ]


def _walk(loc: Sequence[int | str]) -> tuple[str, type[BaseModel] | None]:
    """The document path of ``loc`` and the model that holds its last element."""
    path = ""
    model: type[BaseModel] | None = Workflow
    parent: type[BaseModel] | None = Workflow
    index = 0
    while index < len(loc):
        element = loc[index]
        parent = model
        if (
            model is not None
            and element in _STEP_LISTS
            and index + 2 < len(loc)
            and isinstance(loc[index + 1], int)
            and loc[index + 2] in STEP_KINDS
        ):
            path += f"{_field(str(element))}[{loc[index + 1]}]"
            model = STEP_KINDS[str(loc[index + 2])]
            parent = model
            index += 3
            continue
        if isinstance(element, int):
            path += f"[{element}]"
            model = None
        elif element == "[key]":
            model = None  # pydantic's marker for "the key itself", already named by path
        else:
            path += _field(element)
            model = _NESTED_MODELS.get(element) if model is not None else None
        index += 1
    return path.lstrip("."), parent


def _field(name: str) -> str:
    if _SIMPLE_NAME_RE.fullmatch(name):
        return f".{name}"
    return f"[{json.dumps(name, ensure_ascii=False)}]"


def _message(  # noqa: PLR0911 - one early return per error type reads as a table
    error: ErrorDetails, path: str, model: type[BaseModel] | None
) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    given = error.get("input")
    last = error["loc"][-1] if error["loc"] else None
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return _unknown_field(str(last), model)
    if kind == "union_tag_invalid":
        tag = json.dumps(ctx.get("tag"), ensure_ascii=False)
        return f"unknown step kind {tag}; use one of: {', '.join(STEP_KINDS)}"
    if kind == "union_tag_not_found":
        return f'a step needs a "kind": one of {", ".join(STEP_KINDS)}'
    if kind == "literal_error" and last == "lwir":
        return f"unsupported LWIR version {_describe(given)}; this program reads lwir: 1"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    simple = {
        "string_type": "must be a string",
        "int_type": "must be an integer",
        "float_type": "must be a number",
        "bool_type": "must be true or false",
        "dict_type": "must be an object (mapping)",
        "model_type": "must be an object (mapping)",
        "model_attributes_type": "must be an object (mapping)",
        "list_type": "must be a list",
        "tuple_type": "must be a list",
        "finite_number": "must be a finite number",
        "invalid-json-value": "is not a JSON value",
    }
    if kind in simple:
        return f"{simple[kind]}, not {_describe(given)}"
    if kind in ("too_short", "string_too_short") and ctx.get("min_length") == 1:
        return "must not be empty"
    bounds = {
        "greater_than_equal": ("ge", "at least"),
        "less_than_equal": ("le", "at most"),
        "greater_than": ("gt", "more than"),
        "less_than": ("lt", "less than"),
    }
    if kind in bounds:
        key, words = bounds[kind]
        return f"must be {words} {ctx.get(key)}, not {given!r}"
    return str(error["msg"])


def _unknown_field(name: str, model: type[BaseModel] | None) -> str:
    if model is None:
        return f'unknown field "{name}"'
    kind_field = model.model_fields.get("kind")
    what = f"a {kind_field.default} step" if kind_field is not None else _model_word(model)
    allowed = sorted(info.alias or field for field, info in model.model_fields.items())
    hint = ""
    if name == "next" and "routes" in allowed:
        hint = '; a decision goes on through "routes" instead of "next"'
    return f'unknown field "{name}" for {what}{hint} (allowed: {", ".join(allowed)})'


def _model_word(model: type[BaseModel]) -> str:
    return "a retry policy" if model is RetryPolicy else "a workflow"


def _describe(value: object) -> str:
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {json.dumps(shown, ensure_ascii=False)}"
    if isinstance(value, list | tuple):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"
