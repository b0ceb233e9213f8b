"""The names of the environment variables the CLI reads for crash tests.

In a module of their own, free of imports, so that the CLI can read them before (or
without) importing the runtime that acts on them (``runtime/_faults.py``).
"""

from __future__ import annotations

__all__ = ["CRASH_ENV", "FAULT_ENV"]

#: ``N``: die right after the N-th committed event (``runtime._faults.CrashAfterEvents``).
CRASH_ENV = "LITTLE_WORKFLOW_CRASH_AFTER_EVENTS"
#: Named fault points to ``SIGKILL`` the process at (``runtime._faults.FaultPoints``).
FAULT_ENV = "LITTLE_WORKFLOW_FAULT"
