"""The ``${...}`` template language: how steps refer to the input, to each other and to items.

Rejected designs: ``eval`` or a Python expression sandbox (a workflow document may be
written by a model, so it is hostile input, and sandboxes leak); Jinja (attribute access
on Python objects, loops and filters: far more than a reference needs); JSONPath (a
second syntax for users to learn, and no interpolation). What remains is the smallest
thing that works:

* A string that is exactly one ``${expr}`` evaluates to the referenced JSON value, of
  any type. A string with text around it, or several ``${...}``, interpolates: strings
  go in as they are, other values as compact JSON. ``$${`` is a literal ``${``.
* ``expr`` is a root (``input``, ``steps``, ``item``, ``run``) followed by accessors:
  ``.name`` (object key; name is ``[A-Za-z0-9_-]+``), ``["any key"]`` (object key as a
  JSON string) and ``[3]`` / ``[-1]`` (list index). ``steps.<id>`` must be followed by
  ``.output`` (then any accessors), ``.route`` (nothing after) or ``.error`` (a step
  with ``onError``: ``{code, message, path}`` or null); ``run`` only by ``.id``.
* Evaluation walks plain JSON (dicts, lists) in a scope
  ``{"input": ..., "steps": {id: {"output": ..., "route": ...}}, "item": ..., "run": {"id": ...}}``.
  It never touches attributes: ``${input.__class__}`` is a key lookup that fails.

Templates are parsed once (parsing is cached) into a small AST of frozen dataclasses;
validation reports syntax errors and unknown steps before a run starts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, TypeAlias, cast

from little_workflow.codec import JsonValue, dumps
from little_workflow.errors import InvalidValueError, TemplateError, TemplateSyntaxError

__all__ = [
    "ROOTS",
    "Index",
    "Key",
    "Reference",
    "Template",
    "Text",
    "iter_template_strings",
    "parse_template",
    "referenced_step_ids",
    "render",
]

Root: TypeAlias = Literal["input", "steps", "item", "run"]
#: The names a reference may start with.
ROOTS: frozenset[str] = frozenset({"input", "steps", "item", "run"})

_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")
_INDEX_RE = re.compile(r"-?[0-9]+")
_STEP_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
# Index digits beyond this are certainly out of range, and int() of thousands of digits
# is slow and raises past Python's digit limit.
_MAX_INDEX_DIGITS = 18
_SHOWN_KEYS = 10


@dataclass(frozen=True, slots=True)
class Key:
    """An object-key accessor: ``.name`` or ``["any key"]``."""

    name: str

    def __str__(self) -> str:
        if _NAME_RE.fullmatch(self.name):
            return f".{self.name}"
        return f"[{json.dumps(self.name, ensure_ascii=False)}]"


@dataclass(frozen=True, slots=True)
class Index:
    """A list-index accessor: ``[0]``; negative counts from the end (``[-1]`` is the last)."""

    index: int

    def __str__(self) -> str:
        return f"[{self.index}]"


Accessor: TypeAlias = Key | Index


@dataclass(frozen=True, slots=True)
class Reference:
    """One ``${...}``: a root and its accessors."""

    root: Root
    accessors: tuple[Accessor, ...] = ()

    @property
    def expression(self) -> str:
        """The expression in its canonical spelling (``steps.fetch.output.items[0]``)."""
        return self.root + "".join(str(accessor) for accessor in self.accessors)

    @property
    def step_id(self) -> str | None:
        """The step a ``${steps.<id>...}`` reference names; ``None`` for other roots."""
        if self.root == "steps" and self.accessors and isinstance(self.accessors[0], Key):
            return self.accessors[0].name
        return None

    @property
    def step_field(self) -> str | None:
        """``output`` or ``route`` for a ``steps`` reference, else ``None``."""
        if self.root == "steps" and len(self.accessors) > 1:
            second = self.accessors[1]
            return second.name if isinstance(second, Key) else None
        return None

    def __str__(self) -> str:
        return "${" + self.expression + "}"

    def evaluate(self, scope: Mapping[str, object], *, where: str | None = None) -> JsonValue:
        """The referenced value in ``scope``; ``TemplateError`` if it is not there."""
        # The common case, fast: plain dicts and lists all the way, every accessor found.
        # Anything else (a miss, another kind of container) takes the walk below, which
        # decides the same way and builds the message naming what was not there.
        try:
            current: object = scope[self.root]
            for accessor in self.accessors:
                kind = type(current)
                if type(accessor) is Key and kind is dict:
                    current = current[accessor.name]  # type: ignore[index]
                elif type(accessor) is Index and (kind is list or kind is tuple):
                    index = accessor.index
                    if not -len(current) <= index < len(current):  # type: ignore[arg-type]
                        break
                    current = current[index]  # type: ignore[index]
                else:
                    break
            else:
                return cast(JsonValue, current)
        except KeyError:
            pass
        return self._walk(scope, where)

    def _walk(self, scope: Mapping[str, object], where: str | None) -> JsonValue:
        if self.root not in scope:
            raise TemplateError(_missing_root_message(self), reference=str(self), where=where)
        current: object = scope[self.root]
        shown: str = self.root
        for position, accessor in enumerate(self.accessors):
            current = _step(self, current, accessor, shown=shown, position=position, where=where)
            shown += str(accessor)
        # The scope is plain JSON by contract; what is returned is exactly what was there.
        return cast(JsonValue, current)


@dataclass(frozen=True, slots=True)
class Text:
    """Literal text between references (escapes already resolved)."""

    text: str


Part: TypeAlias = Text | Reference


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template string: literal text and references, in order."""

    source: str
    parts: tuple[Part, ...]

    @property
    def is_single_reference(self) -> bool:
        """Whether the string is exactly one ``${...}``, which evaluates to any JSON type."""
        return len(self.parts) == 1 and isinstance(self.parts[0], Reference)

    @property
    def references(self) -> tuple[Reference, ...]:
        """The references, in order of appearance."""
        return tuple(part for part in self.parts if isinstance(part, Reference))

    def evaluate(self, scope: Mapping[str, object], *, where: str | None = None) -> JsonValue:
        """Evaluate against ``scope``: the value itself for a single reference, else a string."""
        if self.is_single_reference:
            part = self.parts[0]
            assert isinstance(part, Reference)
            return part.evaluate(scope, where=where)
        pieces: list[str] = []
        for part in self.parts:
            if isinstance(part, Text):
                pieces.append(part.text)
                continue
            value = part.evaluate(scope, where=where)
            if isinstance(value, str):
                pieces.append(value)
                continue
            try:
                pieces.append(dumps(value))
            except InvalidValueError as exc:
                raise TemplateError(
                    f"{part} cannot be interpolated into text: {exc.message}",
                    reference=str(part),
                    where=where,
                ) from exc
        return "".join(pieces)


def parse_template(text: str) -> Template:
    """Parse a template string; ``TemplateSyntaxError`` says what is wrong and where.

    Results are cached: a workflow's templates are parsed at validation and reused at
    every evaluation.
    """
    if not isinstance(text, str):
        raise TemplateSyntaxError(
            f"a template must be a string, not {type(text).__name__}", template="", position=0
        )
    return _parse_cached(text)


@lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Template:
    return _Parser(text).parse()


def iter_template_strings(value: object, where: str) -> Iterator[tuple[str, str]]:
    """Every string inside a JSON value that could hold a template, with its place.

    ``where`` is the value's own place (``steps[0].with``); places below it use the
    document's spelling (``steps[0].with.query``, ``steps[0].with.items[2]``). Object
    keys are never templates.
    """
    if isinstance(value, str):
        if "$" in value:
            yield where, value
    elif isinstance(value, Mapping):
        for key, child in value.items():
            yield from iter_template_strings(child, where + str(Key(str(key))))
    elif isinstance(value, list | tuple):
        for index, child in enumerate(value):
            yield from iter_template_strings(child, f"{where}[{index}]")


def referenced_step_ids(value: object) -> frozenset[str]:
    """The ids of every step that templates anywhere inside ``value`` refer to.

    For dependency analysis; ``TemplateSyntaxError`` if a string is malformed.
    """
    found: set[str] = set()
    for _where, text in iter_template_strings(value, "value"):
        for reference in parse_template(text).references:
            if reference.step_id is not None:
                found.add(reference.step_id)
    return frozenset(found)


class _Unusual(Exception):
    """A value the fast render leaves to the placed one (not plain JSON built-ins)."""


def render(value: object, scope: Mapping[str, object], *, where: str = "value") -> JsonValue:
    """Evaluate every template inside a JSON value (dicts and lists, recursively).

    Strings without ``$`` and non-string scalars come back unchanged; object keys are
    literal. ``where`` names the value's place in the document for error messages.
    """
    # A step's arguments are rendered at every call: without the place of every value
    # (a string per key, only ever read by an error). A failure renders again with
    # places, which raises the same error, naming where; rendering has no side effect.
    try:
        return _render_fast(value, scope)
    except (TemplateError, _Unusual):
        pass
    return _render_placed(value, scope, where)


def _render_fast(value: object, scope: Mapping[str, object]) -> JsonValue:
    kind = type(value)
    if kind is str:
        if "$" not in value:  # type: ignore[operator]
            return value  # type: ignore[return-value]
        return _parse_cached(value).evaluate(scope)
    if kind is dict:
        return {
            key if type(key) is str else str(key): _render_fast(child, scope)
            for key, child in value.items()  # type: ignore[attr-defined]
        }
    if kind is list or kind is tuple:
        return [_render_fast(child, scope) for child in value]  # type: ignore[attr-defined]
    if value is None or kind is bool or kind is int or kind is float:
        return value  # type: ignore[return-value]
    raise _Unusual


def _render_placed(value: object, scope: Mapping[str, object], where: str) -> JsonValue:
    if isinstance(value, str):
        if "$" not in value:
            return value
        try:
            template = parse_template(value)
        except TemplateSyntaxError as exc:
            raise TemplateSyntaxError(
                exc.bare_message, template=exc.template, position=exc.position, where=where
            ) from None
        return template.evaluate(scope, where=where)
    if isinstance(value, Mapping):
        return {
            str(key): _render_placed(child, scope, where + str(Key(str(key))))
            for key, child in value.items()
        }
    if isinstance(value, list | tuple):
        return [_render_placed(child, scope, f"{where}[{i}]") for i, child in enumerate(value)]
    if value is None or isinstance(value, bool | int | float):
        return value
    raise TemplateError(f"is a {type(value).__name__}, which is not JSON", where=where)


# --- evaluation ----------------------------------------------------------------------


def _missing_root_message(reference: Reference) -> str:
    if reference.root == "item":
        return f"{reference}: there is no item here; ${{item}} exists only inside a map body"
    return f"{reference}: the scope has no {reference.root!r}"


def _step(
    reference: Reference,
    current: object,
    accessor: Accessor,
    *,
    shown: str,
    position: int,
    where: str | None,
) -> object:
    text = str(reference)
    if isinstance(accessor, Key):
        if not isinstance(current, Mapping):
            raise TemplateError(
                f"{text}: {shown} is {_describe(current)}, not an object, so it has no key "
                f"{accessor.name!r}",
                reference=text,
                where=where,
            )
        if accessor.name not in current:
            raise TemplateError(
                _missing_key_message(reference, current, accessor.name, shown, position),
                reference=text,
                where=where,
            )
        return current[accessor.name]
    if not isinstance(current, list | tuple):
        raise TemplateError(
            f"{text}: {shown} is {_describe(current)}, not a list, so it has no index "
            f"[{accessor.index}]",
            reference=text,
            where=where,
        )
    if not -len(current) <= accessor.index < len(current):
        raise TemplateError(
            f"{text}: index [{accessor.index}] is out of range; {shown} has "
            f"{len(current)} item{'s' if len(current) != 1 else ''}",
            reference=text,
            where=where,
        )
    return current[accessor.index]


def _missing_key_message(
    reference: Reference, current: Mapping[object, object], key: str, shown: str, position: int
) -> str:
    text = str(reference)
    if reference.root == "steps" and position == 0:
        return f"{text}: step {key!r} has not completed yet, so it has no output"
    if reference.root == "steps" and position == 1 and key == "route":
        return f"{text}: step {reference.step_id!r} recorded no route (it is not a decision)"
    keys = sorted(str(k) for k in current)
    listed = ", ".join(keys[:_SHOWN_KEYS]) + (", ..." if len(keys) > _SHOWN_KEYS else "")
    has = f"its keys are: {listed}" if keys else "it is empty"
    return f"{text}: {shown} has no key {key!r} ({has})"


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


# --- parsing -------------------------------------------------------------------------


class _Parser:
    """A hand-written scanner: the grammar is tiny and errors can point at an offset."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str, position: int | None = None) -> TemplateSyntaxError:
        at = self.pos if position is None else position
        shown = self.text if len(self.text) <= 80 else self.text[:77] + "..."
        return TemplateSyntaxError(
            f"template {json.dumps(shown, ensure_ascii=False)}: {message} (at offset {at})",
            template=self.text,
            position=at,
        )

    def parse(self) -> Template:
        parts: list[Part] = []
        buffer: list[str] = []
        text = self.text
        while self.pos < len(text):
            start = text.find("$", self.pos)
            if start < 0:
                buffer.append(text[self.pos :])
                break
            buffer.append(text[self.pos : start])
            if text.startswith("$${", start):
                buffer.append("${")
                self.pos = start + 3
            elif text.startswith("${", start):
                if "".join(buffer):
                    parts.append(Text("".join(buffer)))
                buffer = []
                self.pos = start + 2
                parts.append(self.reference(start))
            else:
                buffer.append("$")
                self.pos = start + 1
        if "".join(buffer):
            parts.append(Text("".join(buffer)))
        return Template(source=text, parts=tuple(parts))

    def skip_spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t":
            self.pos += 1

    def reference(self, opened_at: int) -> Reference:
        self.skip_spaces()
        root_at = self.pos
        match = _NAME_RE.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected input, steps, item or run after '${'")
        root = match.group()
        if root not in ROOTS:
            raise self.fail(
                f"unknown root {root!r}; a reference starts with input, steps, item or run",
                root_at,
            )
        self.pos = match.end()
        accessors: list[Accessor] = []
        while True:
            self.skip_spaces()
            if self.pos >= len(self.text):
                raise self.fail("'${' is never closed with '}'", opened_at)
            char = self.text[self.pos]
            if char == "}":
                self.pos += 1
                break
            if char == ".":
                self.pos += 1
                name = _NAME_RE.match(self.text, self.pos)
                if name is None:
                    raise self.fail("expected a name after '.'")
                accessors.append(Key(name.group()))
                self.pos = name.end()
            elif char == "[":
                accessors.append(self.bracket())
            else:
                raise self.fail(f"unexpected {char!r}; expected '.name', '[...]' or '}}'")
        reference = Reference(root=cast(Root, root), accessors=tuple(accessors))
        self.check_shape(reference, root_at)
        return reference

    def bracket(self) -> Accessor:
        start = self.pos
        self.pos += 1
        if self.text.startswith('"', self.pos):
            end = self.string_end(self.pos)
            try:
                key = json.loads(self.text[self.pos : end])
            except ValueError:
                raise self.fail("malformed quoted key", self.pos) from None
            self.pos = end
            accessor: Accessor = Key(key)
        else:
            match = _INDEX_RE.match(self.text, self.pos)
            if match is None:
                raise self.fail('expected an index like [0] or a quoted key like ["name"]')
            digits = match.group().lstrip("-")
            if len(digits) > _MAX_INDEX_DIGITS:
                raise self.fail("index is too large", self.pos)
            accessor = Index(int(match.group()))
            self.pos = match.end()
        if not self.text.startswith("]", self.pos):
            raise self.fail(f"'[' at offset {start} is not closed with ']'")
        self.pos += 1
        return accessor

    def string_end(self, quote_at: int) -> int:
        """The offset just past the JSON string starting at ``quote_at``."""
        index = quote_at + 1
        while index < len(self.text):
            char = self.text[index]
            if char == "\\":
                index += 2
                continue
            if char == '"':
                return index + 1
            index += 1
        raise self.fail("quoted key is never closed", quote_at)

    def check_shape(self, reference: Reference, at: int) -> None:
        accessors = reference.accessors
        if reference.root == "steps":
            if not accessors:
                raise self.fail("'steps' must be followed by .<step id>.output", at)
            first = accessors[0]
            if not isinstance(first, Key) or not _STEP_ID_RE.fullmatch(first.name):
                raise self.fail(f"'steps' must be followed by .<step id>, not {first}", at)
            if len(accessors) < 2 or str(accessors[1]) not in (".output", ".route", ".error"):
                raise self.fail(
                    f"steps.{first.name} must be followed by .output, .route or .error", at
                )
            if str(accessors[1]) == ".route" and len(accessors) > 2:
                raise self.fail(f"steps.{first.name}.route is a string; nothing may follow it", at)
        elif reference.root == "run" and tuple(map(str, accessors)) != (".id",):
            raise self.fail("'run' offers only ${run.id}", at)
