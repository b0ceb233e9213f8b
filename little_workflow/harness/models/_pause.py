"""Let a model call give back what it holds while it sleeps between attempts.

A model slot with a concurrency limit (``runtime/_model_limits.py``) holds a permit for
the length of a call. A provider that sleeps before retrying (a 429 with
``Retry-After``, a backoff after a 5xx) is not using the model meanwhile: it sleeps
inside ``released()``, which hands the permit back for the sleep and takes one again
(waiting for it, if the slot is full) before the next attempt. With no limit set, the
``ContextVar`` is empty and ``released()`` does nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar

__all__ = ["PAUSE", "released"]

#: Set by the limiter around a call: a context manager that releases the held permit
#: on entry and takes one again on exit.
PAUSE: ContextVar[Callable[[], AbstractAsyncContextManager[None]] | None] = ContextVar(
    "little_workflow_model_permit_pause", default=None
)


@contextlib.asynccontextmanager
async def released() -> AsyncIterator[None]:
    """Around a sleep between attempts: the call's permit (if any) is given back."""
    pause = PAUSE.get()
    if pause is None:
        yield
        return
    async with pause():
        yield
