"""Where a code-first call sits, and how a scope's branches run together.

A committed call's identity ends with its position in its scope (``pkg.mod:fetch@3``);
its scope is the top level (``""``) or the branch its path is in (a ``ctx.map`` branch is
a scope of its own). ``CodeRun`` checks a pass against them, a fork keeps calls by them.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from little_workflow.errors import InvalidValueError
from little_workflow.lwir import branch_key, parse_step_path
from little_workflow.runtime._core import first_failure

T = TypeVar("T")

__all__ = ["all_branches", "branch_keys", "call_place", "call_position", "scope_of"]


async def all_branches(
    count: int,
    branch: Callable[[int], Coroutine[Any, Any, None]],
    preferred: type[BaseException] | types.UnionType,
) -> None:
    """Run ``branch(0..count-1)`` in a task group; on failure raise one error of them, a
    ``preferred`` one (the body's to handle) before the first failure otherwise."""
    try:
        async with asyncio.TaskGroup() as group:
            for index in range(count):
                group.create_task(branch(index))
    except BaseExceptionGroup as group_error:
        first = first_failure(group_error)
        for error in group_error.exceptions:
            if isinstance(error, preferred):
                first = error
                break
        raise first from first.__cause__


def call_place(path: str, identity: str | None) -> tuple[str, int] | None:
    """``(scope, position)`` of the call a completed unit at ``path`` records, if any."""
    position = call_position(identity)
    return None if position is None else (scope_of(path), position)


def call_position(identity: str | None) -> int | None:
    """The call position an identity records (``pkg.mod:fetch@3`` -> 3)."""
    if identity is None or "@" not in identity:
        return None
    position = identity.rsplit("@", 1)[1]
    return int(position) if position.isdigit() else None


def scope_of(path: str) -> str:
    """The scope a call at ``path`` was made in: ``""``, or its branch's path."""
    parsed = parse_step_path(path)
    if parsed.is_branch:
        return path  # a ``ctx.map`` branch: a scope of its own
    parent = parsed.parent
    return "" if parent is None else str(parent)


def branch_keys(name: str, items: list[T], key: Callable[[T], str | int] | None) -> list[str]:
    """The branch keys of ``items``: ``key(item)`` (a string or int), else the index."""
    keys = [str(index) for index in range(len(items))]
    if key is not None:
        keys = [
            branch_key({"key": key(item)}, key="key", index=index)
            for index, item in enumerate(items)
        ]
    if len(set(keys)) != len(keys):
        raise InvalidValueError(
            f"map {name!r}: several items have the same key; branch keys must be unique"
        )
    return keys
