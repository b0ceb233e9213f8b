"""Limits kept in the store: how many at once, and how many per period.

A ``Limit`` caps something shared by every worker of a store: a named queue of submitted
runs (``kind="queue"``: how many of its runs are claimed at once, and how many claims per
period) or a model slot (``kind="model"``: how many calls through it at once, and how
many calls per period). Limits are rows in the store (``lw_limits``), so every worker
enforces the same ones, and a change is seen at the next claim or call; they are
enforced where the claim or the permit is taken, in one transaction (under the SQLite
write lock, or with the limit's row locked ``FOR UPDATE`` on PostgreSQL).

Concurrency counts what is held now: a queue's runs under a live lease, a slot's permits
under a live lease. A lease ends with its holder: on PostgreSQL when it expires (it is
renewed while held), on SQLite also at once when the holding process dies. Rates count
starts (claims, permits taken) in the sliding window of the last ``per`` seconds,
recorded in ``lw_limit_starts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Final, Literal

from little_workflow.errors import InvalidValueError
from little_workflow.ids import validate_id

__all__ = ["DEFAULT_QUEUE", "Limit", "LimitKind", "Permit", "Rate"]

#: The queue a run is submitted to when none is named; it exists without being set.
DEFAULT_QUEUE: Final = "default"

LimitKind = Literal["queue", "model"]
LIMIT_KINDS: Final[tuple[LimitKind, ...]] = ("queue", "model")

_UNITS: Final = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE_TEXT: Final = re.compile(r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*([smhd])\s*$")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of ``per`` seconds (a sliding window)."""

    count: int
    per: float

    def __init__(self, count: int, per: float | timedelta = 60.0) -> None:
        seconds = per.total_seconds() if isinstance(per, timedelta) else per
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidValueError(f"a rate's count must be a whole number >= 1, not {count!r}")
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise InvalidValueError(f"a rate's period must be a positive duration, not {per!r}")
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "per", float(seconds))

    @classmethod
    def parse(cls, text: str) -> Rate:
        """``60/m``, ``30/10s``, ``1000/h``, ``5/1.5s``: a count, a slash, a period."""
        match = _RATE_TEXT.match(text)
        if match is None:
            raise InvalidValueError(
                f"invalid rate {text!r}: write COUNT/PERIOD, e.g. 60/m, 30/10s, 1000/h"
            )
        count, number, unit = match.groups()
        return cls(int(count), float(number or 1) * _UNITS[unit])

    def __str__(self) -> str:
        for unit, seconds in reversed(_UNITS.items()):
            if self.per % seconds == 0:
                amount = int(self.per // seconds)
                return f"{self.count}/{'' if amount == 1 else amount}{unit}"
        return f"{self.count}/{self.per:g}s"


@dataclass(frozen=True, slots=True)
class Limit:
    """At most ``concurrency`` held at once and at most ``rate`` starts; ``None``: no cap."""

    concurrency: int | None = None
    rate: Rate | None = None

    def __post_init__(self) -> None:
        value = self.concurrency
        bad = isinstance(value, bool) or not isinstance(value, int) or value < 1
        if value is not None and bad:
            raise InvalidValueError(
                f"a concurrency limit must be a whole number >= 1, not {value!r}"
            )
        if self.rate is not None and not isinstance(self.rate, Rate):
            raise InvalidValueError(f"a limit's rate must be a Rate, not {self.rate!r}")

    def describe(self) -> str:
        """``concurrency 3, rate 60/m``; ``no limit`` when neither is set."""
        parts = []
        if self.concurrency is not None:
            parts.append(f"concurrency {self.concurrency}")
        if self.rate is not None:
            parts.append(f"rate {self.rate}")
        return ", ".join(parts) or "no limit"


@dataclass(frozen=True, slots=True)
class Permit:
    """A held permit of a limited model slot: released after the call (or lapsed)."""

    permit_id: str
    kind: LimitKind
    name: str
    #: When the permit lapses unless renewed (seconds since the epoch, the store's clock).
    expires_at: float


def check_limit_name(kind: object, name: object) -> tuple[LimitKind, str]:
    """``(kind, name)`` if both are acceptable; ``InvalidValueError``/``InvalidIdError``."""
    if kind not in LIMIT_KINDS:
        raise InvalidValueError(f"invalid limit kind {kind!r}: use 'queue' or 'model'")
    what = "queue name" if kind == "queue" else "model slot name"
    return kind, validate_id(name, what=what)
