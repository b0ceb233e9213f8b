"""What the parts of a run are given: the resources they use, as Protocols.

The core (``_core``), the front ends (``_lwir_walk``) and the session helpers
(``_agents``, ``_sessions``, ``_planner``) are typed against these, not against
``Runtime``: each names what it uses, and no module of ``runtime/`` needs to import the
facade (which a test keeps so: ``tests/runtime/test_layers.py``). A ``Runtime``
satisfies every one of them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from little_workflow._deltas import DeltaHub
from little_workflow.artifacts import ArtifactStore
from little_workflow.codec import JsonValue
from little_workflow.memory import MemoryStore
from little_workflow.runtime._datadir import DataDir
from little_workflow.runtime._faults import CrashAfterEvents, FaultPoints
from little_workflow.runtime._functions import FunctionRegistry
from little_workflow.runtime._workflows import WorkflowCatalog, WorkflowVersion
from little_workflow.storage import BlobStore, ManagedStorage, PayloadLog, RunQueue, Store

if TYPE_CHECKING:
    from little_workflow.harness._harness import Toolset
    from little_workflow.harness._slots import ModelSlot
    from little_workflow.lwir import AgentStep, Workflow

__all__ = ["CoreHost", "RunHost", "ServiceHost", "StoreHost", "SubRunner"]


class StoreHost(Protocol):
    """The open store and the data directory: what locks, cancels and services use."""

    @property
    def store(self) -> Store:
        """The open store: its event log, KV store, blobs and queue."""
        ...

    @property
    def data_dir(self) -> DataDir:
        """Locks and run scratch."""
        ...

    @property
    def events(self) -> PayloadLog:
        """The run log."""
        ...

    @property
    def kv(self) -> ManagedStorage:
        """The key-value store."""
        ...

    @property
    def lock_timeout(self) -> float:
        """Seconds to wait for a run lock."""
        ...


class ServiceHost(StoreHost, Protocol):
    """What the services (gc, outer loops, stuck runs) use besides the store."""

    @property
    def blobs(self) -> BlobStore:
        """The blob store beside the event log."""
        ...

    @property
    def artifacts(self) -> ArtifactStore:
        """The files the runs produce."""
        ...

    @property
    def faults(self) -> FaultPoints:
        """Fault injection points (crash tests)."""
        ...

    @property
    def crash(self) -> CrashAfterEvents | None:
        """Fault injection: crash after so many events (crash tests)."""
        ...

    async def open(self) -> object:
        """Open the store (idempotent)."""
        ...


class CoreHost(Protocol):
    """The resources the durable core uses."""

    @property
    def events(self) -> PayloadLog:
        """The run log."""
        ...

    @property
    def kv(self) -> ManagedStorage:
        """The key-value store (cancel requests)."""
        ...

    @property
    def memory(self) -> MemoryStore:
        """The agents' memory, offered to step functions."""
        ...

    @property
    def artifacts(self) -> ArtifactStore:
        """The artifact store, offered to step functions."""
        ...

    @property
    def crash(self) -> CrashAfterEvents | None:
        """Fault injection: crash after so many events (crash tests)."""
        ...

    @property
    def sleep(self) -> Callable[[float], Awaitable[None]]:
        """How to wait out a retry's backoff."""
        ...

    @property
    def delta_hub(self) -> DeltaHub:
        """Who watches this process's runs' model answers stream in (``_deltas``)."""
        ...


class SubRunner(Protocol):
    """Starts or continues a sub-run and returns its output (inline, or on a queue)."""

    async def run_child(
        self,
        version: WorkflowVersion,
        input: JsonValue,
        *,
        run_id: str,
        parent_run_id: str,
        parent_step_path: str,
        retry_failed: bool = False,
    ) -> JsonValue:
        """The sub-run's output; ``RunFailedError`` if it failed or was cancelled."""
        ...


class RunHost(CoreHost, Protocol):
    """What a front end and its sessions use besides the core's resources."""

    @property
    def data_dir(self) -> DataDir:
        """Locks and run scratch."""
        ...

    @property
    def functions(self) -> FunctionRegistry:
        """Step functions by reference."""
        ...

    @property
    def toolset(self) -> Toolset:
        """The tools offered to steps and agents."""
        ...

    @property
    def model_slots(self) -> Mapping[str, ModelSlot]:
        """Model slots by name."""
        ...

    @property
    def permits(self) -> RunQueue | None:
        """Where calls through a limited model slot take permits (``_model_limits``):
        the store's run queue; ``None`` for a store without one."""
        ...

    @property
    def catalog(self) -> WorkflowCatalog:
        """Pinned workflow versions."""
        ...

    def check_callables(self, version: WorkflowVersion, *, trusted: bool | None = None) -> None:
        """Fail if ``version`` names a function or tool that cannot be used."""
        ...

    def available_workflows(self, version: WorkflowVersion, step: AgentStep) -> dict[str, str]:
        """An orchestrator's workflows as they are now: name -> definition hash."""
        ...

    def registered_workflows(self) -> list[Workflow]:
        """The workflows registered by name."""
        ...
