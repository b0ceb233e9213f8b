"""``RunResources``: what a ``Runtime`` holds, opened and closed as one.

The store (its event log, KV store, blobs and queue), the payload log over it, the
workflow catalog, the agents' memory, the data directory and artifacts, the registered
functions, tools and model slots, the sync-thread pool, and the fault injection of crash
tests. ``Runtime`` (the facade) adds the operations; the parts of a run are typed
against the Protocols of ``_host`` that these resources satisfy, never against this
class.
"""

from __future__ import annotations

import asyncio
import copy
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self

from little_workflow._deltas import DeltaHub
from little_workflow._live import LiveRelay
from little_workflow.artifacts import ArtifactStore
from little_workflow.errors import ConfigError
from little_workflow.lwir import Workflow
from little_workflow.memory import MemoryStore, open_memory
from little_workflow.platform._threads import DEFAULT_SYNC_THREADS, SyncThreads
from little_workflow.runtime._datadir import DataDir
from little_workflow.runtime._faults import CrashAfterEvents, FaultPoints
from little_workflow.runtime._functions import FunctionRegistry
from little_workflow.runtime._workflows import WorkflowCatalog
from little_workflow.storage import (
    DEFAULT_INLINE_BYTES,
    DEFAULT_MAX_PAYLOAD_BYTES,
    BlobStore,
    FileStorage,
    ManagedStorage,
    PayloadLog,
    RunQueue,
    Store,
    StoreSpec,
    open_store,
)

if TYPE_CHECKING:
    from little_workflow.harness._harness import Toolset
    from little_workflow.harness._slots import ModelSlot
    from little_workflow.harness._tools import Tool

__all__ = ["RunResources"]


class RunResources:
    """The resources of a ``Runtime`` (see ``Runtime`` for the arguments)."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str] = ".little-workflow",
        *,
        store: str | StoreSpec | None = None,
        workflows: Iterable[Workflow] = (),
        functions: Mapping[str, Callable[..., Any]] | None = None,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]]
        | Mapping[str, Callable[..., Any]] = (),
        model_slots: Mapping[str, ModelSlot] | None = None,
        import_functions: bool = True,
        lock_timeout: float = 60.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        crash_after_events: int | None = None,
        faults: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        inline_payload_bytes: int = DEFAULT_INLINE_BYTES,
        sync_threads: int = DEFAULT_SYNC_THREADS,
        on_code_drift: Literal["accept", "refuse"] = "accept",
    ) -> None:
        if max_payload_bytes < 1 or inline_payload_bytes < 0:
            raise ConfigError(
                "max_payload_bytes must be at least 1 and inline_payload_bytes at least 0"
            )
        if isinstance(sync_threads, bool) or not isinstance(sync_threads, int) or sync_threads < 1:
            raise ConfigError(f"sync_threads must be a positive integer, not {sync_threads!r}")
        if on_code_drift not in ("accept", "refuse"):
            raise ConfigError(f"on_code_drift must be 'accept' or 'refuse', not {on_code_drift!r}")
        #: What resuming a code-first run whose code changed does (docs/code-first.md).
        self.on_code_drift: Literal["accept", "refuse"] = on_code_drift
        #: Where sync user code runs while this runtime drives a run.
        self.sync_threads = SyncThreads(sync_threads)
        self.max_payload_bytes = max_payload_bytes
        self.inline_payload_bytes = inline_payload_bytes
        self._events: PayloadLog | None = None
        self.data_dir = DataDir.at(data_dir)
        #: The watchers of model answers streaming in: ``Runtime.deltas`` in this
        #: process, the web UI's run pages through the data directory (``_live``).
        self.delta_hub = DeltaHub(relay=LiveRelay(self.data_dir.root))
        self._store_url = store
        self._registered = {workflow.name: workflow for workflow in workflows}
        self.functions = FunctionRegistry(functions, allow_import=import_functions)
        self._tools = tools
        self._toolset: Toolset | None = None
        if tools:
            # Registered tools are checked now, as before; with none, ``toolset`` (and
            # the harness import) waits until a step asks for a tool.
            self._toolset = self._build_toolset()
        self.model_slots: dict[str, ModelSlot] = dict(model_slots or {})
        self.lock_timeout = lock_timeout
        self.sleep = sleep
        self.crash = None if crash_after_events is None else CrashAfterEvents(crash_after_events)
        self.faults = FaultPoints(faults)
        self._store: Store | None = None
        self._catalog: WorkflowCatalog | None = None
        #: Files the runs produce, with their manifests (``<data_dir>/artifacts/``).
        self.artifacts = ArtifactStore(self.data_dir.root)
        self._memory: tuple[MemoryStore, FileStorage | None] | None = None

    @property
    def toolset(self) -> Toolset:
        """The tools offered to steps and agents (built on first use when none were given)."""
        if self._toolset is None:
            self._toolset = self._build_toolset()
        return self._toolset

    def _build_toolset(self) -> Toolset:
        from little_workflow.harness._harness import Toolset
        from little_workflow.harness._tools import Tool, tool

        tools = self._tools
        self._tools = ()
        if isinstance(tools, Mapping):
            tools = [
                value if isinstance(value, Tool) else tool(value, name=name)
                for name, value in tools.items()
            ]
        return Toolset(tools)

    # --- lifecycle --------------------------------------------------------------------

    async def open(self) -> Self:
        """Create the data directory and open the store. Idempotent."""
        if self._store is None:
            self.data_dir.create()
            store = await open_store(self._store_url or self.data_dir.store_url)
            self._store = store
            self._events = PayloadLog(
                store.events,
                store.blobs,
                inline_bytes=self.inline_payload_bytes,
                max_payload_bytes=self.max_payload_bytes,
            )
            self._catalog = WorkflowCatalog(store.kv, self._registered)
            self._memory = open_memory(
                self.data_dir.memory, store.kv if self._store_url is not None else None
            )
        return self

    async def close(self) -> None:
        """Close the store. Idempotent."""
        store, self._store = self._store, None
        self._events = None
        memory, self._memory = self._memory, None
        if memory is not None and memory[1] is not None:
            await memory[1].close()
        if store is not None:
            await store.close()
        self.delta_hub.close()
        # Idle threads end; one still blocked in user code ends when the call returns.
        self.sync_threads.close()
        self.sync_threads = SyncThreads(self.sync_threads.size)

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def events(self) -> PayloadLog:
        """The event log (opened by ``open``): values in, values out; large payloads
        are kept in ``blobs`` by reference (``events.inner`` reads them as stored)."""
        self._require()
        assert self._events is not None
        return self._events

    @property
    def blobs(self) -> BlobStore:
        """The blob store beside the event log (opened by ``open``)."""
        return self._require().blobs

    @property
    def kv(self) -> ManagedStorage:
        """The key-value store (opened by ``open``)."""
        return self._require().kv

    @property
    def memory(self) -> MemoryStore:
        """The agents' memory (opened by ``open``; where it lives: ``open_memory``)."""
        self._require()
        assert self._memory is not None
        return self._memory[0]

    @property
    def store(self) -> Store:
        """The open store: its event log, KV store, blobs and, on Postgres, queue."""
        return self._require()

    def _require(self) -> Store:
        if self._store is None:
            raise ConfigError("the runtime is not open: use 'async with Runtime(...)' or open()")
        return self._store

    @property
    def catalog(self) -> WorkflowCatalog:
        """Where pinned workflow versions are stored and loaded."""
        self._require()
        assert self._catalog is not None
        return self._catalog

    def register(self, workflow: Workflow) -> None:
        """Register ``workflow`` under its name, for ``workflow:`` steps that name it."""
        self._registered[workflow.name] = workflow
        if self._store is not None:
            self._catalog = WorkflowCatalog(self._store.kv, self._registered)

    def registered_workflows(self) -> list[Workflow]:
        """The workflows registered by name, in registration order."""
        return list(self._registered.values())

    @property
    def queue(self) -> RunQueue:
        """The store's run queue (``submit``, workers); the memory: store has none."""
        queue = self._require().queue
        if queue is None:
            raise ConfigError(
                f"the store {self._require().spec.kind}: has no run queue; submit and workers "
                "need a sqlite: or postgresql: store"
            )
        return queue

    @property
    def permits(self) -> RunQueue | None:
        """The store's run queue, where limited model slots take permits; ``None`` for
        the memory: store (one process: nothing to share a limit with)."""
        return self._require().queue

    def with_model_slots(self, model_slots: Mapping[str, ModelSlot] | None) -> Self:
        """A view of this runtime (same store, same everything) with ``model_slots`` on top.

        A shallow copy, for one fork: the runtime it was made from may be driving other
        runs in this process. The view is never opened or closed.
        """
        if not model_slots:
            return self
        view = copy.copy(self)
        view.model_slots = {**self.model_slots, **model_slots}
        return view
