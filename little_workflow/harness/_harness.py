"""``AgentHarness``: runs an agent graph in a ``Context`` with model slots and tools.

A zero-config harness persists nothing (its recorder is the ``NullRecorder``). Inside a
workflow run the runtime gives it a recorder that writes every model and tool call to
the run's event log (Layer C); a harness given a checkpoint store keeps a step ledger.
The harness is the same in every case: only the recorder differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pydantic

from little_workflow._secrets import Secrets
from little_workflow.codec import JsonValue, check_json_value
from little_workflow.durable._checkpoints import (
    AskUserRecord,
    CheckpointSnapshot,
    CheckpointStore,
    CwdRecord,
    FrontierEntry,
    ItemLogRecord,
    snapshot_key,
)
from little_workflow.durable._ledger import (
    DEFAULT_STEP_LEDGER_RETENTION,
    StepLedger,
    StepLedgerRetention,
    entry_keys,
    step_ledger_retention,
)
from little_workflow.durable._recorder import NullRecorder, Recorder
from little_workflow.errors import AwaitingAnswerError, ConfigError, CorruptDataError
from little_workflow.harness._context import (
    STANDARD_LAYERS,
    AskUserPrompt,
    Context,
    ContextLayer,
    Item,
    ItemLog,
    check_layer_ids,
    default_layers,
    run_append_pipeline,
)
from little_workflow.harness._execution import GraphRun, input_message
from little_workflow.harness._graph import GraphStep
from little_workflow.harness._redaction import RedactingRecorder, Redactor
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._spawning import AGENT_RUNNER, durable_adapter, spawn_metadata
from little_workflow.harness._tool_registry import ToolRegistry
from little_workflow.harness._tools import Tool
from little_workflow.harness.models import FilePart, ImagePart, ToolSpec
from little_workflow.ids import new_id, validate_id
from little_workflow.platform import (
    InProcessAdapter,
    SpawnSpec,
    SubprocessAdapter,
    SubprocessHandle,
    resolve_reference,
)
from little_workflow.storage import StorageAdapter

__all__ = [
    "AgentHarness",
    "HarnessEnvironment",
    "HarnessStorage",
    "RestoreContextOptions",
    "SpawnHandle",
    "ToolHook",
    "Toolset",
    "answer_key",
    "answer_prefix",
]

logger = logging.getLogger("little_workflow.harness")


def _as_is(value: JsonValue) -> JsonValue:
    return value


def _object(value: JsonValue) -> dict[str, JsonValue]:
    assert isinstance(value, dict)  # redaction keeps an object an object
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class HarnessStorage:
    """Where a durable harness keeps its snapshots and step ledger."""

    checkpoint_store: CheckpointStore | None = None
    #: A ``StepLedgerRetention``, or the seed's mapping ``{"maxEntryBytes": ...,
    #: "maxEntries": ...}``, converted (and validated) here.
    step_ledger_retention: StepLedgerRetention | Mapping[str, Any] = DEFAULT_STEP_LEDGER_RETENTION

    def __post_init__(self) -> None:
        # Validated at construction: a bad cap must not surface at the first step.
        retention = step_ledger_retention(self.step_ledger_retention)
        object.__setattr__(self, "step_ledger_retention", retention)


@dataclass(frozen=True, slots=True, kw_only=True)
class HarnessEnvironment:
    """A harness's durable surroundings; every part is optional (zero config persists nothing)."""

    storage: HarnessStorage | None = None
    #: Where agents named by reference run (``detached_spawn``, steps with no override of
    #: their own); ``None`` runs them in this process. See ``little_workflow.platform``.
    subprocess: SubprocessAdapter | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreContextOptions:
    """What ``restore()`` accepts from the caller: the wiring the snapshot cannot hold.

    ``items``, ``thread_id``, ``resource_id`` and ``cwd`` always come from the snapshot,
    so they are not fields here: a value that would be silently ignored cannot be passed.
    """

    parent: Context | None = None
    state: Any = None
    context: Sequence[ContextLayer] | None = None


#: ``prepare(detail) -> detail``: completes a tool call's recorded detail before it starts.
Preparer = Callable[[Mapping[str, JsonValue]], Mapping[str, JsonValue]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolHook:
    """How a built-in tool departs from ``Tool.invoke`` (``start_workflow`` is one).

    ``prepare`` completes the call's detail before its start is recorded (with the id of
    the sub-run it will start, so a resume finds that sub-run instead of starting
    another); ``run`` then makes the call from the recorded detail.
    """

    prepare: Preparer
    run: Callable[[Mapping[str, JsonValue], Any], Awaitable[JsonValue]]


class Toolset:
    """The harness's tools, plus hooks for built-in tools that need them."""

    def __init__(
        self,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] = (),
        hooks: Mapping[str, ToolHook] | None = None,
    ) -> None:
        self.registry = ToolRegistry(tools)
        self._hooks = dict(hooks or {})

    def get(self, name: str) -> Tool[..., Any]:
        """The tool called ``name`` (``ToolArgumentsError``, code ``unknown_tool``, if none)."""
        return self.registry.get(name)

    def specs(self, names: Sequence[str] | None = None) -> list[ToolSpec]:
        """The specs of ``names`` (every tool when ``None``), for a model request."""
        return list(self.registry.specs(names))

    def hook(self, name: str) -> ToolHook | None:
        """The hook of tool ``name``, if it has one."""
        return self._hooks.get(name)

    def manifest(self) -> dict[str, str]:
        """``{name: schema_hash}``, for capability manifests."""
        return self.registry.manifest()


class SpawnHandle:
    """A detached child; ``await handle.wait()`` gives its output.

    An agent object runs as a task of this process, and ``context`` is its context. An
    agent named by reference runs through a ``SubprocessAdapter``; ``subprocess`` is the
    adapter's handle once it started (``started()`` waits for it), and ``frames()``
    streams what the child emits.
    """

    def __init__(
        self,
        *,
        handle_id: str,
        execution_id: str,
        task: asyncio.Task[JsonValue],
        context: Context | None = None,
    ) -> None:
        self.handle_id = handle_id
        #: The child execution's id.
        self.execution_id = execution_id
        #: The child's context, for an agent running in this process.
        self.context = context
        #: The adapter's handle, once an adapter started the child.
        self.subprocess: SubprocessHandle | None = None
        self._started = asyncio.Event()
        self._task = task
        task.add_done_callback(lambda _: self._started.set())

    def _bind(self, handle: SubprocessHandle) -> None:
        self.subprocess = handle
        self._started.set()

    async def started(self) -> SubprocessHandle | None:
        """The adapter's handle once the child started (``None`` in-process or if it failed)."""
        await self._started.wait()
        return self.subprocess

    async def frames(self) -> AsyncIterator[tuple[int, JsonValue]]:
        """What the child emits, as ``(seq, frame)`` (nothing for an in-process agent)."""
        handle = await self.started()
        if handle is not None:
            async for entry in handle.frames():
                yield entry

    def done(self) -> bool:
        """Whether the child has finished (successfully or not)."""
        return self._task.done()

    async def wait(self) -> JsonValue:
        """The child's output (its exception, if it raised)."""
        return await asyncio.shield(self._task)

    def cancel(self) -> None:
        """Stop waiting for the child (an in-process child is cancelled; an OS child runs on)."""
        self._task.cancel()


class AgentHarness:
    """Runs ``agent_graph`` (see ``little_workflow.harness.agent`` for the standard agent)."""

    def __init__(
        self,
        *,
        name: str,
        agent_graph: GraphStep,
        model_slots: Mapping[str, ModelSlot] | None = None,
        tools: Iterable[Tool[..., Any] | Callable[..., Any]] | Toolset = (),
        params: Mapping[str, JsonValue] | None = None,
        environment: HarnessEnvironment | None = None,
    ) -> None:
        self.name = name
        self.agent_graph = agent_graph
        self.model_slots: dict[str, ModelSlot] = dict(model_slots or {})
        self.tools = tools if isinstance(tools, Toolset) else Toolset(tools)
        self.params: dict[str, JsonValue] = dict(params or {})
        self.environment = environment or HarnessEnvironment()
        storage = self.environment.storage
        #: The checkpoint store, or ``None``: then every durability hook is a no-op.
        self.checkpoint_store = None if storage is None else storage.checkpoint_store
        self.retention = (
            DEFAULT_STEP_LEDGER_RETENTION
            if storage is None
            else step_ledger_retention(storage.step_ledger_retention)
        )
        self._runs: dict[str, GraphRun] = {}
        # Per execution: the secret values its redacting tools have seen, in memory only
        # (see ``_redaction``), so its snapshots are scrubbed of them too.
        self._redactors: dict[str, Redactor] = {}
        #: Told every value a tool's redaction rule replaces: a durable run's secrets,
        #: scrubbed from every event the run appends (``little_workflow._secrets``).
        self.secret_sink: Secrets | None = None
        self._answered: dict[tuple[str, str], asyncio.Event] = {}
        self._pending_answers: dict[tuple[str, str], str] = {}

    def create_context(
        self,
        *,
        id: str | None = None,
        thread_id: str | None = None,
        resource_id: str | None = None,
        instructions: str | None = None,
        layers: Sequence[ContextLayer] | None = None,
        cwd: str | None = None,
        state: Any = None,
        parent: Context | None = None,
    ) -> Context:
        """A fresh context; ``instructions`` fill the default ``instructions`` layer."""
        ctx = Context(
            id=id or new_id("exec"),
            thread_id=thread_id,
            resource_id=resource_id,
            layers=list(layers) if layers is not None else default_layers(instructions),
            cwd=cwd,
            state=state,
            parent=parent,
        )
        self.bind(ctx)
        return ctx

    def bind(self, ctx: Context, execution: Context | None = None) -> None:
        """Make ``ctx.checkpoint()`` save ``execution``'s snapshot (default: ``ctx``'s)."""
        target = ctx if execution is None else execution

        async def checkpoint() -> bool:
            return await self.checkpoint(target)

        ctx.checkpointer = checkpoint

    async def execute(
        self,
        ctx: Context,
        input: JsonValue = None,
        *,
        recorder: Recorder | None = None,
        attachments: Sequence[ImagePart | FilePart] = (),
    ) -> JsonValue:
        """Run the agent graph in ``ctx``; ``input``, if given, is appended as a user message
        (its text, then ``attachments``: images and files sent with it).

        ``recorder`` makes the execution durable (see ``durable._recorder``). Without one,
        a harness with a checkpoint store keeps the execution's step ledger (recorded
        steps replay) and snapshots the context; a zero-config harness records nothing.

        Without ``input``, a context with a frontier (a restored one, or one whose last
        execution raised) continues where it was: its steps run again, and recorded ones
        replay. Otherwise this is a new turn of the conversation: the graph runs at its
        id for the first, at ``<id>@<items before it>`` for a later one, so that a turn
        never replays what an earlier turn recorded.
        """
        if input is not None:
            check_json_value(input, where="the input of the agent")
        elif ctx.frontier:
            root, run_input = ctx.frontier[0]
            return await self._run(ctx, root, run_input, recorder=recorder)
        graph_id = self.agent_graph.id
        root = graph_id if len(ctx.items) == 0 else f"{graph_id}@{len(ctx.items)}"
        return await self._run(
            ctx,
            root,
            input,
            recorder=recorder,
            append_input=input is not None,
            attachments=attachments,
        )

    async def _run(
        self,
        ctx: Context,
        root: str | None,
        input: JsonValue,
        *,
        recorder: Recorder | None,
        append_input: bool = False,
        attachments: Sequence[ImagePart | FilePart] = (),
    ) -> JsonValue:
        """Run the graph at path ``root`` (``None``: the latest turn the ledger recorded)."""
        # A layer added after the context was built: refused before anything runs, not
        # saved in snapshots that every restore would refuse.
        check_layer_ids(ctx.layers, where=f"execution {ctx.id!r}")
        self.bind(ctx)
        if recorder is None and self.checkpoint_store is not None:
            recorder = await StepLedger.load(self.checkpoint_store.storage, ctx.id, self.retention)
        if root is None:
            graph_id = self.agent_graph.id

            def is_turn(path: str) -> bool:
                name, _, turn = path.partition("@")
                return name == graph_id and (turn == "" or turn.isdigit())

            latest = recorder.last_recorded(is_turn) if isinstance(recorder, StepLedger) else None
            root = latest or graph_id
        composite_units = isinstance(recorder, StepLedger)
        if recorder is not None:
            redactor = self._redactor(ctx.id)
            if redactor:
                recorder = RedactingRecorder(recorder, redactor)
        run = GraphRun(
            self,
            ctx,
            recorder if recorder is not None else NullRecorder(),
            input,
            composite_units=composite_units,
        )
        run.root_path = root
        before = len(ctx.items)
        self._runs[ctx.id] = run
        if not append_input:
            # Continuing: the log already holds what the recorded steps appended. The
            # replay starts where the turn did (after its input) and walks through it.
            name, _, turn = root.partition("@")
            start = int(turn) if name == self.agent_graph.id and turn.isdigit() else 0
            ctx.items.replay_from(start + (input is not None))
        try:
            if append_input:
                await run.append(ctx, [Item(message=input_message(input, attachments))])
            output = await run.run_step(self.agent_graph, root)
        except BaseException:
            # What was in flight when it raised: a snapshot's frontier, and where a later
            # execute() without input (or a resume) continues.
            ctx.frontier = list(run.failed_frontier or [(root, input)])
            raise
        else:
            ctx.frontier = []
        finally:
            del self._runs[ctx.id]
            ctx.items.replay_from(None)
            if run.checkpoints or len(ctx.items) != before:
                # The final word on this execution: its item log, and its frontier (none
                # once it completed; what was in flight if it raised).
                await self.checkpoint(ctx)
        return output

    async def resume(
        self, execution_id: str, options: RestoreContextOptions | None = None
    ) -> tuple[Context, JsonValue] | None:
        """Restore ``execution_id`` and run it again; recorded steps replay from the ledger.

        An execution with a frontier continues from it; one that completed replays its
        latest turn (recorded whole, nothing runs). Returns the context and the output,
        or ``None`` if there is no snapshot.
        """
        ctx = await self.restore(execution_id, options)
        if ctx is None:
            return None
        if ctx.frontier:
            root, input = ctx.frontier[0]
            output = await self._run(ctx, root, input, recorder=None)
        else:
            output = await self._run(ctx, None, None, recorder=None)
        return ctx, output

    # --- durability hooks -------------------------------------------------------------

    async def appended(self, ctx: Context, run: GraphRun | None = None) -> None:
        """Called after ``run_append_pipeline`` resolves: a checkpoint, when durable."""
        await self.checkpoint(ctx)

    async def run_append_pipeline(self, ctx: Context, items: Sequence[Item]) -> list[Item]:
        """Append ``items`` through the layers' hooks, then checkpoint; the items added."""
        added = run_append_pipeline(ctx, items)
        if added:
            await self.checkpoint(ctx)
            for listener in ctx.item_listeners:
                await listener(added)
        return added

    def _redactor(self, execution_id: str) -> Redactor:
        redactor = self._redactors.get(execution_id)
        if redactor is None:
            redactor = Redactor(self.tools.registry.redactions(), sink=self.secret_sink)
            if redactor:
                self._redactors[execution_id] = redactor
        return redactor

    async def checkpoint(self, ctx: Context) -> bool:
        """Save a snapshot of ``ctx``; whether it was saved (``False`` without a store).

        The frontier is the running execution's steps in flight, or (between runs) the
        context's own. A failing save (or a context that cannot be snapshotted) is
        logged and swallowed: a checkpoint never fails the step that triggered it. What
        it would have saved is rebuilt from the ledger on resume. ``ctx.checkpoint()``
        calls this.
        """
        store = self.checkpoint_store
        if store is None:
            return False
        run = self._runs.get(ctx.id)
        if run is not None:
            run.checkpoints += 1
        try:
            check_layer_ids(ctx.layers, where=f"execution {ctx.id!r}")
            redactor = self._redactor(ctx.id)
            stored = redactor.stored if redactor else _as_is
            snapshot = CheckpointSnapshot(
                execution_id=ctx.id,
                thread_id=ctx.thread_id,
                resource_id=ctx.resource_id,
                frontier=[
                    FrontierEntry(step_id=path, input=stored(input))
                    for path, input in (run.in_flight() if run is not None else ctx.frontier)
                ],
                layers={layer.id: stored(layer.state()) for layer in ctx.layers},
                cwd=CwdRecord(current=ctx.cwd, previous=ctx.previous_cwd)
                if ctx.cwd is not None or ctx.previous_cwd is not None
                else None,
                ask_user=[
                    AskUserRecord(id=prompt.id, input=prompt.input, created_at=prompt.created_at)
                    for prompt in ctx.ask_user
                ],
                item_log=ItemLogRecord(
                    items=[_object(stored(item.to_json())) for item in ctx.items.items]
                ),
                captured_at=datetime.datetime.now(datetime.UTC).isoformat(),
            )
            await store.save(snapshot)
        except Exception as exc:  # the step that triggered it still succeeds
            logger.warning("checkpoint of execution %r was not saved: %s", ctx.id, exc)
            return False
        return True

    async def restore(
        self, execution_id: str, options: RestoreContextOptions | None = None
    ) -> Context | None:
        """The context of ``execution_id`` rebuilt from its snapshot, or ``None`` if none.

        Caller options (``parent``, ``state``, ``context`` layers) are applied first; the
        snapshot's values then overwrite them, so the record always wins. Without
        ``context``, the snapshot's layers are rebuilt (the built-in ones, in their
        order). Raises ``ConfigError``: ``CHECKPOINT_SCHEMA_MISMATCH`` for a snapshot of
        another schema, ``CHECKPOINT_LAYERS_MISSING`` for a snapshot holding the state of
        a layer the context would not have (pass it in ``context``).
        """
        if options is not None and not isinstance(options, RestoreContextOptions):
            raise TypeError(
                "restore() options are a RestoreContextOptions(parent=, state=, context=); "
                "items, thread_id, resource_id and cwd always come from the snapshot"
            )
        store = self.checkpoint_store
        if store is None:
            return None
        snapshot = await store.load(execution_id)
        if snapshot is None:
            return None
        options = options or RestoreContextOptions()
        if options.context is not None:
            layers = list(options.context)
        else:
            layers = [STANDARD_LAYERS[id]() for id in snapshot.layers if id in STANDARD_LAYERS]
        missing = sorted(set(snapshot.layers) - {layer.id for layer in layers})
        if missing:
            raise ConfigError(
                f"the checkpoint of execution {execution_id!r} holds the state of layer(s) "
                f"{', '.join(map(repr, missing))}, which the restored context would not have; "
                "pass them in RestoreContextOptions(context=[...]) rather than lose their state",
                code="CHECKPOINT_LAYERS_MISSING",
            )
        ctx = Context(id=execution_id, layers=layers, state=options.state, parent=options.parent)
        ctx.thread_id, ctx.resource_id = snapshot.thread_id, snapshot.resource_id
        try:
            ctx.items = ItemLog(Item.from_json(item) for item in snapshot.item_log.items)  # type: ignore[arg-type]
        except (KeyError, TypeError, AttributeError, pydantic.ValidationError) as exc:
            raise CorruptDataError(
                f"the checkpoint of execution {execution_id!r} has an item that is not an "
                f"item of the log ({type(exc).__name__})"
            ) from exc
        for layer in ctx.layers:
            if layer.id in snapshot.layers:
                layer.load_state(snapshot.layers[layer.id])
        if snapshot.cwd is not None:
            ctx.cwd, ctx.previous_cwd = snapshot.cwd.current, snapshot.cwd.previous
        ctx.ask_user = [
            AskUserPrompt(id=prompt.id, input=prompt.input, created_at=prompt.created_at)
            for prompt in snapshot.ask_user
        ]
        ctx.frontier = [(entry.step_id, entry.input) for entry in snapshot.frontier]
        self.bind(ctx)
        return ctx

    def detached_spawn(
        self,
        agent: GraphStep | str,
        input: JsonValue,
        parent_ctx: Context,
        *,
        subprocess: SubprocessAdapter | None = None,
        cwd_init: str | None = None,
        instructions: str | None = None,
        metadata: Mapping[str, JsonValue] | None = None,
    ) -> SpawnHandle:
        """Start ``agent`` in a child context and return at once with its handle.

        An agent **object** runs in this process as a task, with this harness's slots,
        tools and environment (a durable harness keeps the child's own snapshot and
        ledger, under the child's execution id). It is refused (``ConfigError``, code
        ``detached_spawn_needs_reference``) when the environment's subprocess adapter is
        durable: every detached spawn there lands a manifest, and an object would not.
        An agent **reference** (``package.module:attr`` naming a module-level
        ``AgentHarness`` or ``GraphStep``) runs through ``subprocess`` (default: the
        environment's adapter, else in this process): with a local adapter it is its own
        OS process, and survives this one.
        The parent is checkpointed before a referenced child starts (its manifest names
        the parent's execution, which ``reattach_live_children`` restores) and, for
        every child, when it settles.
        """
        check_json_value(input, where="the input of the spawned agent")
        child_id = new_id("exec")
        cwd = cwd_init if cwd_init is not None else parent_ctx.cwd
        if isinstance(agent, str):
            adapter = subprocess or self.subprocess_adapter or InProcessAdapter()
            spec = SpawnSpec(
                target=agent,
                runner=AGENT_RUNNER,
                input=input,
                step_id="detached_spawn",
                execution_id=parent_ctx.id,
                cwd=cwd,
                metadata=spawn_metadata(
                    child_id, parent_ctx, instructions=instructions, extra=metadata
                ),
            )
            resolve_reference(agent)  # a typo fails the caller, not a background task

            async def run_referenced() -> JsonValue:
                try:
                    await self.checkpoint(parent_ctx)
                    child = await adapter.spawn(spec)
                    handle._bind(child)
                    return await child.wait()
                finally:
                    await self.checkpoint(parent_ctx)

            task = asyncio.get_running_loop().create_task(run_referenced())
            handle = SpawnHandle(handle_id=spec.handle_id, execution_id=child_id, task=task)
            return handle
        if subprocess is not None:
            raise ConfigError(
                "detached_spawn(subprocess=...) runs an agent named by reference "
                "('package.module:attr' of a module-level AgentHarness or GraphStep); "
                "an agent object cannot cross a process boundary"
            )
        if durable_adapter(self.subprocess_adapter):
            # A manifest for an object would name nothing a child process or the next
            # host could import: the child would die with this process, unannounced.
            raise ConfigError(
                f"detached_spawn of an agent object on harness {self.name!r}, whose "
                "subprocess adapter is durable: an object runs as a task of this process, "
                "lands no manifest and dies with it, so reattach_live_children could never "
                "find it. Pass a reference instead ('package.module:attr' naming a "
                "module-level AgentHarness or GraphStep)",
                code="detached_spawn_needs_reference",
            )
        child = Context(
            id=child_id,
            thread_id=parent_ctx.thread_id,
            resource_id=parent_ctx.resource_id,
            layers=default_layers(instructions),
            cwd=cwd,
            parent=parent_ctx,
        )
        runner = AgentHarness(
            name=f"{self.name}/spawn",
            agent_graph=agent,
            model_slots=self.model_slots,
            tools=self.tools,
            params=self.params,
            environment=self.environment,
        )
        runner.bind(child)

        async def body() -> JsonValue:
            try:
                return await runner.execute(child, input)
            finally:
                await self.checkpoint(parent_ctx)

        task = asyncio.get_running_loop().create_task(body())
        return SpawnHandle(
            handle_id=new_id("spawn"), execution_id=child_id, task=task, context=child
        )

    @property
    def subprocess_adapter(self) -> SubprocessAdapter | None:
        """The environment's ``SubprocessAdapter``, if it has one."""
        return self.environment.subprocess

    async def clear_checkpoint(self, execution_id: str) -> None:
        """Discard the snapshot, every ledger entry and every answer of ``execution_id``.

        ``checkpoint_store.clear()`` alone would strand the ledger's entries, which
        nothing else enumerates (and a later execution with the same id would replay
        them). The snapshot goes last: if this is cut short, the execution still has
        one, and clearing again finishes the job.
        """
        for pending in list(self._pending_answers):
            if pending[0] == execution_id:
                del self._pending_answers[pending]
        if self.checkpoint_store is not None:
            await clear_execution(self.checkpoint_store.storage, execution_id)

    # --- asking the person --------------------------------------------------------------

    async def enqueue_ask_user(self, ctx: Context, prompt_id: str, question: JsonValue) -> None:
        """Put a question in the context's ask-user queue (durable: it is checkpointed)."""
        if all(prompt.id != prompt_id for prompt in ctx.ask_user):
            ctx.ask_user.append(AskUserPrompt(id=prompt_id, input=question, created_at=time.time()))
            await self.checkpoint(ctx)

    async def answer(self, execution_id: str, prompt_id: str, text: str) -> None:
        """Record the person's answer to a prompt (durably, with a checkpoint store)."""
        store = self.checkpoint_store
        if store is not None:
            await store.storage.set(answer_key(execution_id, prompt_id), {"text": text})
        self._pending_answers[(execution_id, prompt_id)] = text
        event = self._answered.get((execution_id, prompt_id))
        if event is not None:
            event.set()

    async def find_answer(self, execution_id: str, prompt_id: str) -> str | None:
        """The recorded answer to a prompt, if there is one (this process's, or the store's)."""
        text = self._pending_answers.get((execution_id, prompt_id))
        if text is None and self.checkpoint_store is not None:
            value = await self.checkpoint_store.storage.get(answer_key(execution_id, prompt_id))
            found = value.get("text") if isinstance(value, dict) else None
            if isinstance(found, str):
                text = found
        return text

    async def wait_for_answer(
        self, ctx: Context, prompt_id: str, *, suspend: bool, poll: float = 0.25
    ) -> str:
        """The answer to ``prompt_id``: at once if recorded, else suspend or wait for it.

        ``suspend=True`` raises ``AwaitingAnswerError`` so the process may exit; a later
        resume finds the answer (given through ``answer()`` or ``little-workflow answer``).
        Otherwise this waits, for an answer in this process or, polling, in the store.
        """
        key = (ctx.id, prompt_id)
        event = self._answered.setdefault(key, asyncio.Event())
        try:
            while True:
                text = await self.find_answer(ctx.id, prompt_id)
                if text is not None:
                    return text
                if suspend:
                    question = next((p.input for p in ctx.ask_user if p.id == prompt_id), None)
                    raise AwaitingAnswerError(
                        f"execution {ctx.id!r} waits for an answer to prompt {prompt_id!r}; "
                        "answer it and resume",
                        execution_id=ctx.id,
                        prompt_id=prompt_id,
                        question=question,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), poll)
        finally:
            self._answered.pop(key, None)


_ANSWER_DIGEST = 24


async def clear_execution(storage: StorageAdapter, execution_id: str) -> ClearedExecution:
    """Discard the recovery data of ``execution_id`` in ``storage`` (``clear_checkpoint``).

    Its snapshot, every ledger entry and every answer, the snapshot last: if this is cut
    short, the execution still has one, and clearing again finishes the job.
    """
    ledger_entries = len(await entry_keys(storage, execution_id))
    await StepLedger.clear_execution(storage, execution_id)
    prefix = answer_prefix(execution_id)
    answers = 0
    for key in await storage.list(prefix):
        suffix = key[len(prefix) :]
        if len(suffix) == _ANSWER_DIGEST and all(c in "0123456789abcdef" for c in suffix):
            await storage.delete(key)
            answers += 1
    key = snapshot_key(execution_id)
    had_snapshot = await storage.get(key) is not None
    await storage.delete(key)
    return ClearedExecution(
        execution_id=execution_id,
        snapshot=had_snapshot,
        ledger_entries=ledger_entries,
        answers=answers,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ClearedExecution:
    """What ``clear_execution`` removed."""

    execution_id: str
    snapshot: bool
    ledger_entries: int
    answers: int

    @property
    def empty(self) -> bool:
        """Whether there was nothing to remove."""
        return not self.snapshot and not self.ledger_entries and not self.answers


def answer_prefix(execution_id: str) -> str:
    """``execution:<id>:answer:``, the prefix of the keys of an execution's answers."""
    return f"execution:{validate_id(execution_id, what='execution id')}:answer:"


def answer_key(execution_id: str, prompt_id: str) -> str:
    """The storage key of the answer to a prompt (the prompt id is hashed: it is a path)."""
    digest = hashlib.sha256(prompt_id.encode("utf-8")).hexdigest()[:_ANSWER_DIGEST]
    return f"{answer_prefix(execution_id)}{digest}"
