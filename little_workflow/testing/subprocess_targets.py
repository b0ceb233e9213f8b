"""Targets for the ``SubprocessAdapter`` conformance suite, importable by reference.

A child process imports these by name (``little_workflow.testing.subprocess_targets:
ticker``), so they live in the package, not in a test module.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from little_workflow.codec import JsonValue
from little_workflow.platform import ChildContext

__all__ = ["describe", "emit_bad_frame", "explode", "hold", "ticker"]


async def ticker(child: ChildContext, input: Any) -> JsonValue:
    """Emit ``{"i": 0..count-1}``, ``delay`` seconds apart; return ``{"done": count}``.

    With ``hold_last`` (a path), the last frame waits until that file exists: a test can
    be sure the child is still alive when it kills its host, however slowly it reads.
    """
    count, delay = int(input["count"]), float(input.get("delay", 0))
    hold = input.get("hold_last")
    for index in range(count):
        if hold is not None and index == count - 1:
            while not Path(hold).exists():  # noqa: ASYNC110, ASYNC240 (a tiny stat, polled)
                await asyncio.sleep(0.01)
        await child.emit({"i": index})
        if delay:
            await asyncio.sleep(delay)
    return {"done": count}


def describe(child: ChildContext, input: Any) -> JsonValue:
    """What the child knows about itself, and the process it runs in."""
    return {
        "input": input,
        "handle": child.handle_id,
        "step": child.step_id,
        "execution": child.execution_id,
        "cwd": child.cwd,
        "metadata": child.metadata,
        "pid": os.getpid(),
    }


def explode(child: ChildContext, input: Any) -> JsonValue:
    """Raise ``ValueError`` naming the input."""
    raise ValueError(f"cannot handle {input!r}")


async def emit_bad_frame(child: ChildContext, input: Any) -> JsonValue:
    """Try to emit something that is not JSON."""
    await child.emit({"not json": object()})  # type: ignore[dict-item]
    return "unreachable"


async def hold(child: ChildContext, input: Any) -> JsonValue:
    """Emit a frame every ``every`` seconds until the file ``release`` exists.

    Counts its starts in the file ``starts`` (one line per start), so a test can tell a
    rebound child from a second one.
    """
    _append_line(input["starts"], str(os.getpid()))
    index = 0
    while not await asyncio.to_thread(os.path.exists, input["release"]):
        await child.emit({"i": index})
        index += 1
        await asyncio.sleep(float(input.get("every", 0.01)))
    return {"emitted": index, "pid": os.getpid()}


def _append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
