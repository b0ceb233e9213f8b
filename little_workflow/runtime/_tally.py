"""Counting the model and tool calls a pass replays from the log and the ones it makes.

A resume's value is the calls it did not pay for again; the step counts alone hide it
(an agent step that resumes mid-session is one step "executed", yet most of its calls
are replayed). One tally per top-level run or resume, in a context variable, so map
branches (tasks) and sub-runs (nested passes) add to the same one.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["CallTally", "counting", "current"]


@dataclass(slots=True)
class CallTally:
    """Calls by kind (``model``, ``tool``): replayed from the log, and made anew."""

    replayed: Counter[str] = field(default_factory=Counter)
    made: Counter[str] = field(default_factory=Counter)


_current: ContextVar[CallTally | None] = ContextVar("little_workflow_call_tally", default=None)


def current() -> CallTally | None:
    """The tally of the pass this code runs in, if one is counting."""
    return _current.get()


@contextlib.contextmanager
def counting() -> Iterator[CallTally]:
    """The enclosing tally, or a new one for the duration of the block."""
    tally = _current.get()
    if tally is not None:
        yield tally
        return
    tally = CallTally()
    token = _current.set(tally)
    try:
        yield tally
    finally:
        _current.reset(token)
