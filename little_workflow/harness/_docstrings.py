"""Reading a tool's description, and its parameters' descriptions, from a docstring.

Three conventions are understood, because tool authors use all three:

* Google: an ``Args:`` (``Arguments:``, ``Parameters:``, ``Keyword Args:``...) section
  whose entries are ``name: text`` or ``name (type): text``, continued on more deeply
  indented lines;
* reST / Sphinx: ``:param name: text`` or ``:param type name: text`` fields, continued
  on indented lines;
* NumPy: a ``Parameters`` heading underlined with dashes, entries ``name : type`` with
  the text indented below.

The description is all the prose before the first section, heading or field, not only
the first line: what a docstring says about how to use the tool is what a model needs
too. Sections other than the parameters (``Returns:``, ``Raises:``, ``Examples:``) are
left out.

Rejected: a docstring library (``docstring_parser``, ``griffe``) for about a hundred
lines of parsing that only has to be good enough for the three common forms; a parser
that never raises (odd text yields fewer descriptions, never an error) matters more.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

__all__ = ["ParsedDocstring", "parse_docstring"]

# Google section headings (lower-cased); the first group holds the parameter sections.
_GOOGLE_PARAMETER_SECTIONS = frozenset(
    {
        "args",
        "arguments",
        "parameters",
        "params",
        "keyword args",
        "keyword arguments",
        "kwargs",
        "other parameters",
    }
)
_GOOGLE_OTHER_SECTIONS = frozenset(
    {
        "returns",
        "return",
        "yields",
        "yield",
        "raises",
        "raise",
        "except",
        "exceptions",
        "examples",
        "example",
        "note",
        "notes",
        "warning",
        "warnings",
        "see also",
        "todo",
        "references",
        "attributes",
        "methods",
    }
)
_NUMPY_PARAMETER_SECTIONS = frozenset({"parameters", "other parameters", "keyword arguments"})
_NUMPY_OTHER_SECTIONS = frozenset(
    {
        "returns",
        "yields",
        "receives",
        "raises",
        "warns",
        "warnings",
        "see also",
        "notes",
        "references",
        "examples",
        "attributes",
        "methods",
    }
)

_GOOGLE_HEADING = re.compile(r"([A-Za-z][A-Za-z ]*):\s*")
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:(.*)")
_NUMPY_UNDERLINE = re.compile(r"\s*-{3,}\s*")
_NUMPY_ENTRY = re.compile(r"(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?")
_REST_FIELD = re.compile(r":[A-Za-z][^:]*:")
_REST_PARAM = re.compile(r":(?:param|parameter|arg|argument|key|keyword)\s+([^:]+?)\s*:(.*)")


@dataclass(frozen=True, slots=True)
class ParsedDocstring:
    """What a docstring says: the description, and a description per parameter name."""

    description: str = ""
    parameters: dict[str, str] = field(default_factory=dict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(lines: list[str]) -> str:
    # A parameter's text is reflowed into one line: its line breaks follow the source
    # layout, not meaning, and the schema is read by a model, not printed.
    return " ".join(line.strip() for line in lines if line.strip())


def _google_heading(line: str) -> str | None:
    """The lower-cased name of a Google section heading at column 0, else ``None``."""
    if _indent(line) != 0:
        return None
    match = _GOOGLE_HEADING.fullmatch(line)
    if match is None:
        return None
    name = match.group(1).strip().lower()
    if name in _GOOGLE_PARAMETER_SECTIONS or name in _GOOGLE_OTHER_SECTIONS:
        return name
    return None


def _numpy_heading(lines: list[str], index: int) -> str | None:
    """The lower-cased name of a NumPy heading (a known name underlined), else ``None``."""
    # Only known names: prose followed by a Markdown-style rule must stay prose.
    if index + 1 >= len(lines) or _NUMPY_UNDERLINE.fullmatch(lines[index + 1]) is None:
        return None
    name = lines[index].strip().lower()
    if name in _NUMPY_PARAMETER_SECTIONS or name in _NUMPY_OTHER_SECTIONS:
        return name
    return None


def _is_section_start(lines: list[str], index: int) -> bool:
    line = lines[index]
    return (
        _google_heading(line) is not None
        or _numpy_heading(lines, index) is not None
        or (_indent(line) == 0 and _REST_FIELD.match(line) is not None)
    )


def _parse_google(lines: list[str], start: int, into: dict[str, str]) -> None:
    """Read the entries of the Google parameter section whose heading is ``lines[start]``."""
    entry_indent: int | None = None
    name: str | None = None
    text: list[str] = []
    for line in lines[start + 1 :]:
        if not line.strip():
            continue
        indent = _indent(line)
        if indent == 0:
            break
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            if name is not None:
                into.setdefault(name, _join(text))
            match = _GOOGLE_ENTRY.fullmatch(line.strip())
            name, text = (match.group(1), [match.group(2)]) if match else (None, [])
        elif name is not None:
            text.append(line)
    if name is not None:
        into.setdefault(name, _join(text))


def _parse_numpy(lines: list[str], start: int, into: dict[str, str]) -> None:
    """Read the entries of the NumPy parameter section whose heading is ``lines[start]``."""
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for name in names:
            into.setdefault(name, _join(text))

    index = start + 2
    while index < len(lines):
        line = lines[index]
        if _numpy_heading(lines, index) is not None or _google_heading(line) is not None:
            break
        if line.strip() and _indent(line) == 0:
            flush()
            match = _NUMPY_ENTRY.fullmatch(line.strip())
            names = (
                [part.strip().lstrip("*") for part in match.group(1).split(",")] if match else []
            )
            text = []
        elif names:
            text.append(line)
        index += 1
    flush()


def _parse_rest(lines: list[str], into: dict[str, str]) -> None:
    """Read every ``:param ...:`` field and its indented continuation lines."""
    name: str | None = None
    text: list[str] = []
    for line in lines:
        if _indent(line) == 0 and line.strip():
            if name is not None:
                into.setdefault(name, _join(text))
                name = None
            match = _REST_PARAM.fullmatch(line)
            if match is not None:
                # ``:param int x:`` and ``:param list[str] x:``: the name is the last word.
                name = match.group(1).split()[-1].lstrip("*")
                text = [match.group(2)]
        elif name is not None:
            text.append(line)
    if name is not None:
        into.setdefault(name, _join(text))


def parse_docstring(docstring: str | None) -> ParsedDocstring:
    """Split ``docstring`` into its description and its parameters' descriptions.

    Never raises: text in none of the known forms is all description. A parameter
    documented twice keeps its first description.
    """
    if not docstring or not docstring.strip():
        return ParsedDocstring()
    lines = inspect.cleandoc(docstring).splitlines()
    first_section = next(
        (index for index in range(len(lines)) if _is_section_start(lines, index)), len(lines)
    )
    description = "\n".join(lines[:first_section]).strip()
    parameters: dict[str, str] = {}
    for index, line in enumerate(lines[first_section:], start=first_section):
        if _google_heading(line) in _GOOGLE_PARAMETER_SECTIONS:
            _parse_google(lines, index, parameters)
        elif _numpy_heading(lines, index) in _NUMPY_PARAMETER_SECTIONS:
            _parse_numpy(lines, index, parameters)
    _parse_rest(lines[first_section:], parameters)
    return ParsedDocstring(
        description=description,
        parameters={name: text for name, text in parameters.items() if text},
    )
