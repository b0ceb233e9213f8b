"""``GraphRun``: one execution of an agent graph in a context, through a recorder.

The leaf steps (``_graph``) call back here: this is where a model call is built from the
context, made (or replayed) through ``run_unit``, and appended to the item log; where
the tool calls a model asked for are run one by one, each its own unit, and their
results (or errors, which go back to the model) appended.

With ``composite_units`` (the step ledger) a ``sequence``, ``loop`` or ``branch`` is a
unit too (kind ``composite``): once it completed, it replays whole, without descending.
A spawned agent runs in a child ``GraphRun`` that shares its root's recorder and
frontier: the execution has one frontier, one snapshot and one ask-user queue. Its
context is not snapshotted, so its composites are not units: a spawn step re-run after
a crash rebuilds the child's conversation from the replays of its leaf steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from little_workflow._deltas import DELTA_ROUTE
from little_workflow._failures import error_code, error_message, is_interruption
from little_workflow._tracing import TRACE, model_attributes, tool_attributes, traced
from little_workflow.codec import JsonValue, check_json_value
from little_workflow.durable._recorder import (
    Recorded,
    RecordedFailure,
    Recorder,
    Unit,
    run_unit,
)
from little_workflow.durable._side_effects import declared_side_effect
from little_workflow.errors import (
    ConfigError,
    LittleWorkflowError,
    ToolArgumentsError,
    ToolCallError,
)
from little_workflow.harness._context import Context, Item, default_layers, run_append_pipeline
from little_workflow.harness._graph import (
    AskUser,
    CallModel,
    GraphStep,
    InvokeTool,
    RunCode,
    RunToolCalls,
    Spawn,
    child_path,
    indexed_path,
    step_identity,
)
from little_workflow.harness._redaction import has_redacted_arguments
from little_workflow.harness._slots import resolve_slot
from little_workflow.harness._spawning import AGENT_RUNNER, dispatch, spawn_metadata, step_handle_id
from little_workflow.harness.models import (
    FilePart,
    ImagePart,
    Message,
    ModelRequest,
    ModelResponse,
    TextPart,
)
from little_workflow.harness.models import call_model as ask_provider
from little_workflow.platform import InProcessAdapter, SpawnSpec, reference_of
from little_workflow.platform._threads import call_user

if TYPE_CHECKING:
    from little_workflow.artifacts import StepArtifacts
    from little_workflow.harness._harness import AgentHarness
    from little_workflow.memory import MemoryStore

__all__ = ["COMPOSITE_KINDS", "GraphRun", "ToolCallError", "ToolContext", "input_message"]

#: Step kinds that only run other steps: ledger units of kind ``composite``.
COMPOSITE_KINDS = frozenset({"sequence", "loop", "branch"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext:
    """What a tool that declares a ``ctx`` parameter receives."""

    #: The execution id of the agent context (in a workflow run: the session's id).
    execution_id: str
    #: The unit's path, e.g. ``agent.turns[2].tools[call_7]``: stable across a resume.
    path: str
    #: The id the model gave this call (``None`` for an ``invoke_tool`` step).
    tool_call_id: str | None
    context: Context

    @property
    def idempotency_key(self) -> str:
        """``<execution id>/<path>``: the same if the call is re-issued after a crash."""
        return f"{self.execution_id}/{self.path}"

    @property
    def side_effect_key(self) -> str:
        """The key a side-effecting tool hands the far end: ``idempotency_key``."""
        return self.idempotency_key

    @property
    def artifacts(self) -> StepArtifacts:
        """The run's artifacts, seen from this call (``<session>/<path>``)."""
        artifacts: StepArtifacts = _inherited(self.context, "artifacts")
        return artifacts.at(self.path)

    @property
    def memory(self) -> MemoryStore:
        """The memory store of the run this agent works in."""
        memory: MemoryStore = _inherited(self.context, "memory")
        return memory


def _inherited(context: Context | None, store: str) -> Any:
    """``context``'s ``store`` (``artifacts``, ``memory``), else its nearest ancestor's."""
    while context is not None:
        found = getattr(context, store)
        if found is not None:
            return found
        context = context.parent
    raise ConfigError(f"this agent has no {store} store: run it inside a workflow run")


def input_message(value: JsonValue, attachments: Sequence[ImagePart | FilePart] = ()) -> Message:
    """The user message that carries an execution's input (and the parts sent with it)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if not attachments:
        return Message(role="user", content=text)
    return Message(role="user", content=(TextPart(text=text), *attachments))


def _content(value: JsonValue) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


class GraphRun:
    """Executes graph steps for one context (see the module docstring)."""

    def __init__(
        self,
        harness: AgentHarness,
        ctx: Context,
        recorder: Recorder,
        input: JsonValue = None,
        *,
        composite_units: bool = False,
        root: GraphRun | None = None,
    ) -> None:
        self.harness = harness
        self.ctx = ctx
        self.recorder = recorder
        self.input = input
        self.composite_units = composite_units
        #: The execution's run (``self``, unless this runs a spawned agent).
        self.root: GraphRun = root if root is not None else self
        #: Paths of the steps in flight, each run's outermost with its input: what a
        #: checkpoint records as its frontier. Shared with the runs of spawned agents.
        self.frontier: list[tuple[str, JsonValue]] = root.frontier if root is not None else []
        #: The path the execution's graph runs at (its root step's; set by the harness).
        self.root_path: str | None = None
        #: The frontier when a step raised (set once, at the innermost step).
        self.failed_frontier: list[tuple[str, JsonValue]] | None = None
        #: Snapshots taken while this execution ran.
        self.checkpoints = 0
        self._depth = 0
        #: The tools offered by the model call that gave the last answer (``None``: all).
        #: A tool call the model makes outside them is refused like an unknown tool: a
        #: step offering a few tools must not reach every tool of the harness.
        self.offered: tuple[str, ...] | None = None

    def in_flight(self) -> list[tuple[str, JsonValue]]:
        """The frontier to snapshot: the steps in flight, or the root about to run."""
        if not self.frontier and self.root_path is not None:
            return [(self.root_path, self.input)]
        return list(self.frontier)

    async def run_step(self, step: GraphStep, path: str) -> JsonValue:
        """Run ``step`` at ``path`` (it is on the frontier while it runs)."""
        self.frontier.append((path, self.input if self._depth == 0 else None))
        self._depth += 1
        try:
            if self.composite_units and step.kind in COMPOSITE_KINDS:
                unit = Unit(
                    path=path, kind="composite", step_id=step.id, identity=step_identity(step)
                )

                async def compute(_: Mapping[str, JsonValue]) -> JsonValue:
                    return await step.run(self, path)

                return await run_unit(self.recorder, unit, compute, cursor=self.ctx.items)
            return await step.run(self, path)
        except BaseException:
            if self.root.failed_frontier is None:
                self.root.failed_frontier = list(self.frontier)
            raise
        finally:
            self._depth -= 1
            self.frontier.pop()

    async def append(self, ctx: Context, items: list[Item]) -> None:
        """Append through the layers' hooks; the harness checkpoints after it, if durable.

        The checkpoint is the execution's (the root context's), also when ``ctx`` is a
        spawned agent's: a child context has no snapshot of its own.
        """
        added = run_append_pipeline(ctx, items)
        if added:
            await self.harness.appended(self.root.ctx, self.root)
            for listener in ctx.item_listeners:
                await listener(added)

    # --- model calls ------------------------------------------------------------------

    async def call_model(self, step: CallModel, path: str) -> JsonValue:
        """Make or replay one model call; append the answer to the item log."""
        slot = resolve_slot(self.harness.model_slots, step.slot)
        built: list[ModelRequest] = []

        def request() -> ModelRequest:
            # Built only when the call is made: a replayed call needs neither the request
            # (the whole conversation so far) nor its JSON, which would make a resume's
            # cost grow with the square of the conversation.
            if not built:
                temperature = step.temperature if step.temperature is not None else slot.temperature
                options = slot.options if step.options is None else step.options.over(slot.options)
                built.append(
                    ModelRequest(
                        model=slot.model,
                        messages=tuple(self.ctx.render()),
                        tools=tuple(self.harness.tools.specs(step.tools)),
                        temperature=temperature,
                        max_tokens=step.max_tokens
                        if step.max_tokens is not None
                        else slot.max_tokens,
                        response_format=step.response_format,
                        # A request has every option field, under the same name.
                        **dict(options),
                    )
                )
            return built[0]

        unit = Unit(path=path, kind="model", step_id=step.id, identity=step_identity(step))

        def prepare(_: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
            return {"slot": step.slot, "request": request().model_dump(mode="json", by_alias=True)}

        async def compute(_: Mapping[str, JsonValue]) -> JsonValue:
            route = DELTA_ROUTE.get()
            on_delta = None if route is None else route.sink(path, step.slot)
            trace = TRACE.get()
            try:
                if trace is None:
                    response = await ask_provider(slot.provider, request(), on_delta)
                else:
                    with traced(trace, "model", path, model_attributes(slot)) as span:
                        response = await ask_provider(slot.provider, request(), on_delta)
                        if span is not None:
                            span.model_answered(response)
            finally:
                if on_delta is not None:
                    # Before the answer commits: a watcher sees the stream's last deltas
                    # ahead of the message that replaces them.
                    on_delta.end()
            value: JsonValue = response.model_dump(mode="json", by_alias=True)
            return value

        value = await run_unit(self.recorder, unit, compute, prepare=prepare, cursor=self.ctx.items)
        response = ModelResponse.model_validate(value)
        self.offered = step.tools
        await self.append(self.ctx, [Item(message=response.message, response_id=response.id)])
        return value

    # --- tool calls -------------------------------------------------------------------

    async def run_tool_calls(self, step: RunToolCalls, path: str) -> JsonValue:
        """Run the tool calls of the last model answer, in order; their results."""
        answer = self.ctx.items.last_assistant()
        results: list[JsonValue] = []
        if answer is None:
            return results
        identity = step_identity(step)
        keys: set[str] = set()
        for call in answer.tool_calls:
            # A model may repeat an id within one answer: each call still needs a path of
            # its own, or the second would be handed the first one's recorded result.
            key, repeat = call.id, 0
            while key in keys:
                repeat += 1
                key = f"{call.id}#{repeat}"
            keys.add(key)
            results.append(
                await self._tool_call(
                    path=indexed_path(path, key),
                    step_id=step.id,
                    identity=identity,
                    name=call.name,
                    arguments=dict(call.arguments),
                    tool_call_id=call.id,
                )
            )
        return results

    async def invoke_tool(self, step: InvokeTool, path: str) -> JsonValue:
        """Call one tool with the step's arguments (or the arguments its function computes)."""
        arguments: Any = step.arguments
        if callable(arguments):
            arguments = await call_user(arguments, self.ctx)
        check_json_value(arguments, where=f"the arguments of tool step {path!r}")
        return await self._tool_call(
            path=path,
            step_id=step.id,
            identity=step_identity(step),
            name=step.name,
            arguments=dict(arguments),
            tool_call_id=None,
        )

    async def _tool_call(
        self,
        *,
        path: str,
        step_id: str,
        identity: str,
        name: str,
        arguments: dict[str, JsonValue],
        tool_call_id: str | None,
    ) -> JsonValue:
        hook = self.harness.tools.hook(name)
        # A tool whose function is marked @side_effect goes through the outbox: its start
        # is durable before it runs, and a start a crash left without outcome is
        # reconciled (durable/_side_effects.py) instead of being called blind.
        declared = (
            declared_side_effect(self.harness.tools.get(name))
            if hook is None and name in self.harness.tools.registry
            else None
        )
        unit = Unit(
            path=path,
            kind="tool",
            step_id=step_id,
            identity=identity,
            detail={"name": name, "arguments": arguments},
            durable_start=hook is not None or declared is not None,
        )
        tool_context = ToolContext(
            execution_id=self.ctx.id, path=path, tool_call_id=tool_call_id, context=self.ctx
        )
        reconcile = None
        if declared is not None and declared.reconcile is not None:
            side_effect = declared

            async def reconcile(_detail: Mapping[str, JsonValue]) -> Recorded | None:
                key = tool_context.side_effect_key
                try:
                    answer = await side_effect.ask(key)
                    if answer is not None:
                        check_json_value(answer.result, where=f"reconcile({key!r})")
                except BaseException as exc:
                    if is_interruption(exc):
                        raise
                    # The model is told, nothing is recorded: the call stays in flight
                    # and the next resume asks the hook again.
                    raise ToolCallError(
                        f"reconcile({key!r}) of tool {name!r} raised "
                        f"{type(exc).__name__}: {error_message(exc)}",
                        error_code="reconcile_failed",
                    ) from exc
                return None if answer is None else Recorded(value=answer.result)

        offered = self.offered if tool_call_id is not None else None

        async def compute(detail: Mapping[str, JsonValue]) -> JsonValue:
            with traced(TRACE.get(), "tool", path, tool_attributes(name, tool_call_id)):
                return await call_tool(detail)

        async def call_tool(detail: Mapping[str, JsonValue]) -> JsonValue:
            recorded_arguments = detail.get("arguments")
            try:
                if offered is not None and name not in offered:
                    raise ToolArgumentsError(
                        f"unknown tool {name!r}; available: {', '.join(offered) or 'none'}",
                        code="unknown_tool",
                    )
                if hook is not None:
                    result: JsonValue = await hook.run(detail, tool_context)
                else:
                    tool = self.harness.tools.get(name)
                    if has_redacted_arguments(tool.redaction, recorded_arguments):
                        # A replay after a restart: the real value was never stored.
                        raise ToolCallError(
                            f"the arguments of this call to {name!r} were redacted when "
                            "they were stored and are not available after a restart; call "
                            "the tool again with the real values",
                            error_code="tool_arguments_redacted",
                        )
                    result = await tool.invoke(
                        recorded_arguments if isinstance(recorded_arguments, dict) else {},
                        ctx=tool_context,
                    )
            except LittleWorkflowError as exc:
                # Unknown tool, bad arguments, an unserializable result: the model (or the
                # tool) got it wrong, and the model is told so.
                raise ToolCallError(exc.message, error_code=exc.code) from exc
            except BaseException as exc:
                # A tool is untrusted code: whatever it raises (SystemExit included) is
                # the call's outcome, told to the model; only an interruption goes up.
                if is_interruption(exc):
                    raise
                raise ToolCallError(
                    f"{type(exc).__name__}: {error_message(exc)}", error_code=error_code(exc)
                ) from exc
            return result

        try:
            value = await run_unit(
                self.recorder,
                unit,
                compute,
                prepare=None if hook is None else hook.prepare,
                reconcile=reconcile,
                cursor=self.ctx.items,
            )
        except (ToolCallError, RecordedFailure) as exc:
            if tool_call_id is not None:
                # Only a call the model made is answered in the conversation: a tool
                # message without its assistant call is refused by providers.
                message = Message(
                    role="tool",
                    tool_call_id=tool_call_id,
                    name=name,
                    content=exc.message,
                    is_error=True,
                )
                await self.append(self.ctx, [Item(message=message, call_path=path)])
            return {"error": {"code": exc.error_code, "message": exc.message}}
        if tool_call_id is not None:
            await self.append(
                self.ctx,
                [
                    Item(
                        message=Message(
                            role="tool",
                            tool_call_id=tool_call_id,
                            name=name,
                            content=_content(value),
                        ),
                        call_path=path,
                    )
                ],
            )
        return value

    # --- code and spawned agents ------------------------------------------------------

    async def run_code(self, step: RunCode, path: str) -> JsonValue:
        """Run (or replay) ``fn(ctx, input)``."""
        unit = Unit(path=path, kind="code", step_id=step.id, identity=step_identity(step))

        async def compute(_: Mapping[str, JsonValue]) -> JsonValue:
            if step.subprocess is not None:
                execution_id = self.root.ctx.id
                spec = SpawnSpec(
                    handle_id=step_handle_id(execution_id, path),
                    target=reference_of(step.fn),
                    input=self.input,
                    step_id=step.id,
                    execution_id=execution_id,
                    cwd=self.ctx.cwd,
                    metadata={"path": path},
                )
                return await dispatch(step.subprocess, spec)
            result = await call_user(step.fn, self.ctx, self.input)
            check_json_value(result, where=f"the output of code step {path!r}")
            value: JsonValue = result
            return value

        return await run_unit(self.recorder, unit, compute, cursor=self.ctx.items)

    async def ask_user(self, step: AskUser, path: str) -> JsonValue:
        """Ask (or replay the recorded answer); the answer becomes a user message.

        The prompt (its id is the step's path) is queued on the execution's context, in a
        spawned agent too: that is the queue the snapshot holds and answers are keyed by.
        """
        unit = Unit(path=path, kind="code", step_id=step.id, identity=step_identity(step))
        execution = self.root.ctx

        async def compute(_: Mapping[str, JsonValue]) -> JsonValue:
            question: Any = step.question
            if callable(question):
                question = await call_user(question, self.ctx)
            check_json_value(question, where=f"the question of step {path!r}")
            await self.harness.enqueue_ask_user(execution, path, question)
            text = await self.harness.wait_for_answer(execution, path, suspend=step.suspend)
            execution.ask_user = [prompt for prompt in execution.ask_user if prompt.id != path]
            answer = Item(message=Message(role="user", content=text), call_path=path)
            await self.append(self.ctx, [answer])
            return text

        return await run_unit(self.recorder, unit, compute, cursor=self.ctx.items)

    async def spawn(self, step: Spawn, path: str) -> JsonValue:
        """Run the child agent in a child context (same recorder, paths under this one).

        A recorded spawn replays without building the child at all.
        """
        unit = Unit(path=path, kind="spawn", step_id=step.id, identity=step_identity(step))

        async def compute(_: Mapping[str, JsonValue]) -> JsonValue:
            child_input: Any = step.input
            if callable(child_input):
                child_input = await call_user(child_input, self.ctx)
            check_json_value(child_input, where=f"the input of spawn step {path!r}")
            if isinstance(step.agent, str):
                adapter = step.subprocess or self.harness.subprocess_adapter or InProcessAdapter()
                execution_id = self.root.ctx.id
                spec = SpawnSpec(
                    handle_id=step_handle_id(execution_id, path),
                    target=step.agent,
                    runner=AGENT_RUNNER,
                    input=child_input,
                    step_id=step.id,
                    execution_id=execution_id,
                    cwd=self.ctx.cwd,
                    metadata=spawn_metadata(
                        f"{self.ctx.id}.{step.id}",
                        self.ctx,
                        instructions=step.instructions,
                        extra={"path": path},
                    ),
                )
                return await dispatch(adapter, spec)
            child = Context(
                id=f"{self.ctx.id}.{step.id}",
                thread_id=self.ctx.thread_id,
                resource_id=self.ctx.resource_id,
                layers=default_layers(step.instructions),
                cwd=self.ctx.cwd,
                parent=self.ctx,
            )
            # A child context has no snapshot of its own: its checkpoint is the execution's.
            self.harness.bind(child, self.root.ctx)
            if child_input is not None:
                await self.append(child, [Item(message=input_message(child_input))])
            # No composite units in the child: its context is not snapshotted, so a re-run
            # rebuilds its conversation from the replays of its leaf steps, which a
            # composite replayed whole would skip.
            child_run = GraphRun(self.harness, child, self.recorder, child_input, root=self.root)
            return await child_run.run_step(step.agent, child_path(path, step.agent.id))

        return await run_unit(self.recorder, unit, compute, cursor=self.ctx.items)
