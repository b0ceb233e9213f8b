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
import signal

from little_workflow._environment import CRASH_ENV, FAULT_ENV

__all__ = ["CRASH_ENV", "CRASH_EXIT_CODE", "FAULT_ENV", "CrashAfterEvents", "FaultPoints"]

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


class FaultPoints:
    """Named fault points: ``SIGKILL`` this process when one is reached.

    The spec (``Runtime(faults=...)``, or ``LITTLE_WORKFLOW_FAULT`` read by the CLI) is a
    comma-separated list of ``name`` (die the first time) or ``name#n`` (die the n-th
    time). Points are placed at the boundaries a crash test needs to hit exactly, such as
    ``outer_loop.before_cycle`` (``pendingCycleRunId`` written, the cycle not started) and
    ``outer_loop.after_supervise`` (``OuterLoopCycleCompleted`` committed, the manifest
    not updated).
    """

    def __init__(self, spec: str | None) -> None:
        self._targets: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        for item in (spec or "").split(","):
            name, _, count = item.strip().partition("#")
            if name:
                if count and not count.isdigit():
                    raise ValueError(f"fault point {item!r}: write name or name#n")
                self._targets[name] = int(count or 1)

    def reached(self, name: str) -> None:
        """Die now if ``name`` is a target and this is the time."""
        target = self._targets.get(name)
        if target is None:
            return
        self._seen[name] = self._seen.get(name, 0) + 1
        if self._seen[name] == target:
            os.kill(os.getpid(), signal.SIGKILL)
