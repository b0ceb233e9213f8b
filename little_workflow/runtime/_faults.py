"""Fault injection for crash tests: die right after the N-th committed event.

``LITTLE_WORKFLOW_CRASH_AFTER_EVENTS=N`` (read once, by the CLI) or
``Runtime(crash_after_events=N)`` makes the process call ``os._exit`` immediately after
the commit that holds the N-th event this process appended: no cleanup, no flush, no
lock release, as close to ``kill -9`` at that instant as a process can get by itself.
A crash test runs a workflow once for every N from 1 to its event count and resumes
each time.
"""

from __future__ import annotations

import os

__all__ = ["CRASH_ENV", "CRASH_EXIT_CODE", "CrashAfterEvents"]

CRASH_ENV = "LITTLE_WORKFLOW_CRASH_AFTER_EVENTS"
#: The exit status of an injected crash, distinct from any status the CLI returns.
CRASH_EXIT_CODE = 86


class CrashAfterEvents:
    """Counts committed events; exits the process once ``limit`` have been committed."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"crash_after_events must be at least 1, not {limit}")
        self.limit = limit
        self.count = 0

    def committed(self, events: int) -> None:
        """Call right after a commit of ``events`` events returned."""
        self.count += events
        if self.count >= self.limit:
            os._exit(CRASH_EXIT_CODE)
