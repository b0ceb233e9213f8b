"""The JSON codec: the only format that crosses a storage boundary.

No pickle anywhere: stored data may be read by another version of the program, or be
hostile. Values are plain JSON (``None``, ``bool``, ``int``, ``float``, ``str``, lists
and string-keyed dicts; tuples are accepted and come back as lists). Anything else,
including ``NaN``, the infinities and integers too long to write (over the interpreter's
4,300-digit conversion limit), is refused with ``InvalidValueError`` before a byte is
written, so a value that was stored always reads back equal.

``to_json_value`` is the check for a value that goes on being used after it is stored (a
step's result, which later steps read): a value holding tuples comes back with lists in
their place, so what the run sees now is what it will read back after a restart.

``canonical_json`` is the form that identities are computed from: sorted keys, no
spaces, UTF-8. ``sha256_digest`` prefixes the hex digest with ``sha256:`` as the design's
``definitionHash`` does.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import TypeAlias

from little_workflow.errors import CorruptDataError, InvalidValueError

__all__ = [
    "JsonValue",
    "canonical_json",
    "check_json_value",
    "dumps",
    "loads",
    "sha256_digest",
    "to_json_value",
]

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

# Deeper than this is refused on write and on read: the stdlib parser would recurse
# until RecursionError, and nothing this program stores is nested so deeply.
MAX_DEPTH = 500

# On read, a few levels more: a store may wrap a value checked on write in an envelope
# of its own (the file store's ``{"lwkv": 1, "value": ...}``), and a value that was
# stored must read back.
_READ_MAX_DEPTH = MAX_DEPTH + 8

# The fast check recurses (two frames a level); deeper values take the iterative walk.
_FAST_DEPTH = 64

_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_CANONICAL_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
)
_SCALARS = (str, int, float, bool, type(None))


def _plain(value: object, depth: int) -> bool:
    # The common case, fast: exact built-in types, no paths built. Anything unusual
    # (a str subclass, a NaN, a deep value) falls to the slow walk, which decides and
    # names the place.
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)  # type: ignore[arg-type]
    if depth >= _FAST_DEPTH:
        return False
    if kind is dict:
        return all(
            type(key) is str and _plain(child, depth + 1)
            for key, child in value.items()  # type: ignore[attr-defined]
        )
    if kind is list:
        return all(_plain(child, depth + 1) for child in value)  # type: ignore[attr-defined]
    # A tuple takes the slow walk, which accepts it and tells ``to_json_value`` to copy.
    return False


def check_json_value(value: object, *, where: str = "value") -> None:
    """Raise ``InvalidValueError`` unless ``value`` is plain JSON (see the module docstring)."""
    if not _plain(value, 0):
        _walk(value, where)


def _walk(value: object, where: str) -> bool:
    """The slow check, naming the place of a refusal; whether ``value`` holds a tuple."""
    tuples = False
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, _SCALARS):
            if isinstance(item, float) and not math.isfinite(item):
                raise InvalidValueError(f"{path} is {item!r}, which JSON cannot represent")
            continue
        if depth >= MAX_DEPTH:
            raise InvalidValueError(f"{path} is nested more than {MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidValueError(
                        f"{path} has a key {key!r} of type {type(key).__name__}; "
                        "JSON object keys must be strings"
                    )
                stack.append((child, f"{path}.{key}", depth + 1))
        elif isinstance(item, list | tuple):
            tuples = tuples or isinstance(item, tuple)
            for index, child in enumerate(item):
                stack.append((child, f"{path}[{index}]", depth + 1))
        else:
            raise InvalidValueError(
                f"{path} is a {type(item).__name__}, which is not JSON "
                "(store str, int, float, bool, None, lists and string-keyed dicts)"
            )
    return tuples


def dumps(value: object, *, where: str = "value") -> str:
    """Compact JSON text for ``value``; ``InvalidValueError`` if it is not plain JSON."""
    check_json_value(value, where=where)
    return _encode(value, where)


def to_json_value(value: object, *, where: str = "value") -> JsonValue:
    """``value`` checked as ``dumps`` checks it, with any tuple turned into a list.

    The common value (no tuple) is returned as it is, at the cost of ``dumps``.
    """
    if not _plain(value, 0) and _walk(value, where):
        copied: JsonValue = json.loads(_encode(value, where))
        return copied
    _encode(value, where)
    return value  # type: ignore[return-value]


def _encode(value: object, where: str) -> str:
    try:
        text = _ENCODER.encode(value)
    except ValueError as exc:
        # An int over the interpreter's digit limit is refused only here, by int -> str.
        raise InvalidValueError(f"{where} cannot be written as JSON: {exc}") from exc
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidValueError(
                f"{where} holds a string with a lone surrogate ({exc.object[exc.start]!r}), "
                "which is not valid Unicode text"
            ) from exc
    return text


def loads(text: str | bytes, *, where: str = "stored value") -> JsonValue:
    """Parse JSON text read back from storage; ``CorruptDataError`` naming ``where`` if bad."""
    try:
        result: JsonValue = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise CorruptDataError(f"{where} is not valid JSON: {exc}") from exc
    # Counting brackets runs at C speed; only a text with enough of them to be too deep
    # pays for the walk (a string's brackets are counted too, which only costs a walk).
    if isinstance(text, str):
        brackets = text.count("[") + text.count("{")
    else:
        brackets = text.count(b"[") + text.count(b"{")
    if brackets > _READ_MAX_DEPTH and _deeper_than(result, _READ_MAX_DEPTH):
        raise CorruptDataError(
            f"{where} is JSON nested more than {_READ_MAX_DEPTH} levels deep; this program "
            f"never stores values nested more than {MAX_DEPTH} levels deep"
        )
    return result


def _deeper_than(value: JsonValue, limit: int) -> bool:
    """Whether containers are nested more than ``limit`` levels deep in ``value``."""
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[dict[str, JsonValue] | list[JsonValue], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    return False


def canonical_json(value: object, *, trusted: bool = False) -> bytes:
    """The canonical UTF-8 JSON bytes of ``value``: sorted keys, no whitespace.

    ``trusted=True`` skips the plain-JSON check, for values this program just produced
    as JSON (a pydantic ``model_dump(mode="json")``); anything else must be checked.
    """
    if not trusted:
        check_json_value(value)
    return _CANONICAL_ENCODER.encode(value).encode("utf-8")


def sha256_digest(value: object, *, trusted: bool = False) -> str:
    """``sha256:`` followed by the hex SHA-256 of ``canonical_json(value)``."""
    return "sha256:" + hashlib.sha256(canonical_json(value, trusted=trusted)).hexdigest()
