"""The fence an append runs under: which lease the writing worker believes it holds.

A worker executing a claimed run sets ``Fence(run_id, token)`` for the task tree that
drives it (``fenced``); every append made inside, to the run's own log or to a sub-run's,
carries it down to the backend, which commits only while that lease is still the run's
current one (``lw_append`` in ``_postgres_db``). A context variable rather than an
argument: the runtime's writers, sub-runs and map branches need not know about workers,
and tasks created inside inherit the fence, so nothing can append unfenced by mistake.

A backend that cannot check a fence refuses an append made under one
(``refuse_fence``): silently writing unfenced would break the one promise fencing makes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from little_workflow.errors import ConfigError

__all__ = ["Fence", "current_fence", "fenced", "refuse_fence"]


@dataclass(frozen=True, slots=True)
class Fence:
    """A lease on ``run_id`` under ``token`` (tokens only grow: a newer holder's is larger)."""

    run_id: str
    token: int


_fence: ContextVar[Fence | None] = ContextVar("little_workflow_fence", default=None)


def current_fence() -> Fence | None:
    """The fence appends made here run under, if any."""
    return _fence.get()


@contextlib.contextmanager
def fenced(fence: Fence) -> Iterator[None]:
    """Run the body (and the tasks it creates) under ``fence``."""
    token = _fence.set(fence)
    try:
        yield
    finally:
        _fence.reset(token)


def refuse_fence(backend: str) -> None:
    """Raise if an append is made under a fence on a backend that cannot check one."""
    fence = _fence.get()
    if fence is not None:
        raise ConfigError(
            f"an append under the lease of run {fence.run_id!r} reached a {backend} event "
            "log, which cannot check leases; workers need a sqlite: or postgresql: store"
        )
