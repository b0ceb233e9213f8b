"""Platform: process identity, subprocess adapters, and durable IPC.

``SubprocessAdapter`` is where a spawned child runs (``InProcessAdapter``: a task of
this process; ``create_local_subprocess_adapter``: its own OS process, which survives
the host and is found again through its manifest). ``ipc`` holds the durable outbound
queue and the wire protocol (v1, and v2's durable frames) over Unix sockets, TCP and
WebSockets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from little_workflow._lazy import lazy_exports

# Imported on first use (``little_workflow._lazy``): a run needs ``_atomic`` and
# ``_proc``, only a process that spawns or talks to children needs the adapters and IPC.
if TYPE_CHECKING:
    from little_workflow.platform._local import (
        ChildManifest,
        LocalHandle,
        LocalSubprocessAdapter,
        create_local_subprocess_adapter,
    )
    from little_workflow.platform._proc import (
        ProcessIdentity,
        current_process,
        is_alive,
        process_start_time,
    )
    from little_workflow.platform._subprocess import (
        MANIFEST_PREFIX,
        ChildContext,
        InProcessAdapter,
        InProcessHandle,
        SpawnSpec,
        SubprocessAdapter,
        SubprocessHandle,
        manifest_key,
        reference_of,
        resolve_reference,
        resolve_target,
        run_target,
    )

_EXPORTS: dict[str, tuple[str, ...]] = {
    "little_workflow.platform._local": (
        "ChildManifest",
        "LocalHandle",
        "LocalSubprocessAdapter",
        "create_local_subprocess_adapter",
    ),
    "little_workflow.platform._proc": (
        "ProcessIdentity",
        "current_process",
        "is_alive",
        "process_start_time",
    ),
    "little_workflow.platform._subprocess": (
        "MANIFEST_PREFIX",
        "ChildContext",
        "InProcessAdapter",
        "InProcessHandle",
        "SpawnSpec",
        "SubprocessAdapter",
        "SubprocessHandle",
        "manifest_key",
        "reference_of",
        "resolve_reference",
        "resolve_target",
        "run_target",
    ),
}

__all__ = [
    "MANIFEST_PREFIX",
    "ChildContext",
    "ChildManifest",
    "InProcessAdapter",
    "InProcessHandle",
    "LocalHandle",
    "LocalSubprocessAdapter",
    "ProcessIdentity",
    "SpawnSpec",
    "SubprocessAdapter",
    "SubprocessHandle",
    "create_local_subprocess_adapter",
    "current_process",
    "is_alive",
    "manifest_key",
    "process_start_time",
    "reference_of",
    "resolve_reference",
    "resolve_target",
    "run_target",
]

# Hidden from type checkers, which then flag a name not imported above.
if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
