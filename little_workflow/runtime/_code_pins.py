"""Which code a code-first run calls: each step function pinned the first time a run
calls it (``code.pinned``: its qualified name and a hash of its source).

Write-behind, so the event rides with the step's own commit; a function's source is
hashed once per function object and process (``code_hash``), so a step pays one
dictionary lookup. ``_code_drift`` compares the pins with the code at hand on resume.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable
from typing import Any

from little_workflow.events import CodePinned
from little_workflow.runtime._code_api import source_hash
from little_workflow.runtime._core import DurableRun

__all__ = ["code_hash", "pin"]

_HASHES: weakref.WeakKeyDictionary[Callable[..., Any], str] = weakref.WeakKeyDictionary()


def code_hash(function: Callable[..., Any]) -> str:
    """``source_hash(function)``, once per function object: the code this process runs,
    even if its file was edited since it was imported."""
    try:
        return _HASHES[function]
    except (KeyError, TypeError):
        pass
    digest = source_hash(function)
    # A function that cannot be weakly referenced is hashed again next time.
    with contextlib.suppress(TypeError):
        _HASHES[function] = digest
    return digest


async def pin(run: DurableRun, qualified: str, function: Callable[..., Any]) -> None:
    """Record ``function``'s identity the first time the run calls it (``code.pinned``)."""
    if qualified not in run.state.code:
        await run.append([CodePinned(functions={qualified: code_hash(function)})], sync=False)
