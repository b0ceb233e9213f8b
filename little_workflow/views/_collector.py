"""The cyclic garbage collector, paused while a run's log is folded into a view.

A fold keeps what it builds: a record per step, a model per event while a page is
folded, a row per step for the page. CPython's collector runs a pass every 700 new
container objects and, now and then, over every object alive; on a run of 100,000
events those passes found nothing to free and cost as much as the fold itself
(``show`` of such a run: 4.0 s with them, 3.0 s without; docs/performance.md, "One run
of 100,000 events"). Nothing a fold builds is a reference cycle, so reference counting
frees it all the same.

Rejected: ``gc.freeze()`` after the fold (the passes during it are the cost), and
raising the thresholds (a process-wide setting changed for good, for one reading).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off inside, and on again after (if it was on before).

    Nested or overlapping uses (two page reads of one server at once) are safe: only the
    use that turned it off turns it on again, so it is never left off.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
