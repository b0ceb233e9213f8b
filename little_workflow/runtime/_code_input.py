"""A code-first run's input as the body's keyword arguments (``bind_input``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from little_workflow.errors import InvalidValueError

__all__ = ["bind_input"]


def bind_input(function: Callable[..., Any], input: object, *, where: str) -> dict[str, Any]:
    """The body's keyword arguments from a run's input (a JSON object, or ``None``).

    ``InvalidValueError`` if the input is not an object or does not fit the body's
    parameters (after ``ctx``).
    """
    if input is None:
        arguments: dict[str, Any] = {}
    elif isinstance(input, Mapping) and all(isinstance(key, str) for key in input):
        arguments = dict(input)
    else:
        raise InvalidValueError(
            f"{where}: the input of a code-first workflow is a JSON object of its keyword "
            f"arguments, not {type(input).__name__}"
        )
    try:
        inspect.signature(function).bind(None, **arguments)
    except TypeError as exc:
        raise InvalidValueError(f"{where}: the input does not fit the body: {exc}") from exc
    return arguments
