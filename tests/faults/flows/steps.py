"""Step functions of the contention and restart tests: small, quick, deterministic."""

from __future__ import annotations

import asyncio


def add(value: int, amount: int) -> int:
    """``value + amount``: a step whose only cost is its commit."""
    return value + amount


async def slow_add(value: int, amount: int, seconds: float) -> int:
    """``value + amount`` after ``seconds``: a step that takes a little time."""
    await asyncio.sleep(seconds)
    return value + amount


def total(values: list[int]) -> int:
    """The sum of a map's outputs."""
    return sum(values)


def greet(name: str) -> dict[str, str]:
    """A step whose output holds a JSON string: what a flipped byte hides in."""
    return {"text": f"hello {name}"}
