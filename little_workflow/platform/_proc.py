"""Process identity: a pid plus its start time, so a reused pid is not mistaken for its owner.

Linux reuses pids; a pid alone says only that *some* process has that number. The start
time (field 22 of ``/proc/<pid>/stat``, in clock ticks since boot) together with the pid
names one process for the life of the machine. On a system without ``/proc`` the start
time is ``None`` and identity falls back to the pid alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ProcessIdentity", "current_process", "is_alive", "process_start_time"]

# A pid is a C ``pid_t`` (32-bit signed): a larger one read from a file would make
# ``os.kill`` raise ``OverflowError`` instead of naming no process.
_MAX_PID = 2**31 - 1


def process_start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or ``None`` if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself contain ') ': split
    # after the last one.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ProcessIdentity:
    """One process: its pid and (where ``/proc`` exists) its start time."""

    pid: int
    start_time: int | None

    def to_json(self) -> dict[str, int | None]:
        """The JSON form stored in lock files and manifests."""
        return {"pid": self.pid, "startTime": self.start_time}

    @classmethod
    def from_json(cls, value: object) -> ProcessIdentity | None:
        """Parse ``to_json``'s form; ``None`` if it is not one."""
        if not isinstance(value, dict):
            return None
        pid, start = value.get("pid"), value.get("startTime")
        if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid <= _MAX_PID:
            return None
        if start is not None and (not isinstance(start, int) or isinstance(start, bool)):
            return None
        return cls(pid=pid, start_time=start)


def current_process() -> ProcessIdentity:
    """This process's identity."""
    pid = os.getpid()
    return ProcessIdentity(pid=pid, start_time=process_start_time(pid))


def is_alive(identity: ProcessIdentity) -> bool:
    """Whether the process ``identity`` names is still running (a zombie counts as dead).

    A live process with the same pid but another start time is a different process: the
    original is dead and its pid was reused.
    """
    try:
        os.kill(identity.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it exists, owned by someone else
    start = process_start_time(identity.pid)
    if start is None:
        return not os.path.exists("/proc/self/stat")  # no /proc: trust the pid alone
    if identity.start_time is not None and start != identity.start_time:
        return False
    try:
        with open(f"/proc/{identity.pid}/stat", "rb") as handle:
            stat = handle.read()
        state = stat[stat.rfind(b")") + 2 :].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")
