"""A small JSON Schema validator: enough for a workflow's ``input:`` and for LWIR itself.

The project depends on no JSON Schema library (the core keeps its dependencies few), and
both uses need only the keywords below, so this is one module instead of a dependency.
It follows draft 2020-12 for what it implements:

* types: ``type`` (a name or a list; ``integer`` also takes ``1.0``), ``enum``, ``const``;
* objects: ``properties``, ``required``, ``additionalProperties``, ``patternProperties``,
  ``propertyNames``, ``minProperties``, ``maxProperties``, ``dependentRequired``;
* arrays: ``items``, ``prefixItems``, ``minItems``, ``maxItems``, ``uniqueItems``,
  ``contains``;
* strings: ``minLength``, ``maxLength``, ``pattern`` (Python's ``re``, searched);
* numbers: ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
  ``multipleOf``;
* combinations: ``allOf``, ``anyOf``, ``oneOf``, ``not``, ``if``/``then``/``else``;
* ``$ref`` to a place in the same document (``#``, ``#/$defs/Step``).

Annotations (``title``, ``description``, ``default``, ``examples``, ``format``, ...) are
read by people and editors and never checked. The keywords in ``UNSUPPORTED`` would
change what is accepted and are not implemented: ``schema_problems`` refuses a schema
that uses one, rather than accept input the author meant to refuse. Keywords this
module does not know at all are ignored, as the specification says.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from typing import TypeGuard

from little_workflow.errors import Problem

__all__ = ["UNSUPPORTED", "field_path", "schema_problems", "validate"]

#: Assertion keywords of draft 2020-12 that this validator does not implement.
UNSUPPORTED = frozenset(
    {
        "$dynamicRef",
        "$recursiveRef",
        "unevaluatedItems",
        "unevaluatedProperties",
        "dependentSchemas",
        "dependencies",
        "contentSchema",
        "minContains",
        "maxContains",
    }
)
_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMAS = (
    "additionalProperties",
    "propertyNames",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
)
_COUNTS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
)
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
# A $ref chain that consumes nothing (``{"$ref": "#"}`` at the root) would never end.
_MAX_DEPTH = 256
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")


def field_path(base: str, key: str | int) -> str:
    """``base`` followed by an object key or a list index, spelled as templates read it.

    ``input`` + ``query`` is ``input.query``, + ``"a b"`` is ``input["a b"]``, + ``0`` is
    ``input[0]``: the same text a ``${input...}`` reference writes.
    """
    if isinstance(key, int):
        return f"{base}[{key}]"
    if _NAME_RE.fullmatch(key):
        return f"{base}.{key}"
    return f"{base}[{json.dumps(key, ensure_ascii=False)}]"


# --- the schema itself -----------------------------------------------------------------


def schema_problems(schema: object, where: str = "input") -> list[Problem]:
    """What is wrong with ``schema`` as a schema (each at its place, from ``where``).

    A keyword of the wrong shape (``type: strng``, ``required: name``), a ``pattern``
    that does not compile, a ``$ref`` that leads nowhere, or a keyword of ``UNSUPPORTED``.
    """
    problems: list[Problem] = []
    _check_schema(schema, where, schema, problems)
    return problems


# One check per keyword, in one place: split up, the list of what is checked is harder to read.
def _check_schema(  # noqa: PLR0912
    schema: object, where: str, root: object, problems: list[Problem]
) -> None:
    if isinstance(schema, bool):
        return
    if not isinstance(schema, Mapping):
        problems.append(Problem(where, "a schema must be an object (or true or false)"))
        return
    for keyword in sorted(UNSUPPORTED & schema.keys()):
        problems.append(
            Problem(
                f"{where}.{keyword}",
                "not supported by little-workflow's input check; express it with the "
                "keywords docs/lwir.md lists, or check it in the first step",
            )
        )
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        bad = [kind for kind in kinds if not (isinstance(kind, str) and kind in _TYPES)]
        if bad or not kinds:
            problems.append(
                Problem(
                    f"{where}.type",
                    f"unknown type {json.dumps(bad[0]) if bad else '[]'}; use one of "
                    + ", ".join(sorted(_TYPES)),
                )
            )
    for keyword in ("required",):
        value = schema.get(keyword)
        if value is not None and not (
            isinstance(value, list) and all(isinstance(item, str) for item in value)
        ):
            problems.append(Problem(f"{where}.{keyword}", "must be a list of property names"))
    if "enum" in schema and not isinstance(schema["enum"], list):
        problems.append(Problem(f"{where}.enum", "must be a list of values"))
    for keyword in _COUNTS:
        value = schema.get(keyword)
        if value is not None and not (
            isinstance(value, int) and not isinstance(value, bool) and value >= 0
        ):
            problems.append(Problem(f"{where}.{keyword}", "must be a whole number, 0 or more"))
    for keyword in _NUMBERS:
        value = schema.get(keyword)
        if value is not None and not _is_number(value):
            problems.append(Problem(f"{where}.{keyword}", "must be a number"))
    if _is_number(schema.get("multipleOf")) and schema["multipleOf"] <= 0:
        problems.append(Problem(f"{where}.multipleOf", "must be above 0"))
    if "pattern" in schema:
        _check_pattern(schema["pattern"], f"{where}.pattern", problems)
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str) or _resolve(root, ref) is None:
            problems.append(
                Problem(
                    f"{where}.$ref",
                    f"{json.dumps(ref)} leads nowhere: give '#' or a JSON pointer into this "
                    "schema ('#/$defs/Name')",
                )
            )
    for keyword, child, place in _children(schema, where):
        if keyword == "patternProperties":
            _check_pattern(child, place, problems)
        _check_schema(schema_value(schema, keyword, child), place, root, problems)


def schema_value(schema: Mapping[str, object], keyword: str, child: object) -> object:
    """The subschema ``child`` names under ``keyword`` (a key, an index or ``None``)."""
    value = schema[keyword]
    if child is None:
        return value
    if isinstance(child, int):
        assert isinstance(value, list)
        return value[child]
    assert isinstance(value, Mapping)
    return value[child]


def _children(schema: Mapping[str, object], where: str) -> Iterator[tuple[str, object, str]]:
    for keyword in _SUBSCHEMAS:
        if keyword in schema:
            yield keyword, None, f"{where}.{keyword}"
    for keyword in _SCHEMA_MAPS:
        value = schema.get(keyword)
        if isinstance(value, Mapping):
            for key in value:
                yield keyword, key, f"{where}.{keyword}{field_path('', str(key))}"
    for keyword in _SCHEMA_LISTS:
        value = schema.get(keyword)
        if isinstance(value, list):
            for index in range(len(value)):
                yield keyword, index, f"{where}.{keyword}[{index}]"


def _check_pattern(pattern: object, where: str, problems: list[Problem]) -> None:
    if not isinstance(pattern, str):
        problems.append(Problem(where, "a pattern must be a string"))
        return
    try:
        _compiled(pattern)
    except re.error as exc:
        problems.append(
            Problem(where, f"the pattern {json.dumps(pattern)} does not compile: {exc}")
        )


@lru_cache(maxsize=256)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _resolve(root: object, ref: str) -> object | None:
    """The subschema ``ref`` points at in ``root`` (``#`` or ``#/a/b``); ``None`` if none."""
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        return None
    current: object = root
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return None
    return current


# --- instances -------------------------------------------------------------------------


def validate(instance: object, schema: object, where: str = "input") -> list[Problem]:
    """Every way ``instance`` (plain JSON) fails ``schema``, each at its field.

    Places start at ``where`` and follow the instance (``input.items[0].id``). The
    schema is assumed to pass ``schema_problems``; a ``$ref`` that leads nowhere there
    is reported here too, not raised.
    """
    problems: list[Problem] = []
    _Validator(schema).check(instance, schema, where, problems, 0)
    return problems


class _Validator:
    def __init__(self, root: object) -> None:
        self.root = root

    def check(
        self,
        instance: object,
        schema: object,
        where: str,
        problems: list[Problem],
        depth: int,
    ) -> None:
        if schema is True or (isinstance(schema, Mapping) and not schema):
            return
        if schema is False:
            problems.append(Problem(where, "no value is allowed here"))
            return
        if not isinstance(schema, Mapping):
            return
        if depth > _MAX_DEPTH:
            problems.append(Problem(where, "the schema's $refs nest too deep to check"))
            return
        if "$ref" in schema:
            target = _resolve(self.root, str(schema["$ref"]))
            if target is None:
                problems.append(
                    Problem(where, f"the schema's $ref {schema['$ref']!r} leads nowhere")
                )
            else:
                self.check(instance, target, where, problems, depth + 1)
        before = len(problems)
        self._type(instance, schema, where, problems)
        if len(problems) > before:
            # A value of the wrong type fails every other keyword too: say it once.
            return
        self._values(instance, schema, where, problems)
        if isinstance(instance, Mapping):
            self._object(instance, schema, where, problems, depth)
        elif isinstance(instance, list):
            self._array(instance, schema, where, problems, depth)
        elif isinstance(instance, str):
            self._string(instance, schema, where, problems)
        elif _is_number(instance):
            self._number(instance, schema, where, problems)
        self._combinations(instance, schema, where, problems, depth)

    def passes(self, instance: object, schema: object, where: str, depth: int) -> bool:
        found: list[Problem] = []
        self.check(instance, schema, where, found, depth + 1)
        return not found

    def _type(
        self, instance: object, schema: Mapping[str, object], where: str, problems: list[Problem]
    ) -> None:
        if "type" not in schema:
            return
        wanted = schema["type"]
        kinds = wanted if isinstance(wanted, list) else [wanted]
        if not any(_has_type(instance, str(kind)) for kind in kinds):
            problems.append(
                Problem(
                    where,
                    f"must be {' or '.join(_article(str(k)) for k in kinds)}, not "
                    f"{_describe(instance)}",
                )
            )

    def _values(
        self, instance: object, schema: Mapping[str, object], where: str, problems: list[Problem]
    ) -> None:
        if "const" in schema and not _equal(instance, schema["const"]):
            problems.append(Problem(where, f"must be {_shown(schema['const'])}"))
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_equal(instance, item) for item in enum):
            options = ", ".join(_shown(item) for item in enum[:10])
            problems.append(Problem(where, f"must be one of {options}, not {_shown(instance)}"))

    # One block per object keyword, as the module docstring lists them.
    def _object(  # noqa: PLR0912
        self,
        instance: Mapping[object, object],
        schema: Mapping[str, object],
        where: str,
        problems: list[Problem],
        depth: int,
    ) -> None:
        required = schema.get("required")
        if isinstance(required, list):
            for name in required:
                if isinstance(name, str) and name not in instance:
                    problems.append(Problem(field_path(where, name), "required, and missing"))
        dependent = schema.get("dependentRequired")
        if isinstance(dependent, Mapping):
            for name, needs in dependent.items():
                if name in instance and isinstance(needs, list):
                    for other in needs:
                        if isinstance(other, str) and other not in instance:
                            problems.append(
                                Problem(
                                    field_path(where, other), f"required with {name!r}, and missing"
                                )
                            )
        count = len(instance)
        if _count(schema, "minProperties", 0) > count:
            problems.append(
                Problem(where, f"needs at least {schema['minProperties']} field(s), has {count}")
            )
        if count > _count(schema, "maxProperties", math.inf):
            problems.append(
                Problem(where, f"allows at most {schema['maxProperties']} field(s), has {count}")
            )
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        patterns = schema.get("patternProperties")
        patterns = patterns if isinstance(patterns, Mapping) else {}
        extra = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        for key, value in instance.items():
            name = str(key)
            place = field_path(where, name)
            if names is not None:
                self.check(name, names, f"{place} (its name)", problems, depth + 1)
            matched = False
            if name in properties:
                matched = True
                self.check(value, properties[name], place, problems, depth + 1)
            for pattern, subschema in patterns.items():
                if isinstance(pattern, str) and _compiled(pattern).search(name):
                    matched = True
                    self.check(value, subschema, place, problems, depth + 1)
            if matched:
                continue
            if extra is False:
                known = ", ".join(str(k) for k in properties) or "none"
                problems.append(Problem(place, f"is not a field of this object (fields: {known})"))
            else:
                self.check(value, extra, place, problems, depth + 1)

    def _array(
        self,
        instance: list[object],
        schema: Mapping[str, object],
        where: str,
        problems: list[Problem],
        depth: int,
    ) -> None:
        count = len(instance)
        if _count(schema, "minItems", 0) > count:
            problems.append(
                Problem(where, f"needs at least {schema['minItems']} item(s), has {count}")
            )
        if count > _count(schema, "maxItems", math.inf):
            problems.append(
                Problem(where, f"allows at most {schema['maxItems']} item(s), has {count}")
            )
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        for index, (value, subschema) in enumerate(zip(instance, prefix, strict=False)):
            self.check(value, subschema, field_path(where, index), problems, depth + 1)
        if "items" in schema:
            for index in range(len(prefix), count):
                self.check(
                    instance[index], schema["items"], field_path(where, index), problems, depth + 1
                )
        if schema.get("uniqueItems") is True:
            seen: set[str] = set()
            for index, value in enumerate(instance):
                key = _canonical(value)
                if key in seen:
                    problems.append(Problem(field_path(where, index), "repeats an earlier item"))
                seen.add(key)
        if "contains" in schema and not any(
            self.passes(value, schema["contains"], where, depth) for value in instance
        ):
            problems.append(Problem(where, "no item matches what 'contains' asks for"))

    def _string(
        self, instance: str, schema: Mapping[str, object], where: str, problems: list[Problem]
    ) -> None:
        # Lengths count code points, as JSON Schema does.
        length = len(instance)
        if _count(schema, "minLength", 0) > length:
            problems.append(
                Problem(where, f"needs at least {schema['minLength']} character(s), has {length}")
            )
        if length > _count(schema, "maxLength", math.inf):
            problems.append(
                Problem(where, f"allows at most {schema['maxLength']} character(s), has {length}")
            )
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not _compiled(pattern).search(instance):
            problems.append(Problem(where, f"does not match the pattern {json.dumps(pattern)}"))

    def _number(
        self,
        instance: float,
        schema: Mapping[str, object],
        where: str,
        problems: list[Problem],
    ) -> None:
        bounds = (
            ("minimum", 1, True, "at least"),
            ("maximum", -1, True, "at most"),
            ("exclusiveMinimum", 1, False, "above"),
            ("exclusiveMaximum", -1, False, "below"),
        )
        for keyword, sign, inclusive, words in bounds:
            bound = schema.get(keyword)
            if not _is_number(bound):
                continue
            difference = sign * (instance - bound)
            if difference < 0 or (difference == 0 and not inclusive):
                problems.append(Problem(where, f"must be {words} {bound}, not {instance}"))
        step = schema.get("multipleOf")
        if _is_number(step) and step > 0 and not _multiple(instance, step):
            problems.append(Problem(where, f"must be a multiple of {step}, not {instance}"))

    def _combinations(
        self,
        instance: object,
        schema: Mapping[str, object],
        where: str,
        problems: list[Problem],
        depth: int,
    ) -> None:
        for subschema in _list(schema.get("allOf")):
            self.check(instance, subschema, where, problems, depth + 1)
        any_of = _list(schema.get("anyOf"))
        if any_of and not any(self.passes(instance, s, where, depth) for s in any_of):
            problems.append(self._none_matched(instance, any_of, where, depth, "anyOf"))
        one_of = _list(schema.get("oneOf"))
        tagged = _tagged(instance, schema.get("discriminator"))
        if one_of and tagged is not None:
            # OpenAPI's discriminator (pydantic writes one for `kind`): the tag picks the
            # one alternative, so its problems are the ones to tell.
            name, value, mapping = tagged
            if value in mapping:
                self.check(instance, {"$ref": mapping[value]}, where, problems, depth + 1)
            else:
                tags = ", ".join(json.dumps(tag) for tag in mapping)
                problems.append(Problem(field_path(where, name), f"must be one of {tags}"))
        elif one_of:
            matching = [i for i, s in enumerate(one_of) if self.passes(instance, s, where, depth)]
            if not matching:
                problems.append(self._none_matched(instance, one_of, where, depth, "oneOf"))
            elif len(matching) > 1:
                problems.append(
                    Problem(where, f"matches {len(matching)} of the oneOf alternatives, not one")
                )
        if "not" in schema and self.passes(instance, schema["not"], where, depth):
            problems.append(Problem(where, "matches what 'not' forbids"))
        if "if" in schema:
            branch = "then" if self.passes(instance, schema["if"], where, depth) else "else"
            if branch in schema:
                self.check(instance, schema[branch], where, problems, depth + 1)

    def _none_matched(
        self, instance: object, options: Sequence[object], where: str, depth: int, keyword: str
    ) -> Problem:
        # The alternative that got furthest (fewest problems) says the most useful thing.
        best: list[Problem] | None = None
        for option in options:
            found: list[Problem] = []
            self.check(instance, option, where, found, depth + 1)
            if best is None or len(found) < len(best):
                best = found
        if best and len(best) == 1:
            return best[0]
        return Problem(where, f"matches none of the {len(options)} {keyword} alternatives")


def _tagged(instance: object, discriminator: object) -> tuple[str, object, dict[str, str]] | None:
    """``(property, its value, tag → $ref)`` when ``discriminator`` applies to ``instance``."""
    if not (isinstance(discriminator, Mapping) and isinstance(instance, Mapping)):
        return None
    name, mapping = discriminator.get("propertyName"), discriminator.get("mapping")
    if not (isinstance(name, str) and isinstance(mapping, Mapping) and name in instance):
        return None
    return name, instance[name], {str(k): str(v) for k, v in mapping.items()}


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _count(schema: Mapping[str, object], keyword: str, default: float) -> float:
    value = schema.get(keyword)
    return float(value) if _is_number(value) else default


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _has_type(instance: object, kind: str) -> bool:
    if kind == "integer":
        return _is_number(instance) and float(instance).is_integer()
    return _describe(instance) == _describe_kind.get(kind) or (
        kind == "number" and _is_number(instance)
    )


def _multiple(value: float, step: float) -> bool:
    try:
        return Decimal(str(value)) % Decimal(str(step)) == 0
    except InvalidOperation:
        return False


def _canonical(value: object) -> str:
    """One text per JSON value, equal for values JSON Schema calls equal (``1`` and ``1.0``)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, Mapping):
        items = sorted((str(k), _canonical(v)) for k, v in value.items())
        return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_canonical(v) for v in value) + "]"
    return json.dumps(value)


def _equal(left: object, right: object) -> bool:
    if isinstance(left, bool) != isinstance(right, bool):
        return False
    return _canonical(left) == _canonical(right)


def _article(kind: str) -> str:
    return f"an {kind}" if kind[:1] in "aeiou" else f"a {kind}"


def _describe(value: object) -> str:
    """The JSON type of ``value``, with its article (``an integer``, ``null``)."""
    if value is None:
        return "null"
    for kinds, text in _DESCRIPTIONS:
        if isinstance(value, kinds):
            return text
    return "an object"


# bool before int: in Python a bool is an int, in JSON it is not a number.
_DESCRIPTIONS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    ((list, tuple), "an array"),
    (Mapping, "an object"),
)
_describe_kind = {
    "null": "null",
    "boolean": "a boolean",
    "string": "a string",
    "array": "an array",
    "object": "an object",
}


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:57] + "..."
