"""Platform: process identity now; subprocess adapters and the durable IPC queue later."""

from __future__ import annotations

from little_workflow.platform._proc import (
    ProcessIdentity,
    current_process,
    is_alive,
    process_start_time,
)

__all__ = ["ProcessIdentity", "current_process", "is_alive", "process_start_time"]
