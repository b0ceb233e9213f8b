"""``LocalSubprocessAdapter``: every child its own OS process, which outlives its host.

A child is ``python -m little_workflow.platform._child`` in a session of its own
(``start_new_session``: a signal to the host's process group does not reach it, and
the host's death does not end it). It reads its spec from stdin, binds its own
``DurableServer`` (Unix socket, TCP or WebSocket on loopback, with a token on the
last two), tells the host where through a pipe, and runs the target. Everything it
emits, and then its result, goes through a ``DurableOutboundQueue``.

Records, all in the adapter's storage (they may share a root with other adapters'
records, never with checkpoints; see ``docs/ipc.md``)::

    subprocess:handle:<id>   the manifest, written by the host: before the launch, then
                             with the child's pid, pid start time and address
    subprocess:status:<id>   the child's own record: running (its identity and address),
                             then finished (its result) or failed (its error)
    ipc:...                  the child's outbound queue (channel ``subprocess:<id>``)
    ipc-client:host.<id>:ack the host's ack position in that queue

The status record is the authority on the outcome: the child writes it before it
publishes its result frame, so a child killed between the two still has an outcome.
A host that finds the child gone reads the frames it had not acked straight from the
queue's storage. Liveness is the pid **and** its start time (``platform._proc``): a
dead child whose pid was reused by another process is reported dead.

Without storage the child still runs in its own process and streams to the host, but
nothing survives the host: ``list_live()`` is empty and ``reattach()`` is ``None``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from little_workflow import codec
from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import (
    ConfigError,
    ConflictError,
    CorruptDataError,
    SchemaVersionError,
    SubprocessError,
)
from little_workflow.ids import validate_id
from little_workflow.platform._proc import ProcessIdentity, current_process, is_alive
from little_workflow.platform._subprocess import (
    MANIFEST_PREFIX,
    SpawnSpec,
    manifest_key,
    resolve_reference,
)
from little_workflow.platform.ipc import (
    DurableClient,
    DurableOutboundQueue,
    IpcAddress,
    IpcConnectionError,
    create_durable_outbound_queue,
)
from little_workflow.platform.ipc._address import MAX_UNIX_PATH_BYTES
from little_workflow.platform.ipc._client import ack_key
from little_workflow.storage import (
    FileStorage,
    StorageAdapter,
    create_in_memory_storage,
    read_many,
)

__all__ = [
    "CHILD_MODULE",
    "STATUS_PREFIX",
    "ChildManifest",
    "LocalHandle",
    "LocalSubprocessAdapter",
    "TransportName",
    "channel_name",
    "create_local_subprocess_adapter",
    "host_client_id",
    "status_key",
]

logger = logging.getLogger("little_workflow.subprocess")

TransportName = Literal["unix", "tcp", "ws"]
CHILD_MODULE = "little_workflow.platform._child"
STATUS_PREFIX = "subprocess:status:"
READY_FD_ENV = "LITTLE_WORKFLOW_CHILD_READY_FD"
_VERSION = 1
_READY_LIMIT = 64 * 1024
# Seconds since the epoch: far beyond any real ``createdAt``, and well inside a float.
_MAX_TIMESTAMP = 1e15


def status_key(handle_id: str) -> str:
    """The storage key of the child's own status record."""
    return STATUS_PREFIX + validate_id(handle_id, what="handle id")


def channel_name(handle_id: str) -> str:
    """The name of the child's outbound queue (its ``socket_path`` in queue terms)."""
    return f"subprocess:{validate_id(handle_id, what='handle id')}"


def host_client_id(handle_id: str) -> str:
    """The IPC client id under which a host's ack position in the child's queue is kept."""
    return f"host.{validate_id(handle_id, what='handle id')}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildManifest:
    """What a host records about a child so that another host can find it again."""

    handle_id: str
    step_id: str
    serialized_input: str
    execution_id: str | None
    target: str
    runner: str | None
    cwd: str | None
    metadata: dict[str, JsonValue] = field(default_factory=dict)
    #: The child's IPC address (``unix:/path``, ``tcp://...``, ``ws://...``) once bound.
    transport: str | None = None
    token: str | None = None
    #: The child's pid and pid start time, once it started.
    process: ProcessIdentity | None = None
    host: ProcessIdentity | None = None
    log_path: str | None = None
    created_at: float = 0.0

    def to_json(self) -> dict[str, JsonValue]:
        """The stored form (camelCase, like the other records)."""
        return {
            "version": _VERSION,
            "handleId": self.handle_id,
            "stepId": self.step_id,
            "serializedInput": self.serialized_input,
            "executionId": self.execution_id,
            "target": self.target,
            "runner": self.runner,
            "cwd": self.cwd,
            "metadata": self.metadata,
            "transport": self.transport,
            "token": self.token,
            "process": None if self.process is None else dict(self.process.to_json()),
            "host": None if self.host is None else dict(self.host.to_json()),
            "logPath": self.log_path,
            "createdAt": self.created_at,
        }

    @classmethod
    def from_json(cls, value: JsonValue, *, key: str) -> ChildManifest:
        """Parse ``to_json``'s form (``CorruptDataError`` naming ``key`` if it is not one)."""
        if not isinstance(value, dict):
            raise CorruptDataError(f"subprocess manifest {key!r} is not a JSON object")
        if type(value.get("version")) is not int:
            # No version at all is damage, not a format from another release.
            raise CorruptDataError(
                f"subprocess manifest {key!r} has no version "
                f"(version={value.get('version')!r}); it is not a manifest this program writes"
            )
        if value.get("version") != _VERSION:
            raise SchemaVersionError(
                f"subprocess manifest {key!r} has version {value.get('version')!r}; this "
                f"program reads version {_VERSION}"
            )

        def text(name: str, *, optional: bool = False) -> Any:
            found = value.get(name)
            if found is None and optional:
                return None
            if not isinstance(found, str):
                raise CorruptDataError(f"subprocess manifest {key!r}: {name} is not a string")
            return found

        metadata = value.get("metadata")
        created = value.get("createdAt")
        if (
            not isinstance(metadata, dict)
            or not isinstance(created, (int, float))
            or not -_MAX_TIMESTAMP <= created <= _MAX_TIMESTAMP  # float() of 10**400 raises
        ):
            raise CorruptDataError(f"subprocess manifest {key!r}: metadata or createdAt is bad")
        process, host = value.get("process"), value.get("host")
        manifest = cls(
            handle_id=text("handleId"),
            step_id=text("stepId"),
            serialized_input=text("serializedInput"),
            execution_id=text("executionId", optional=True),
            target=text("target"),
            runner=text("runner", optional=True),
            cwd=text("cwd", optional=True),
            metadata=metadata,
            transport=text("transport", optional=True),
            token=text("token", optional=True),
            process=None if process is None else ProcessIdentity.from_json(process),
            host=None if host is None else ProcessIdentity.from_json(host),
            log_path=text("logPath", optional=True),
            created_at=float(created),
        )
        if (process is not None and manifest.process is None) or manifest.handle_id != key[
            len(MANIFEST_PREFIX) :
        ]:
            raise CorruptDataError(f"subprocess manifest {key!r}: process or handleId is bad")
        return manifest


@dataclass(frozen=True, slots=True)
class _Status:
    state: Literal["running", "finished", "failed"]
    process: ProcessIdentity | None
    transport: str | None
    result: JsonValue = None
    error: dict[str, JsonValue] | None = None


def _parse_status(value: JsonValue, key: str) -> _Status:
    if not isinstance(value, dict) or value.get("version") != _VERSION:
        raise CorruptDataError(f"subprocess status {key!r} is not a version {_VERSION} record")
    state = value.get("state")
    transport = value.get("transport")
    error = value.get("error")
    if state not in ("running", "finished", "failed") or not (
        transport is None or isinstance(transport, str)
    ):
        raise CorruptDataError(f"subprocess status {key!r}: state or transport is bad")
    if error is not None and not isinstance(error, dict):
        raise CorruptDataError(f"subprocess status {key!r}: error is not an object")
    return _Status(
        state=cast(Literal["running", "finished", "failed"], state),
        process=ProcessIdentity.from_json(value.get("process")),
        transport=transport,
        result=value.get("result"),
        error=error,
    )


def child_error(handle_id: str, error: Mapping[str, JsonValue]) -> SubprocessError:
    """The ``SubprocessError`` (code ``child_failed``) for a child's recorded error."""
    kind = error.get("type")
    message = error.get("message")
    return SubprocessError(
        f"child {handle_id!r} failed: {kind}: {message}",
        code="child_failed",
        handle_id=handle_id,
        error_type=kind if isinstance(kind, str) else "",
    )


class LocalHandle:
    """A child process, as a host sees it (one it spawned, or one it found again).

    One **pump** task per handle reads the child's stream (live while the child runs,
    then what storage still holds) into memory; ``frames()`` and ``wait()`` both read
    from there, so waiting for the result never takes frames from a reader. A frame is
    acked (durably, with storage) when the reader comes back for the next one: a host
    killed mid-loop is given again the frame it was handling, and none before it.
    """

    def __init__(
        self,
        adapter: LocalSubprocessAdapter,
        manifest: ChildManifest,
        *,
        status: _Status | None = None,
    ) -> None:
        self.adapter = adapter
        self.manifest = manifest
        self._status = status
        # Where the ack position lives when the adapter has no storage: this handle.
        self._acks = create_in_memory_storage()
        self._client: DurableClient | None = None
        self._queue: DurableOutboundQueue | None = None  # once the child is gone
        self._buffer: deque[tuple[int, JsonValue]] = deque()  # emitted, not yet acked
        self._acked = 0
        self._final_seq: int | None = None
        self._changed = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._outcome: asyncio.Future[JsonValue] | None = None
        self._reader = asyncio.Lock()

    @property
    def handle_id(self) -> str:
        """The child's handle id."""
        return self.manifest.handle_id

    @property
    def step_id(self) -> str:
        """The step (or agent) that spawned it."""
        return self.manifest.step_id

    @property
    def execution_id(self) -> str | None:
        """The execution it belongs to (its parent context's)."""
        return self.manifest.execution_id

    @property
    def pid(self) -> int | None:
        """The child's pid."""
        return None if self.manifest.process is None else self.manifest.process.pid

    def is_alive(self) -> bool:
        """Whether the child process is running (pid and start time both match)."""
        identity = self.manifest.process
        return identity is not None and is_alive(identity)

    def running(self) -> bool:
        """Whether the child is alive and has not recorded an outcome yet."""
        return (self._status is None or self._status.state == "running") and self.is_alive()

    def failed(self) -> bool:
        """Whether it is known to have failed (recorded an error); a step re-runs it."""
        return self._status is not None and self._status.state == "failed"

    def terminate(self, sig: int = signal.SIGTERM) -> bool:
        """Signal the child's process group; ``False`` if the child is not running."""
        if not self.is_alive() or self.pid is None:
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)  # its own session: the group id is its pid
        return True

    async def frames(self) -> AsyncIterator[tuple[int, JsonValue]]:
        """What the child emits, as ``(seq, frame)``, each once, until its result.

        One reader at a time: a second ``frames()`` waits for the first to end.
        """
        async with self._reader:
            outcome = self._start()
            while True:
                if self._buffer:
                    seq, frame = self._buffer[0]
                    yield seq, frame
                    self._buffer.popleft()
                    await self._ack(seq)
                    continue
                if outcome.done():
                    if self._final_seq is not None:
                        await self._ack(self._final_seq)  # everything before it was read
                    return
                self._changed.clear()
                await self._changed.wait()

    async def wait(self) -> JsonValue:
        """The child's result; ``SubprocessError`` if it failed or was lost.

        It does not consume frames: a ``frames()`` loop, before or after, sees them all.
        """
        outcome = self._start()
        try:
            return await asyncio.shield(outcome)
        finally:
            if self.adapter.storage is None and self._final_seq is not None:
                # Nothing durable to keep it for: let the child exit. frames() still
                # has every frame, in this handle's memory.
                await self._ack(self._final_seq, keep_buffer=True)

    async def close(self) -> None:
        """Stop reading the child (it runs on); a later reader resumes from the last ack."""
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None

    def _start(self) -> asyncio.Future[JsonValue]:
        if self._outcome is None:
            self._outcome = asyncio.get_running_loop().create_future()
        if self._pump is None and not self._outcome.done():
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())
        return self._outcome

    async def _run_pump(self) -> None:
        try:
            async for seq, envelope in self._envelopes():
                kind = envelope.get("type")
                if kind == "emit":
                    self._buffer.append((seq, envelope.get("frame")))
                elif kind in ("result", "error"):
                    self._final_seq = seq
                    self._settle(envelope)
                    return
                else:
                    raise CorruptDataError(
                        f"child {self.handle_id!r} sent a frame of unknown type {kind!r}"
                    )
                self._changed.set()
            await self._settle_from_status()
        except Exception as exc:
            outcome = self._start()
            if not outcome.done():
                outcome.set_exception(exc)
        finally:
            self._changed.set()

    async def _ack(self, seq: int, *, keep_buffer: bool = False) -> None:
        if seq <= self._acked:
            return
        self._acked = seq
        if not keep_buffer:
            while self._buffer and self._buffer[0][0] <= seq:
                self._buffer.popleft()
        client = self._client
        if client is not None and seq <= client.delivered_through:
            await client.ack(seq)
        queue = self._queue  # the child is gone: compact its queue here
        if queue is not None and seq <= queue.last_seq:
            await queue.ack_up_to(seq)

    def _settle(self, envelope: Mapping[str, JsonValue]) -> None:
        outcome = self._start()
        if outcome.done():
            return
        if envelope.get("type") == "result":
            outcome.set_result(envelope.get("value"))
        else:
            error = envelope.get("error")
            outcome.set_exception(
                child_error(self.handle_id, error if isinstance(error, dict) else {})
            )

    async def _settle_from_status(self) -> None:
        status = await self.adapter.read_status(self.handle_id)
        if status is not None and status.state == "finished":
            self._settle({"type": "result", "value": status.result})
        elif status is not None and status.state == "failed":
            self._settle({"type": "error", "error": status.error or {}})
        else:
            log = f"; its output is in {self.manifest.log_path}" if self.manifest.log_path else ""
            outcome = self._start()
            if not outcome.done():
                outcome.set_exception(
                    SubprocessError(
                        f"child {self.handle_id!r} (pid {self.pid}) ended without a result{log}",
                        code="child_lost",
                        handle_id=self.handle_id,
                    )
                )

    async def _envelopes(self) -> AsyncGenerator[tuple[int, dict[str, Any]], None]:
        """The child's queue: live while it runs, then what storage still holds."""
        if self.manifest.transport is not None and self.is_alive():
            client = self._client = DurableClient(
                self.manifest.transport,
                ack_store=self.adapter.storage or self._acks,
                client_id=host_client_id(self.handle_id),
                token=self.manifest.token,
                reconnect=None,  # this handle redials itself, while the child lives
            )
            delay = 0.02
            try:
                while self.is_alive():
                    try:
                        async for received in client.frames():
                            if received.seq is not None:
                                delay = 0.02
                                yield received.seq, _envelope(received.frame, self.handle_id)
                    except IpcConnectionError as exc:
                        logger.debug("child %r: connection lost (%s)", self.handle_id, exc)
                    if self.is_alive():
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 0.5)
            finally:
                await client.close()
        storage = self.adapter.storage
        if storage is None:
            return
        # The child is gone: what it published that no host acked is in storage.
        queue = self._queue = await create_durable_outbound_queue(
            storage=storage, socket_path=channel_name(self.handle_id)
        )
        delivered = self._client.delivered_through if self._client is not None else 0
        for entry in await queue.frame_range(max(queue.acked_through, delivered) + 1):
            yield entry.seq, _envelope(entry.frame, self.handle_id)


def _envelope(frame: str, handle_id: str) -> dict[str, Any]:
    try:
        value = json.loads(frame)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
        raise CorruptDataError(f"child {handle_id!r} sent a frame that is not JSON") from exc
    if not isinstance(value, dict):
        raise CorruptDataError(f"child {handle_id!r} sent a frame that is not an object")
    return value


def _storage_url(storage: StorageAdapter | None, explicit: str | None) -> str | None:
    if explicit is not None or storage is None:
        return explicit
    if isinstance(storage, FileStorage):
        return f"file:{storage.root}"
    db = getattr(storage, "db", None)
    path = getattr(db, "path", None)
    if path is not None:
        return f"sqlite:///{os.path.abspath(path)}"
    raise ConfigError(
        f"a child process cannot open {type(storage).__name__}: pass storage_url= naming "
        "the same store (file:, sqlite: or postgresql:), or use file storage"
    )


def _private_dir(path: str) -> str:
    """Create ``path`` owner-only, and refuse one that another user could write into."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"{path!r} is not a private directory of this user (owner {info.st_uid}, mode "
            f"{info.st_mode & 0o777:o}); sockets and logs of children go there",
            code="unsafe_directory",
        )
    return path


def _socket_address(runtime: str, handle_id: str, digest: str) -> IpcAddress:
    """The child's socket under ``runtime``, or under a short private temp dir.

    ``sun_path`` holds 107 bytes: a project deep in a home directory (or a test's temp
    dir) passes it with ``.../runtime/ipc/<digest>``. The fallback name hashes the
    runtime dir too, so two runtime dirs with the same handle id never share a socket;
    the manifest records the address, so a reattaching host finds it either way.
    """
    path = os.path.join(runtime, "ipc", digest)
    if len(path.encode("utf-8", "surrogateescape")) <= MAX_UNIX_PATH_BYTES:
        return IpcAddress.unix(os.path.join(_private_dir(runtime + "/ipc"), digest))
    short = os.path.join(tempfile.gettempdir(), f"little-workflow-{os.getuid()}", "ipc")
    name = hashlib.sha256(f"{os.path.realpath(runtime)}\0{handle_id}".encode()).hexdigest()
    _private_dir(os.path.dirname(short))
    return IpcAddress.unix(os.path.join(_private_dir(short), name[:24]))


class LocalSubprocessAdapter:
    """Runs each child as its own OS process (see the module docstring)."""

    def __init__(
        self,
        storage: StorageAdapter | None = None,
        *,
        storage_url: str | None = None,
        transport: TransportName = "unix",
        runtime_dir: str | None = None,
        python: str | None = None,
        env: Mapping[str, str] | None = None,
        ready_timeout: float = 30.0,
        linger: float = 5.0,
    ) -> None:
        if transport not in ("unix", "tcp", "ws"):
            raise ConfigError(f"unknown transport {transport!r}: use unix, tcp or ws")
        self.storage = storage
        self.storage_url = _storage_url(storage, storage_url)
        self.transport: TransportName = transport
        self.runtime_dir = runtime_dir or os.path.join(
            tempfile.gettempdir(), f"little-workflow-{os.getuid()}"
        )
        self.python = python or sys.executable
        self.env = dict(env or {})
        self.ready_timeout = ready_timeout
        #: Seconds a finished child (with storage) waits for its last frame to be acked.
        self.linger = linger

    # --- the SubprocessAdapter interface ------------------------------------------------

    async def spawn(self, spec: SpawnSpec) -> LocalHandle:
        """Start ``spec`` in a new process; returns once the child listens."""
        handle_id = validate_id(spec.handle_id, what="handle id")
        resolve_reference(spec.target)  # the child imports the same; fail here, not there
        if spec.runner is not None:
            resolve_reference(spec.runner)
        check_json_value(spec.input, where=f"the input of child {handle_id!r}")
        if self.storage is not None:
            await self._clear_previous(handle_id)
        token = None if self.transport == "unix" else secrets.token_urlsafe(32)
        runtime = _private_dir(self.runtime_dir)
        digest = hashlib.sha256(handle_id.encode()).hexdigest()[:24]
        if self.transport == "unix":
            address = _socket_address(runtime, handle_id, digest)
        else:
            address = IpcAddress.tcp() if self.transport == "tcp" else IpcAddress.ws()
        log_path = os.path.join(_private_dir(runtime + "/logs"), f"{handle_id}.log")
        host = current_process()
        manifest = ChildManifest(
            handle_id=handle_id,
            step_id=spec.step_id,
            serialized_input=codec.dumps(spec.input),
            execution_id=spec.execution_id,
            target=spec.target,
            runner=spec.runner,
            cwd=spec.cwd,
            metadata=dict(spec.metadata),
            transport=None,
            token=token,
            host=host,
            log_path=log_path,
            created_at=time.time(),
        )
        if self.storage is not None:
            await self.storage.set(manifest_key(handle_id), manifest.to_json())
        payload = {
            "version": _VERSION,
            "handleId": handle_id,
            "stepId": spec.step_id,
            "target": spec.target,
            "runner": spec.runner,
            "input": spec.input,
            "executionId": spec.execution_id,
            "cwd": spec.cwd,
            "metadata": dict(spec.metadata),
            "address": str(address),
            "token": token,
            "storageUrl": self.storage_url,
            "sysPath": [entry for entry in sys.path if entry],
            "host": dict(host.to_json()),
            "linger": self.linger,
        }
        ready = await asyncio.to_thread(self._launch, payload, spec.cwd, log_path)
        manifest = dataclasses.replace(
            manifest, transport=ready["transport"], process=ready["process"]
        )
        if self.storage is not None:
            await self.storage.set(manifest_key(handle_id), manifest.to_json())
        return LocalHandle(self, manifest)

    async def reattach(self, handle_id: str) -> LocalHandle | None:
        """The child ``handle_id`` if it is running, or finished with a recorded outcome."""
        if self.storage is None:
            return None
        keys = (manifest_key(handle_id), status_key(handle_id))
        return self._handle(handle_id, await read_many(self.storage, keys))

    def _handle(self, handle_id: str, values: Mapping[str, JsonValue]) -> LocalHandle | None:
        """The handle ``reattach`` gives, from the child's manifest and status in ``values``."""
        key = manifest_key(handle_id)
        value = values.get(key)
        if value is None:
            return None
        manifest = ChildManifest.from_json(value, key=key)
        status_at = status_key(handle_id)
        raw_status = values.get(status_at)
        status = None if raw_status is None else _parse_status(raw_status, status_at)
        identity = manifest.process or (status.process if status is not None else None)
        transport = manifest.transport or (status.transport if status is not None else None)
        if status is not None and status.state != "running":
            # The child's identity from its own record when the host died before writing
            # it into the manifest: a finished child may still be lingering, and
            # ``is_alive()`` (which ``forget`` and a respawn rely on) must see it.
            manifest = dataclasses.replace(manifest, process=identity, transport=transport)
            return LocalHandle(self, manifest, status=status)
        if identity is None or transport is None or not is_alive(identity):
            return None
        manifest = dataclasses.replace(manifest, process=identity, transport=transport)
        return LocalHandle(self, manifest, status=status)

    async def list_live(self) -> list[LocalHandle]:
        """Every child in this adapter's storage whose process is still running.

        One ``list`` and one ``get_many`` for all the children's manifests and statuses,
        not two reads per child: a host with hundreds of children lists them at start-up.
        """
        if self.storage is None:
            return []
        ids = [
            key[len(MANIFEST_PREFIX) :] for key in sorted(await self.storage.list(MANIFEST_PREFIX))
        ]
        if not ids:
            return []
        wanted = [
            key for handle_id in ids for key in (manifest_key(handle_id), status_key(handle_id))
        ]
        values = await read_many(self.storage, wanted)
        live: list[LocalHandle] = []
        for handle_id in ids:
            handle = self._handle(handle_id, values)
            if handle is not None and handle.running():
                live.append(handle)
        return live

    # --- records -------------------------------------------------------------------------

    async def read_status(self, handle_id: str) -> _Status | None:
        """The child's own record, if it wrote one."""
        if self.storage is None:
            return None
        key = status_key(handle_id)
        value = await self.storage.get(key)
        return None if value is None else _parse_status(value, key)

    async def forget(self, handle_id: str) -> None:
        """Delete every record of a child that is not running (its queue and acks too)."""
        storage = self.storage
        if storage is None:
            return
        handle = await self.reattach(handle_id)
        if handle is not None and handle.is_alive():
            raise ConflictError(f"child {handle_id!r} is still running (pid {handle.pid})")
        queue = await create_durable_outbound_queue(
            storage=storage, socket_path=channel_name(handle_id)
        )
        for key in await storage.list(queue.key_prefix):
            await storage.delete(key)
        await storage.delete(ack_key(host_client_id(handle_id)))
        await storage.delete(status_key(handle_id))
        await storage.delete(manifest_key(handle_id))

    async def _clear_previous(self, handle_id: str) -> None:
        if await self.storage.get(manifest_key(handle_id)) is not None:  # type: ignore[union-attr]
            await self.forget(handle_id)

    # --- launching -----------------------------------------------------------------------

    def _launch(self, payload: dict[str, Any], cwd: str | None, log_path: str) -> dict[str, Any]:
        """Start the child, hand it its spec, and wait for it to say where it listens.

        The process started here forks the child proper and exits (``_child.main``);
        the child's pid and start time come back on the ready pipe.
        """
        if cwd is not None:
            os.makedirs(cwd, exist_ok=True)
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(
            entry for entry in (package_root, env.get("PYTHONPATH", "")) if entry
        )
        read_fd, write_fd = os.pipe()
        env[READY_FD_ENV] = str(write_fd)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            popen = subprocess.Popen(
                [self.python, "-m", CHILD_MODULE],
                stdin=subprocess.PIPE,
                stdout=log_fd,
                stderr=log_fd,
                cwd=cwd,
                env=env,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        except OSError as exc:
            os.close(read_fd)
            raise SubprocessError(
                f"could not start child {payload['handleId']!r} with {self.python!r}: {exc}",
                code="child_failed",
                handle_id=payload["handleId"],
            ) from exc
        finally:
            os.close(write_fd)
            os.close(log_fd)
        try:
            assert popen.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                popen.stdin.write(json.dumps(payload).encode("utf-8"))
                popen.stdin.close()
            line = _read_ready(read_fd, self.ready_timeout)
        finally:
            os.close(read_fd)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=self.ready_timeout)
        try:
            ready = json.loads(line) if line else None
            process = ProcessIdentity.from_json(ready.get("process")) if ready else None
        except (ValueError, AttributeError):
            ready, process = None, None
        if (
            not isinstance(ready, dict)
            or process is None
            or not isinstance(ready.get("transport"), str)
        ):
            if popen.returncode is None:
                popen.kill()
                popen.wait()
            raise SubprocessError(
                f"child {payload['handleId']!r} did not start; its output is in {log_path}",
                code="child_failed",
                handle_id=payload["handleId"],
            )
        ready["process"] = process
        return ready


def _read_ready(fd: int, timeout: float) -> bytes:
    """The child's ready line, or ``b""`` if it exits (or says nothing) first."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\n" not in data and len(data) < _READY_LIMIT:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return b""
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            return b""
        chunk = os.read(fd, 4096)
        if not chunk:
            return b""
        data += chunk
    return data.split(b"\n", 1)[0]


def create_local_subprocess_adapter(
    *,
    storage: StorageAdapter | None = None,
    storage_url: str | None = None,
    transport: TransportName = "unix",
    runtime_dir: str | None = None,
    python: str | None = None,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 30.0,
    linger: float = 5.0,
) -> LocalSubprocessAdapter:
    """A ``LocalSubprocessAdapter``; with ``storage``, its children survive this process.

    ``storage_url`` names the same store for the child when it cannot be derived (file
    and SQLite storage say where they are). ``transport`` is how a child streams to its
    host: ``unix`` (a socket in ``runtime_dir``, mode 0600), ``tcp`` or ``ws`` (loopback,
    with a random token). Children log to ``<runtime_dir>/logs/<handle_id>.log``.
    """
    return LocalSubprocessAdapter(
        storage,
        storage_url=storage_url,
        transport=transport,
        runtime_dir=runtime_dir,
        python=python,
        env=env,
        ready_timeout=ready_timeout,
        linger=linger,
    )
