"""``read_usage``: a run's ``UsageReport`` from a store, for the Python API."""

from __future__ import annotations

from little_workflow.storage import EventLog
from little_workflow.views._read import RunReader
from little_workflow.views._usage import PriceTable, UsageReport

__all__ = ["read_usage"]


async def read_usage(
    log: EventLog, run_id: str, *, prices: PriceTable | None = None
) -> UsageReport:
    """The model usage of ``run_id`` and its sub-runs, costed with ``prices``.

    ``log`` is a runtime's ``events`` (``Runtime.events``), which resolves payloads
    stored by reference. The same numbers as ``show --json``'s ``usage``; the
    definitions of paid, replayed and interrupted are in docs/usage.md.
    Raises ``CorruptDataError`` for a run with no events.
    """
    return await RunReader(log, prices=prices).usage(run_id)
