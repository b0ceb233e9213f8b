"""A code-first run's input against its ``@workflow`` function's parameters and type hints.

The input is the body's keyword arguments, as one JSON object, and the body receives
those JSON values as they are: nothing converts them. So a hint can be checked only
where a JSON value can *be* of that type, and it is checked strictly (pydantic's
``TypeAdapter`` in strict mode): ``n: int`` refuses ``"3"`` and ``true``, as the body would
get a string or a bool.

Checked ("JSON-shaped" hints): ``str``, ``int``, ``float`` (an integer is accepted, as
JSON does not tell them apart), ``bool``, ``None``, ``Any``/``object``, ``Literal`` of
JSON scalars, ``list[X]``/``Sequence[X]``, ``dict[str, X]``/``Mapping[str, X]``,
``TypedDict``s of those, unions and ``Optional`` of those, and ``Annotated`` of those
(its constraints, ``Field(ge=0)``, apply).

Not checked, and why: a pydantic model, a dataclass, ``datetime``, ``tuple``, ``set``,
an ``Enum``, or any other class. The body would receive a dict, a string or a list in
their place, never the type the hint names, so a check could only refuse every input
(or pretend to a conversion that does not happen). The same for a hint that does not
resolve (a forward reference to a name the module lacks). Such a parameter is checked
for presence only.

Presence: a parameter without a default missing from the input, or a key that names no
parameter (when the body has no ``**kwargs``), is a problem at that field.
"""

from __future__ import annotations

import collections.abc
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, cast

from pydantic import TypeAdapter, ValidationError

from little_workflow.errors import Problem, RunInputError
from little_workflow.lwir._jsonschema import field_path

__all__ = ["check_code_input", "code_input_problems"]

_SCALARS: tuple[object, ...] = (str, int, float, bool, type(None), None, Any, object)
_LISTS: tuple[object, ...] = (list, collections.abc.Sequence)
_MAPS: tuple[object, ...] = (dict, collections.abc.Mapping)


def check_code_input(function: Callable[..., Any], input: object, *, where: str) -> None:
    """Raise ``RunInputError`` (naming ``where``) if ``input`` does not fit ``function``."""
    problems = code_input_problems(function, input)
    if problems:
        raise RunInputError(problems, workflow=where)


def code_input_problems(function: Callable[..., Any], input: object) -> list[Problem]:
    """Every way ``input`` does not fit the body's parameters (after ``ctx``), by field.

    An input that is not an object (nor null) is left to ``bind_input``, which says so.
    """
    if input is None:
        arguments: Mapping[str, object] = {}
    elif isinstance(input, Mapping):
        arguments = input
    else:
        return []
    parameters = list(inspect.signature(function).parameters.values())[1:]  # after ctx
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except Exception:
        hints = {}
    named = {p.name: p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    rest = next((p for p in parameters if p.kind is p.VAR_KEYWORD), None)
    problems: list[Problem] = []
    for name, parameter in named.items():
        if name not in arguments and parameter.default is inspect.Parameter.empty:
            problems.append(
                Problem(
                    field_path("input", name),
                    "missing: a parameter of the workflow without a default",
                )
            )
    for key, value in arguments.items():
        place = field_path("input", str(key))
        found = named.get(str(key)) or rest
        if found is None:
            known = ", ".join(named) or "none"
            problems.append(
                Problem(place, f"names no parameter of the workflow (parameters: {known})")
            )
            continue
        hint = hints.get(found.name)
        if hint is None or not _json_shaped(hint):
            continue
        problems.extend(_type_problems(hint, value, place))
    return problems


def _type_problems(hint: object, value: object, place: str) -> list[Problem]:
    try:
        TypeAdapter[Any](cast(Any, hint)).validate_python(value, strict=True)
    except ValidationError as exc:
        if _is_union(hint):
            # pydantic reports each member's failure; which one was meant is not known.
            shown = repr(hint).replace("typing.", "")
            return [Problem(place, f"does not fit the workflow's type hint {shown}")]
        found: dict[str, Problem] = {}
        for error in exc.errors(include_url=False):
            where = _place(place, value, error["loc"])
            if where not in found:  # one per field: a nested union reports each member
                message = f"{error['msg'].lower()} (the workflow's type hint)"
                found[where] = Problem(where, message)
        return list(found.values())
    except Exception:
        return []
    return []


def _place(place: str, value: object, loc: tuple[int | str, ...]) -> str:
    """The field an error's ``loc`` points at, following the value: pydantic also puts the
    name of a union's member in ``loc`` (``int``, ``list[str]``), which is no field."""
    current = value
    for part in loc:
        if isinstance(current, Mapping) and isinstance(part, str) and part in current:
            current = current[part]
        elif isinstance(current, list) and isinstance(part, int) and part in range(len(current)):
            current = current[int(part)]
        else:
            continue
        place = field_path(place, part)
    return place


def _is_union(hint: object) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


# One answer per kind of hint, as the module docstring lists them.
def _json_shaped(hint: object, depth: int = 0) -> bool:  # noqa: PLR0911
    """Whether a JSON value can be of type ``hint`` as it is (see the module docstring)."""
    if depth > 20:
        return False
    if hint in _SCALARS or hint in _LISTS or hint in _MAPS:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Annotated:
        return _json_shaped(args[0], depth + 1)
    if origin is typing.Literal:
        return all(value is None or isinstance(value, str | int | bool) for value in args)
    if origin in (typing.Union, types.UnionType):
        return all(_json_shaped(arg, depth + 1) for arg in args)
    if origin in _LISTS:
        return all(_json_shaped(arg, depth + 1) for arg in args)
    if origin in _MAPS:
        return len(args) == 2 and args[0] is str and _json_shaped(args[1], depth + 1)
    if typing.is_typeddict(hint):
        try:
            fields = typing.get_type_hints(hint, include_extras=True)
        except Exception:
            return False
        return all(_json_shaped(field, depth + 1) for field in fields.values())
    return False
