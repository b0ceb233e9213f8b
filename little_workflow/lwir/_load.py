"""Reading workflow documents: JSON or YAML text, files, and plain dicts.

A workflow file is input from outside, possibly written by a model, so reading it is
defensive: at most ``MAX_DOCUMENT_BYTES``; nesting at most ``MAX_NESTING_DEPTH``; YAML
aliases expanded to at most ``MAX_YAML_NODES`` nodes (a "billion laughs" document is
refused after that many, not after exhausting memory); duplicate keys refused in both
formats (the stdlib and PyYAML would silently keep the last one).

YAML is read as JSON written differently. It is composed by PyYAML's safe loader into
nodes (no Python object is ever constructed from a tag) and the nodes are converted
here, with JSON's scalars only: ``true``/``false``, ``null``/``~``/empty, decimal
integers and floats. YAML 1.1's other implicit types are plain strings (``yes``,
``on`` and ``2024-01-01`` stay strings, so ``country: NO`` means Norway); other tags,
non-string keys and merge keys (``<<``) are refused. So a document means the same in
either format and hashes the same.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, NoReturn

from pydantic import ValidationError

from little_workflow.codec import JsonValue
from little_workflow.errors import (
    LwirLoadError,
    LwirSyntaxError,
    LwirTooLargeError,
    LwirValidationError,
    Problem,
)
from little_workflow.lwir._models import Workflow
from little_workflow.lwir._pydantic_errors import problems_from_validation_error

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING_DEPTH",
    "MAX_YAML_NODES",
    "load_workflow",
    "parse_workflow",
    "read_document",
]

#: Largest workflow document read, in bytes of UTF-8.
MAX_DOCUMENT_BYTES = 1024 * 1024
#: Most nodes a YAML document may expand to once aliases are resolved.
MAX_YAML_NODES = 100_000
#: Deepest nesting of objects and lists accepted.
MAX_NESTING_DEPTH = 100

Format = Literal["json", "yaml"]
_SUFFIXES: dict[str, Format] = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}
_INT_RE = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_FLOAT_RE = re.compile(r"[-+]?(?:(?:0|[1-9][0-9]*)(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_MAX_NUMBER_CHARS = 400


def load_workflow(path: str | os.PathLike[str]) -> Workflow:
    """Read and validate a ``.json``, ``.yaml`` or ``.yml`` workflow file."""
    file = Path(path)
    syntax = _SUFFIXES.get(file.suffix.lower())
    if syntax is None:
        raise LwirLoadError(
            f"{file}: unknown workflow file type {file.suffix!r}; use .json, .yaml or .yml"
        )
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_DOCUMENT_BYTES + 1)
    except OSError as exc:
        raise LwirLoadError(f"{file}: cannot read workflow file: {exc.strerror or exc}") from exc
    return parse_workflow(data, source=str(file), format=syntax)


def parse_workflow(
    document: str | bytes | Mapping[str, object],
    *,
    source: str | None = None,
    format: Format | None = None,
) -> Workflow:
    """Validate a workflow given as JSON/YAML text or as an already-parsed mapping.

    ``source`` names the document in error messages (a file name). ``format`` picks
    the parser for text; by default the suffix of ``source`` decides, else text that
    starts with ``{`` is JSON and anything else YAML.
    """
    data: object
    if isinstance(document, str | bytes):
        data = read_document(document, source=source, format=format)
    else:
        data = document
        _check_depth(data, source)
    if not isinstance(data, Mapping):
        raise LwirValidationError(
            [Problem("document", f"a workflow is an object (mapping), not {_json_kind(data)}")],
            source=source,
        )
    leading: list[Problem] = []
    if "lwir" not in data:
        leading.append(Problem("lwir", "missing; a workflow document starts with lwir: 1"))
    try:
        workflow = Workflow.model_validate(data)
    except ValidationError as exc:
        problems = leading + problems_from_validation_error(exc)
        raise LwirValidationError(problems, source=source) from None
    except LwirValidationError as exc:
        raise LwirValidationError(leading + list(exc.problems), source=source) from None
    if leading:
        raise LwirValidationError(leading, source=source)
    return workflow


def read_document(
    text: str | bytes, *, source: str | None = None, format: Format | None = None
) -> JsonValue:
    """Parse JSON or YAML text into plain JSON under the limits of this module."""
    if len(text) > MAX_DOCUMENT_BYTES:
        _too_large(source, len(text))
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise LwirSyntaxError(
                f"not UTF-8 text (byte {exc.start} is invalid)", source=source
            ) from None
    encoded_size = len(text.encode("utf-8", "surrogatepass"))
    if encoded_size > MAX_DOCUMENT_BYTES:
        _too_large(source, encoded_size)
    if format is None and source is not None:
        format = _SUFFIXES.get(Path(source).suffix.lower())
    if format is None:
        format = "json" if text.lstrip().startswith("{") else "yaml"
    if format == "json":
        data = _read_json(text, source)
    else:
        # PyYAML (~10 ms to import) is loaded only when a YAML document is read: a
        # resumed run reads its pinned workflow as JSON.
        from little_workflow.lwir._yaml import read_yaml

        data = read_yaml(text, source)
    _check_depth(data, source)
    return data


def _too_large(source: str | None, size: int) -> NoReturn:
    raise LwirTooLargeError(
        f"{source or 'workflow document'} is {size} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes"
    )


# --- JSON ----------------------------------------------------------------------------


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _pairs(pairs: list[tuple[str, JsonValue]]) -> dict[str, JsonValue]:
    result: dict[str, JsonValue] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKeyError(key)
        result[key] = value
    return result


def _refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _read_json(text: str, source: str | None) -> JsonValue:
    try:
        data: JsonValue = json.loads(
            text, object_pairs_hook=_pairs, parse_constant=_refuse_constant
        )
    except json.JSONDecodeError as exc:
        raise LwirSyntaxError(
            f"malformed JSON: {exc.msg}", source=source, line=exc.lineno, column=exc.colno
        ) from None
    except _DuplicateKeyError as exc:
        raise LwirSyntaxError(f"malformed JSON: duplicate key {exc.key!r}", source=source) from None
    except RecursionError:
        raise LwirTooLargeError(
            f"{source or 'workflow document'} is nested more than {MAX_NESTING_DEPTH} deep"
        ) from None
    except ValueError as exc:  # NaN/Infinity, integers past Python's digit limit
        raise LwirSyntaxError(f"malformed JSON: {exc}", source=source) from None
    return data


# --- shared --------------------------------------------------------------------------


def _check_depth(data: object, source: str | None) -> None:
    """Refuse nesting deeper than ``MAX_NESTING_DEPTH`` and strings that are not text.

    Both formats decode ``"\\ud800"`` to a lone surrogate, which no UTF-8 encoder
    accepts: left in, it would fail later, untyped, when the definition is hashed.
    """
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_NESTING_DEPTH:
            raise LwirTooLargeError(
                f"{source or 'workflow document'} is nested more than {MAX_NESTING_DEPTH} deep"
            )
        if isinstance(item, str):
            if not item.isascii() and not _is_text(item):
                _lone_surrogate(data, source)
        elif isinstance(item, Mapping):
            stack.extend((key, depth) for key in item)
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _lone_surrogate(data: object, source: str | None) -> NoReturn:
    """Raise ``LwirSyntaxError`` naming the first string (or key) with a lone surrogate."""
    stack: list[tuple[object, str]] = [(data, "")]
    where = "a string"
    while stack:
        item, place = stack.pop()
        if isinstance(item, str):
            if not _is_text(item):
                where = place or "the document"
                break
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if isinstance(key, str) and not _is_text(key):
                    where = f"a key of {place or 'the document'}"
                    stack.clear()
                    break
                stack.append((child, f"{place}.{key}" if place else str(key)))
        elif isinstance(item, list | tuple):
            stack.extend((child, f"{place}[{index}]") for index, child in enumerate(item))
    raise LwirSyntaxError(
        f"{where} holds a lone surrogate, an escape such as \\ud800 that is not valid "
        "Unicode text (in YAML, write a character beyond U+FFFF as \\U0001F600, not as a "
        "pair of \\u escapes)",
        source=source,
    )


def _json_kind(value: object) -> str:
    if value is None:
        return "null (is the document empty?)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"
