"""Step functions for the retention tests: large outputs (blobs), artifacts, a gate.

``make`` returns more than the inline threshold (so its output is a blob) and, when
asked, writes an artifact; ``shared`` returns the same large value in every run (one
blob for all); ``gate`` waits, in an async step, until the test opens it, so a run can
be kept live (its lock held, its log unfinished) while a collection runs.
"""

from __future__ import annotations

import asyncio
import hashlib

from little_workflow.runtime import StepContext

#: Open gates by run input ``seed``; a run at ``gate`` waits until its seed is set.
GATES: dict[str, asyncio.Event] = {}
#: The seeds whose run has reached ``gate``.
ENTERED: set[str] = set()


def _text(seed: str, kib: int) -> str:
    block = hashlib.sha256(seed.encode()).hexdigest()
    return (block * (kib * 1024 // len(block) + 1))[: kib * 1024]


def make(ctx: StepContext, seed: str, artifact: bool = False) -> str:
    """6 KiB of text unique to ``seed``; an artifact too if ``artifact``."""
    if artifact:
        ctx.artifacts.put("made.txt", f"made by {seed}\n")
    return _text(seed, 6)


def shared() -> str:
    """The same 5 KiB in every run: one blob however many runs hold it."""
    return _text("shared", 5)


def child(seed: str) -> str:
    """A sub-run's large output."""
    return _text(f"child {seed}", 5)


async def gate(seed: str) -> str:
    """Wait until the test opens ``GATES[seed]`` (no gate: pass at once)."""
    event = GATES.get(seed)
    ENTERED.add(seed)
    if event is not None:
        await event.wait()
    return f"passed {seed}"


def boom(seed: str, fail: bool = False) -> str:
    """Fail the run when ``fail``."""
    if fail:
        raise RuntimeError(f"boom {seed}")
    return _text(f"last {seed}", 5)
