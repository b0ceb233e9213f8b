"""Step functions that misbehave the ways untrusted code can, until a marker file exists.

``kind`` picks the misbehaviour; once ``marker`` exists the function returns ``"fixed"``
(the user fixed the code), so ``retry`` and ``fork`` can be shown to work afterwards.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any


class Custom(BaseException):
    """A BaseException of the user's own, not an Exception."""


class BadStr(Exception):
    """An exception whose ``str()`` raises."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ exploded")


def _misbehave(kind: str) -> Any:
    if kind == "system_exit_0":
        sys.exit(0)
    if kind == "system_exit_3":
        raise SystemExit(3)
    if kind == "base_exception":
        raise Custom("a BaseException of its own")
    if kind == "generator_exit":
        raise GeneratorExit
    if kind == "cancelled":
        raise asyncio.CancelledError
    if kind == "bad_str":
        raise BadStr
    if kind == "huge_int":
        return 10**5000
    if kind == "tuple":
        return (1, [2, (3, "x")])
    raise AssertionError(f"unknown kind {kind!r}")


def misbehave(kind: str, marker: str) -> Any:
    """Misbehave as ``kind`` says, unless ``marker`` exists."""
    if Path(marker).exists():
        return "fixed"
    return _misbehave(kind)


async def amisbehave(kind: str, marker: str) -> Any:
    """The same, as a coroutine function (it runs on the event loop)."""
    await asyncio.sleep(0)
    if Path(marker).exists():  # noqa: ASYNC240 - one stat, in a test
        return "fixed"
    return _misbehave(kind)


def exiting_supervisor(cycle: Any) -> Any:
    """A loop's supervisor that calls ``sys.exit(4)``."""
    sys.exit(4)
