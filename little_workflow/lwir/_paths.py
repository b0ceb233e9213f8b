"""Step paths: where a step visit sits in a run, as the Layer A log records it.

The seed's spelling, exactly::

    fetch                                       a top-level step
    judge.visit[2]                              visit 2 (0-based) of a step with maxVisits > 1
    review-candidates[cand_123]                 one branch of a map step
    review-candidates[cand_123].worker          a body step in that branch
    review-candidates[cand_123].worker.visit[0] ... with maxVisits > 1
    outer[a].inner.visit[1][b].leaf             maps nest; a map may itself be revisited

A path alternates step segments (``id`` plus an optional ``.visit[n]``) and branch
segments (``[key]``); a body step always follows its map's branch. A visit suffix is
written exactly when the step's ``maxVisits`` is above 1, so a path alone says which
durability unit it names.

Branch keys come from data and may hold anything. A key made only of
``[A-Za-z0-9_-]`` is written bare (``[cand_123]``); any other key, including the empty
one, is written as a JSON string (``m["a.b"]``, ``m["say \\"hi\\""]``). Parsing is
strict: it accepts only that one spelling, so equal paths are equal strings and the log
can key on the text. ``parse_step_path(format_step_path(p)) == p`` for every path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from little_workflow.errors import InvalidStepPathError

__all__ = [
    "MAX_BRANCH_KEY_LENGTH",
    "BranchSegment",
    "StepPath",
    "StepSegment",
    "branch_key",
    "format_step_path",
    "parse_step_path",
]

#: Longest branch key, in characters: a key is part of every path below its branch.
MAX_BRANCH_KEY_LENGTH = 256
_STEP_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_BARE_KEY_RE = re.compile(r"[A-Za-z0-9_-]+")
_VISIT_RE = re.compile(r"0|[1-9][0-9]{0,17}")
_VISIT_PREFIX = ".visit["


@dataclass(frozen=True, slots=True)
class StepSegment:
    """A step id, and its visit index when the step has ``maxVisits > 1``."""

    step_id: str
    visit: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.step_id, str) or not _STEP_ID_RE.fullmatch(self.step_id):
            raise InvalidStepPathError(
                f"invalid step id {self.step_id!r} in a step path: use letters, digits, "
                "'_' and '-', starting with a letter or digit"
            )
        if self.visit is not None and (
            isinstance(self.visit, bool) or not isinstance(self.visit, int) or self.visit < 0
        ):
            raise InvalidStepPathError(
                f"invalid visit index {self.visit!r} for step {self.step_id!r}: "
                "visits are integers from 0"
            )

    def __str__(self) -> str:
        if self.visit is None:
            return self.step_id
        return f"{self.step_id}{_VISIT_PREFIX}{self.visit}]"


@dataclass(frozen=True, slots=True)
class BranchSegment:
    """One branch of a map step, named by its key."""

    key: str

    def __post_init__(self) -> None:
        _check_key(self.key)

    def __str__(self) -> str:
        if _BARE_KEY_RE.fullmatch(self.key):
            return f"[{self.key}]"
        return f"[{json.dumps(self.key, ensure_ascii=False)}]"


@dataclass(frozen=True, slots=True)
class StepPath:
    """A parsed step path. Build one with ``StepPath.root`` and ``.branch``/``.child``."""

    segments: tuple[StepSegment | BranchSegment, ...]

    def __post_init__(self) -> None:
        if not self.segments:
            raise InvalidStepPathError("a step path needs at least one step")
        for index, segment in enumerate(self.segments):
            expected = StepSegment if index % 2 == 0 else BranchSegment
            if not isinstance(segment, expected):
                raise InvalidStepPathError(
                    "a step path alternates steps and branches, starting with a step: "
                    f"segment {index} should be a {expected.__name__}, not {segment!r}"
                )

    @classmethod
    def root(cls, step_id: str, *, visit: int | None = None) -> StepPath:
        """The path of a top-level step (and visit)."""
        return cls((StepSegment(step_id, visit),))

    def branch(self, key: str) -> StepPath:
        """The path of this map step's branch ``key``."""
        if self.is_branch:
            raise InvalidStepPathError(f"{self} is already a branch; add a step before a branch")
        return StepPath((*self.segments, BranchSegment(key)))

    def child(self, step_id: str, *, visit: int | None = None) -> StepPath:
        """The path of body step ``step_id`` (and visit) inside this branch."""
        if not self.is_branch:
            raise InvalidStepPathError(
                f"{self} is a step, not a branch; a body step goes inside a branch: "
                f"{self}[key].{step_id}"
            )
        return StepPath((*self.segments, StepSegment(step_id, visit)))

    @property
    def is_branch(self) -> bool:
        """Whether the path names a map branch (it ends with ``[key]``)."""
        return isinstance(self.segments[-1], BranchSegment)

    @property
    def step_id(self) -> str:
        """The id of the last step segment (the map's id, for a branch path)."""
        segment = self.segments[-2] if self.is_branch else self.segments[-1]
        assert isinstance(segment, StepSegment)
        return segment.step_id

    @property
    def visit(self) -> int | None:
        """The visit index of the step this path names; ``None`` for a branch or single visit."""
        segment = self.segments[-1]
        return segment.visit if isinstance(segment, StepSegment) else None

    @property
    def parent(self) -> StepPath | None:
        """The path directly enclosing this one (a body step's branch, a branch's map)."""
        return StepPath(self.segments[:-1]) if len(self.segments) > 1 else None

    def without_visit(self) -> StepPath:
        """The same step with no visit suffix: what all visits of one step share."""
        last = self.segments[-1]
        if isinstance(last, StepSegment) and last.visit is not None:
            return StepPath((*self.segments[:-1], StepSegment(last.step_id)))
        return self

    def __str__(self) -> str:
        return format_step_path(self)


def format_step_path(path: StepPath) -> str:
    """The canonical text of ``path`` (see the module docstring)."""
    pieces: list[str] = []
    for index, segment in enumerate(path.segments):
        if index and isinstance(segment, StepSegment):
            pieces.append(".")
        pieces.append(str(segment))
    return "".join(pieces)


def parse_step_path(text: str) -> StepPath:
    """Parse the canonical text of a step path; ``InvalidStepPathError`` if it is not one."""
    if not isinstance(text, str):
        raise InvalidStepPathError(f"a step path is a string, not {type(text).__name__}")
    return _PathParser(text).parse()


def branch_key(item: object, *, key: str | None, index: int) -> str:
    """The branch key of a map item: its ``key`` field, or its index when ``key`` is None.

    The field must hold a string or an integer (integers become their decimal text);
    anything else raises ``InvalidStepPathError`` with code ``invalid_branch_key``.
    """
    if key is None:
        return str(index)
    if not isinstance(item, Mapping):
        raise InvalidStepPathError(
            f"map item [{index}] is not an object, so it has no key field {key!r}; "
            "give the map items that are objects, or omit 'key' to use item indexes",
            code="invalid_branch_key",
        )
    if key not in item:
        raise InvalidStepPathError(
            f"map item [{index}] has no key field {key!r}", code="invalid_branch_key"
        )
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidStepPathError(
            f"map item [{index}] has {key!r} = {value!r}; a branch key must be a string "
            "or an integer",
            code="invalid_branch_key",
        )
    text = str(value)
    try:
        _check_key(text)
    except InvalidStepPathError as exc:
        raise InvalidStepPathError(
            f"map item [{index}]: {exc.message}", code="invalid_branch_key"
        ) from None
    return text


def _check_key(key: object) -> None:
    if not isinstance(key, str):
        raise InvalidStepPathError(f"a branch key is a string, not {type(key).__name__}")
    if len(key) > MAX_BRANCH_KEY_LENGTH:
        raise InvalidStepPathError(
            f"branch key of {len(key)} characters is longer than {MAX_BRANCH_KEY_LENGTH}"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be stored as UTF-8 text, so no log could hold the path.
        raise InvalidStepPathError(
            f"branch key {key!r} is not valid Unicode text (lone surrogate)"
        ) from None


class _PathParser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, message: str) -> InvalidStepPathError:
        shown = self.text if len(self.text) <= 120 else self.text[:117] + "..."
        return InvalidStepPathError(
            f"invalid step path {json.dumps(shown, ensure_ascii=False)}: {message} "
            f"(at offset {self.pos})"
        )

    def parse(self) -> StepPath:
        segments: list[StepSegment | BranchSegment] = []
        while True:
            segments.append(self.step())
            if self.pos == len(self.text):
                break
            if self.text[self.pos] != "[":
                raise self.fail(
                    "after a step only '.visit[n]' or a branch '[key]' may follow; a body "
                    "step goes after its map's branch, as in map[key].step"
                )
            segments.append(self.branch())
            if self.pos == len(self.text):
                break
            if self.text[self.pos] != ".":
                raise self.fail("expected '.' and a step id after a branch")
            self.pos += 1
        return StepPath(tuple(segments))

    def step(self) -> StepSegment:
        match = _STEP_ID_RE.match(self.text, self.pos)
        if match is None:
            raise self.fail("expected a step id")
        self.pos = match.end()
        visit: int | None = None
        if self.text.startswith(_VISIT_PREFIX, self.pos):
            self.pos += len(_VISIT_PREFIX)
            digits = _VISIT_RE.match(self.text, self.pos)
            if digits is None:
                raise self.fail("expected a visit index (0, 1, ... without leading zeros)")
            self.pos = digits.end()
            if not self.text.startswith("]", self.pos):
                raise self.fail("expected ']' after the visit index")
            self.pos += 1
            visit = int(digits.group())
        return StepSegment(match.group(), visit)

    def branch(self) -> BranchSegment:
        self.pos += 1
        if self.text.startswith('"', self.pos):
            start = self.pos
            end = self.string_end(start)
            written = self.text[start:end]
            try:
                key = json.loads(written)
            except ValueError:
                raise self.fail("malformed quoted branch key") from None
            self.pos = end
            if not isinstance(key, str) or _BARE_KEY_RE.fullmatch(key):
                raise self.fail(f"branch key {written} must be written bare: [{key}]")
            if json.dumps(key, ensure_ascii=False) != written:
                self.pos = start
                raise self.fail(
                    f"branch key {written} is not in canonical form; write "
                    f"{json.dumps(key, ensure_ascii=False)}"
                )
        else:
            match = _BARE_KEY_RE.match(self.text, self.pos)
            if match is None:
                raise self.fail('expected a branch key: [name] or a JSON string ["..."]')
            key = match.group()
            self.pos = match.end()
        if not self.text.startswith("]", self.pos):
            raise self.fail("expected ']' after the branch key")
        self.pos += 1
        try:
            return BranchSegment(key)
        except InvalidStepPathError as exc:
            raise self.fail(exc.message) from None

    def string_end(self, quote_at: int) -> int:
        index = quote_at + 1
        while index < len(self.text):
            char = self.text[index]
            if char == "\\":
                index += 2
                continue
            if char == '"':
                return index + 1
            index += 1
        raise self.fail("quoted branch key is never closed")
