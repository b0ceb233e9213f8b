"""Named queues for submitted runs, and the limits of model slots, kept in the store.

``set_queue`` stores a queue's limits (``storage/_limits.py``): every worker of the store
enforces them when it claims (``RunQueue.claim``). The queue ``default`` exists without
being set; a run submitted to any other queue needs the queue set first, so a mistyped
name is refused at submit rather than queued where no limit applies.
``set_model_limit`` stores a model slot's limits, enforced around each model call
(``runtime/_model_limits.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from little_workflow.errors import ConfigError
from little_workflow.storage import DEFAULT_QUEUE, Limit, RunQueue
from little_workflow.storage._limits import check_limit_name

__all__ = ["QueueInfo", "check_queue", "list_queues"]


class QueueHost(Protocol):
    """What these functions use of the runtime."""

    @property
    def queue(self) -> RunQueue:
        """The store's run queue."""
        ...


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """A queue and its limits (``Limit()``: none)."""

    name: str
    limit: Limit

    def to_json(self) -> dict[str, object]:
        """``{"name", "concurrency", "rate": {"count", "per"} | None}``."""
        rate = self.limit.rate
        return {
            "name": self.name,
            "concurrency": self.limit.concurrency,
            "rate": None if rate is None else {"count": rate.count, "per": rate.per},
        }


async def check_queue(queue: RunQueue, name: str) -> str:
    """``name`` if runs may be submitted to it; ``ConfigError`` (``unknown_queue``) if it
    was never set."""
    _, name = check_limit_name("queue", name)
    if name == DEFAULT_QUEUE:
        return name
    known = await queue.limits("queue")
    if name not in known:
        names = ", ".join(sorted({DEFAULT_QUEUE, *known}))
        raise ConfigError(
            f"no queue {name!r}: set it first (`little-workflow queue set {name}` or "
            f"`Runtime.set_queue`); queues: {names}; nothing was submitted",
            code="unknown_queue",
        )
    return name


async def list_queues(queue: RunQueue) -> list[QueueInfo]:
    """Every queue by name, ``default`` included."""
    known = await queue.limits("queue")
    known.setdefault(DEFAULT_QUEUE, Limit())
    return [QueueInfo(name=name, limit=known[name]) for name in sorted(known)]
