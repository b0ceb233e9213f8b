"""The agent graph: a tree of steps, each with an id, run against a ``Context``.

Leaf steps: ``call_model(slot)``, ``run_tool_calls()`` (the tool calls the last model
answer asked for), ``invoke_tool(name, arguments)``, ``run_code(fn)``,
``spawn(agent, input)``. Composite steps: ``sequence([...])``, ``loop([...], until=,
max_iterations=)``, ``branch(condition, then, otherwise)``.

A step's **path** is its parent's path plus its id; inside a loop, the iteration index
comes after the loop's id (``agent.turns[2].model``), and a tool call's id after its
step's (``agent.turns[2].tools[call_7]``). Recorders key on the path. A step's
**identity** is a hash of its kind, id and configuration (a callable counts by its
qualified name): an edited step at a recorded path is a different step.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import ConfigError
from little_workflow.harness.models import ModelOptions, ResponseFormat
from little_workflow.lwir import BranchSegment
from little_workflow.platform import SubprocessAdapter, reference_of, resolve_reference
from little_workflow.platform._threads import call_user

if TYPE_CHECKING:
    from little_workflow.harness._execution import GraphRun

__all__ = [
    "AskUser",
    "Branch",
    "CallModel",
    "GraphStep",
    "InvokeTool",
    "Loop",
    "RunCode",
    "RunToolCalls",
    "SequenceStep",
    "Spawn",
    "ask_user",
    "branch",
    "call_model",
    "child_path",
    "invoke_tool",
    "loop",
    "run_code",
    "run_tool_calls",
    "sequence",
    "spawn",
    "step_identity",
]


class GraphStep(Protocol):
    """A step of an agent graph."""

    @property
    def id(self) -> str:
        """The step's id, unique among its siblings."""
        ...

    @property
    def kind(self) -> str:
        """``model``, ``tool_calls``, ``tool``, ``code``, ``spawn``, ``sequence``, ..."""
        ...

    def config(self) -> dict[str, JsonValue]:
        """What the step does, as JSON: the input of its identity."""
        ...

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Run the step at ``path``; its output."""
        ...


def _callable_name(function: Callable[..., Any]) -> str:
    module = getattr(function, "__module__", "?")
    return f"{module}:{getattr(function, '__qualname__', repr(function))}"


def step_identity(step: GraphStep) -> str:
    """The hash of the step's kind, id and configuration."""
    return sha256_digest({"kind": step.kind, "id": step.id, "config": step.config()})


def child_path(parent: str, step_id: str) -> str:
    """``parent.step_id`` (or ``step_id`` at the root)."""
    return f"{parent}.{step_id}" if parent else step_id


def indexed_path(path: str, key: str | int) -> str:
    """``path[key]``, with the key quoted when it is not a plain name (as LWIR paths do)."""
    return f"{path}{BranchSegment(str(key))}"


@dataclass(frozen=True, slots=True)
class CallModel:
    """Call the model in ``slot`` with the context's messages and the step's tools."""

    id: str
    slot: str
    #: Tool names offered to the model; ``None`` offers every tool of the harness.
    tools: tuple[str, ...] | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    #: Options over the slot's (``ModelOptions.over``).
    options: ModelOptions | None = None
    #: Structured output: the answer must be JSON matching this schema.
    response_format: ResponseFormat | None = None
    kind: str = field(default="model", init=False)

    def config(self) -> dict[str, JsonValue]:
        """Slot, tools and sampling settings."""
        config: dict[str, JsonValue] = {
            "slot": self.slot,
            "tools": None if self.tools is None else list(self.tools),
            "temperature": self.temperature,
            "maxTokens": self.max_tokens,
        }
        # Added only when set: the identity of a step recorded before they existed holds.
        if self.options is not None and self.options.identity():
            config["options"] = self.options.identity()
        if self.response_format is not None:
            config["responseFormat"] = self.response_format.model_dump(mode="json", by_alias=True)
        return config

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Make (or replay) the call; append the answer to the item log."""
        return graph.call_model(self, path)


@dataclass(frozen=True, slots=True)
class RunToolCalls:
    """Run every tool call the last model answer asked for; append their results."""

    id: str = "tools"
    kind: str = field(default="tool_calls", init=False)

    def config(self) -> dict[str, JsonValue]:
        """Nothing to configure: the model decides."""
        return {}

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Run (or replay) the calls."""
        return graph.run_tool_calls(self, path)


@dataclass(frozen=True, slots=True)
class InvokeTool:
    """Call one tool with fixed arguments, or arguments computed from the context."""

    id: str
    name: str
    arguments: Mapping[str, JsonValue] | Callable[..., Any] = field(default_factory=dict)
    kind: str = field(default="tool", init=False)

    def config(self) -> dict[str, JsonValue]:
        """The tool and its arguments (or the function that computes them)."""
        arguments: JsonValue = (
            _callable_name(self.arguments) if callable(self.arguments) else dict(self.arguments)
        )
        return {"name": self.name, "arguments": arguments}

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Call (or replay) the tool; its result (or ``{"error": ...}``) is the output."""
        return graph.invoke_tool(self, path)


@dataclass(frozen=True, slots=True)
class RunCode:
    """Run a Python function ``fn(ctx, input)`` (sync or async); its return is the output.

    With ``subprocess``, every dispatch runs ``fn`` through that adapter (in a child
    process, for a local adapter), by its importable name; there ``ctx`` is the child's
    ``ChildContext`` (ids, ``cwd``, ``emit``), not the agent's context.
    """

    id: str
    fn: Callable[..., Any]
    subprocess: SubprocessAdapter | None = None
    kind: str = field(default="code", init=False)

    def config(self) -> dict[str, JsonValue]:
        """The function, by qualified name."""
        return {"fn": _callable_name(self.fn)}

    async def run(self, graph: GraphRun, path: str) -> JsonValue:
        """Run (or replay) the function."""
        return await graph.run_code(self, path)


@dataclass(frozen=True, slots=True)
class Spawn:
    """Run another agent in a child context; its output is the step's.

    ``agent`` is a graph (run in this process, recorded under this step's path) or a
    reference ``package.module:attr`` to a module-level ``AgentHarness`` or graph, run
    through ``subprocess`` (else the harness's adapter, else in this process).
    """

    id: str
    agent: GraphStep | str
    input: JsonValue | Callable[..., Any] = None
    instructions: str | None = None
    subprocess: SubprocessAdapter | None = None
    kind: str = field(default="spawn", init=False)

    def config(self) -> dict[str, JsonValue]:
        """The child's identity and its input."""
        value: JsonValue = _callable_name(self.input) if callable(self.input) else self.input
        agent = self.agent
        return {
            "agent": agent if isinstance(agent, str) else step_identity(agent),
            "input": value,
            "instructions": self.instructions,
        }

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Run (or replay) the child agent."""
        return graph.spawn(self, path)


@dataclass(frozen=True, slots=True)
class AskUser:
    """Ask the person a question and wait for the answer (or suspend until it comes).

    The prompt is durable (it is in the snapshot's ask-user queue); the answer, once
    given, is the step's output and is appended to the conversation as a user message.
    """

    id: str
    question: JsonValue | Callable[..., Any]
    #: Raise ``AwaitingAnswerError`` instead of waiting, so the process may exit.
    suspend: bool = False
    kind: str = field(default="ask_user", init=False)

    def config(self) -> dict[str, JsonValue]:
        """The question (or the function that asks it)."""
        question: JsonValue = (
            _callable_name(self.question) if callable(self.question) else self.question
        )
        return {"question": question, "suspend": self.suspend}

    def run(self, graph: GraphRun, path: str) -> Awaitable[JsonValue]:
        """Ask (or replay the recorded answer)."""
        return graph.ask_user(self, path)


@dataclass(frozen=True, slots=True)
class SequenceStep:
    """Run ``steps`` in order; the output is the last one's."""

    id: str
    steps: tuple[GraphStep, ...]
    kind: str = field(default="sequence", init=False)

    def config(self) -> dict[str, JsonValue]:
        """The children's identities."""
        return {"steps": [step_identity(step) for step in self.steps]}

    async def run(self, graph: GraphRun, path: str) -> JsonValue:
        """Run the children under this path."""
        output: JsonValue = None
        for step in self.steps:
            output = await graph.run_step(step, child_path(path, step.id))
        return output


@dataclass(frozen=True, slots=True)
class Loop:
    """Run ``steps`` again and again: until ``until(ctx, output)`` or ``max_iterations``."""

    id: str
    steps: tuple[GraphStep, ...]
    until: Callable[..., Any] | None = None
    max_iterations: int = 10
    kind: str = field(default="loop", init=False)

    def config(self) -> dict[str, JsonValue]:
        """Children, stop condition and bound."""
        return {
            "steps": [step_identity(step) for step in self.steps],
            "until": None if self.until is None else _callable_name(self.until),
            "maxIterations": self.max_iterations,
        }

    async def run(self, graph: GraphRun, path: str) -> JsonValue:
        """Iterate; iteration ``i`` runs its children under ``path[i]``."""
        output: JsonValue = None
        for iteration in range(self.max_iterations):
            base = indexed_path(path, iteration)
            for step in self.steps:
                output = await graph.run_step(step, child_path(base, step.id))
            if self.until is not None and await call_user(self.until, graph.ctx, output):
                break
        return output


@dataclass(frozen=True, slots=True)
class Branch:
    """Run ``then`` if ``condition(ctx)``, else ``otherwise`` (if any)."""

    id: str
    condition: Callable[..., Any]
    then: GraphStep
    otherwise: GraphStep | None = None
    kind: str = field(default="branch", init=False)

    def config(self) -> dict[str, JsonValue]:
        """Condition and both arms."""
        return {
            "condition": _callable_name(self.condition),
            "then": step_identity(self.then),
            "otherwise": None if self.otherwise is None else step_identity(self.otherwise),
        }

    async def run(self, graph: GraphRun, path: str) -> JsonValue:
        """Run the chosen arm under this path."""
        if await call_user(self.condition, graph.ctx):
            return await graph.run_step(self.then, child_path(path, self.then.id))
        if self.otherwise is None:
            return None
        return await graph.run_step(self.otherwise, child_path(path, self.otherwise.id))


# --- builders ------------------------------------------------------------------------


def call_model(
    slot: str,
    *,
    id: str = "model",
    tools: Sequence[str] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    options: ModelOptions | None = None,
    response_format: ResponseFormat | None = None,
) -> CallModel:
    """A ``call_model`` step."""
    return CallModel(
        id=id,
        slot=slot,
        tools=None if tools is None else tuple(tools),
        temperature=temperature,
        max_tokens=max_tokens,
        options=options,
        response_format=response_format,
    )


def run_tool_calls(*, id: str = "tools") -> RunToolCalls:
    """A step running the tool calls of the last model answer."""
    return RunToolCalls(id=id)


def invoke_tool(
    name: str,
    arguments: Mapping[str, JsonValue] | Callable[..., Any] | None = None,
    *,
    id: str | None = None,
) -> InvokeTool:
    """An ``invoke_tool`` step (``arguments`` may be a function of the context)."""
    return InvokeTool(id=id or name, name=name, arguments=arguments or {})


def run_code(
    fn: Callable[..., Any], *, id: str | None = None, subprocess: SubprocessAdapter | None = None
) -> RunCode:
    """A ``run_code`` step calling ``fn(ctx, input)`` (through ``subprocess``, if given).

    ``ConfigError`` at once if ``subprocess`` is given and ``fn`` has no importable name.
    """
    if subprocess is not None:
        reference_of(fn)
    return RunCode(id=id or fn.__name__, fn=fn, subprocess=subprocess)


def spawn(
    agent: GraphStep | str,
    input: JsonValue | Callable[..., Any] = None,
    *,
    id: str = "spawn",
    instructions: str | None = None,
    subprocess: SubprocessAdapter | None = None,
) -> Spawn:
    """A ``spawn`` step running ``agent`` in a child context (see ``Spawn``).

    ``ConfigError`` at once for a ``subprocess`` override of an agent object, or a
    reference that does not import.
    """
    if isinstance(agent, str):
        resolve_reference(agent)
    elif subprocess is not None:
        raise ConfigError(
            f"spawn step {id!r}: a subprocess override runs an agent named by reference "
            "('package.module:attr'); an agent object cannot cross a process boundary"
        )
    return Spawn(id=id, agent=agent, input=input, instructions=instructions, subprocess=subprocess)


def ask_user(
    question: JsonValue | Callable[..., Any], *, id: str = "ask", suspend: bool = False
) -> AskUser:
    """An ``ask_user`` step (``question`` may be a function of the context)."""
    return AskUser(id=id, question=question, suspend=suspend)


def sequence(steps: Sequence[GraphStep], *, id: str = "sequence") -> SequenceStep:
    """A ``sequence`` step."""
    return SequenceStep(id=id, steps=tuple(steps))


def loop(
    steps: Sequence[GraphStep],
    *,
    until: Callable[..., Any] | None = None,
    max_iterations: int = 10,
    id: str = "loop",
) -> Loop:
    """A ``loop`` step."""
    return Loop(id=id, steps=tuple(steps), until=until, max_iterations=max_iterations)


def branch(
    condition: Callable[..., Any],
    then: GraphStep,
    otherwise: GraphStep | None = None,
    *,
    id: str = "branch",
) -> Branch:
    """A ``branch`` step."""
    return Branch(id=id, condition=condition, then=then, otherwise=otherwise)
