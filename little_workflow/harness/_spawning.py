"""Agents and code run through a ``SubprocessAdapter``; rebinding them after a restart.

Three surfaces share this module:

* ``AgentHarness.detached_spawn(agent, ..., subprocess=adapter)`` and the
  ``subprocess=`` override of ``spawn``/``run_code`` steps hand a ``SpawnSpec`` to an
  adapter. What crosses a process boundary is a **reference** (``package.module:attr``),
  never a Python object: an agent is named by a module-level ``AgentHarness`` (the
  child runs it with that harness's slots, tools and environment) or ``GraphStep``;
  code by its function's own importable name.
* ``run_spawned_agent`` is the runner a child calls for an agent reference: it builds
  the child's context from the spec and streams every item appended to it to the host.
* ``reattach_live_children(harness)`` is the boot-time recovery of the seed's "Host
  Restart": the adapter's live children, and each one's parent context restored from
  its snapshot.

A step's child gets a **deterministic handle id** (a digest of the execution id and the
step path), so a step re-run after a host crash finds the child it started (still
running, or finished with a result nobody recorded yet) instead of paying for another.
A child that failed or was lost is started again: that is a step re-run like any other.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from little_workflow.codec import JsonValue, check_json_value
from little_workflow.errors import ConfigError, LittleWorkflowError
from little_workflow.harness._context import Context, ContextLayer, Item, default_layers
from little_workflow.platform import (
    ChildContext,
    SpawnSpec,
    SubprocessAdapter,
    SubprocessHandle,
    resolve_reference,
)
from little_workflow.platform._threads import call_user

if TYPE_CHECKING:
    from little_workflow.harness._harness import AgentHarness

__all__ = [
    "AGENT_RUNNER",
    "LiveChildren",
    "dispatch",
    "durable_adapter",
    "reattach_live_children",
    "run_spawned_agent",
    "spawn_metadata",
    "step_handle_id",
]

logger = logging.getLogger("little_workflow.harness")

#: The runner a child calls for an agent reference (``run_spawned_agent``).
AGENT_RUNNER = "little_workflow.harness:run_spawned_agent"


def spawn_metadata(
    child_execution_id: str,
    parent: Context,
    *,
    instructions: str | None = None,
    extra: Mapping[str, JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """What ``run_spawned_agent`` needs to build the child's context, plus the caller's."""
    metadata: dict[str, JsonValue] = dict(extra or {})
    metadata.update(
        childExecutionId=child_execution_id,
        threadId=parent.thread_id,
        resourceId=parent.resource_id,
        instructions=instructions,
    )
    return metadata


def durable_adapter(adapter: SubprocessAdapter | None) -> bool:
    """Whether ``adapter`` keeps manifests (has storage): its children outlive this host."""
    return adapter is not None and getattr(adapter, "storage", None) is not None


def step_handle_id(execution_id: str, path: str) -> str:
    """The handle id of the child a step at ``path`` of ``execution_id`` starts."""
    digest = hashlib.sha256(f"{execution_id}\0{path}".encode()).hexdigest()[:32]
    return f"step-{digest}"


async def dispatch(adapter: SubprocessAdapter, spec: SpawnSpec) -> JsonValue:
    """Run ``spec`` through ``adapter`` and wait for its result.

    A child already started under ``spec.handle_id`` that is running, or finished with a
    result, is rebound rather than started again.
    """
    handle = await adapter.reattach(spec.handle_id)
    if handle is None or _failed(handle):
        handle = await adapter.spawn(spec)
    return await handle.wait()


def _failed(handle: SubprocessHandle) -> bool:
    failed = getattr(handle, "failed", None)
    return bool(failed()) if callable(failed) else False


async def run_spawned_agent(reference: str, child: ChildContext, input: JsonValue) -> JsonValue:
    """Run the agent ``reference`` names in a fresh context; the child calls this.

    ``reference`` names an ``AgentHarness`` (run as it is configured) or a ``GraphStep``
    (run by a harness of its own, without model slots or tools: code-only graphs). Each
    item appended to the context is emitted as ``{"type": "items", "items": [...]}``.
    A plain function is a background worker: called as ``fn(child, input)``, like a
    code target, with ``child.emit`` for its own frames.
    """
    from little_workflow.harness._harness import AgentHarness

    target = resolve_reference(reference)
    if isinstance(target, AgentHarness):
        harness = target
    elif all(hasattr(target, name) for name in ("id", "kind", "config", "run")):  # a GraphStep
        harness = AgentHarness(name=reference, agent_graph=target)
    elif callable(target):  # a background worker: target(child, input), as a code target
        result = await call_user(target, child, input)
        check_json_value(result, where=f"the result of spawned {reference!r}")
        value: JsonValue = result
        return value
    else:
        raise ConfigError(
            f"spawned agent {reference!r} is a {type(target).__name__}; name a "
            "module-level AgentHarness, GraphStep or function(child, input)"
        )
    metadata = child.metadata
    execution_id = metadata.get("childExecutionId")
    instructions = metadata.get("instructions")
    thread_id, resource_id = metadata.get("threadId"), metadata.get("resourceId")
    ctx = Context(
        id=execution_id if isinstance(execution_id, str) else f"{child.handle_id}.agent",
        thread_id=thread_id if isinstance(thread_id, str) else None,
        resource_id=resource_id if isinstance(resource_id, str) else None,
        layers=default_layers(instructions if isinstance(instructions, str) else None),
        cwd=child.cwd,
    )

    async def stream(items: Sequence[Item]) -> None:
        await child.emit({"type": "items", "items": [item.to_json() for item in items]})

    ctx.item_listeners.append(stream)
    return await harness.execute(ctx, input)


@dataclass(frozen=True, slots=True)
class LiveChildren:
    """What ``reattach_live_children`` found: live handles, and their parents' contexts."""

    handles: list[SubprocessHandle] = field(default_factory=list)
    #: ``handle_id -> parent context`` for every handle that carries an execution id
    #: with a snapshot that could be restored.
    contexts: dict[str, Context] = field(default_factory=dict)
    #: ``handle_id -> why its parent context could not be restored`` (a snapshot of
    #: another schema, a corrupt one, one holding a layer the context lacks): the handle
    #: is still in ``handles``; the others are restored regardless.
    failed: dict[str, LittleWorkflowError] = field(default_factory=dict)


#: ``context=`` of ``reattach_live_children``: the layers (copied for each execution), or
#: a function returning fresh ones (called for each execution).
LayersOption = Sequence[ContextLayer] | Callable[[], Sequence[ContextLayer]]


def _fresh_layers(context: LayersOption) -> Callable[[], list[ContextLayer]]:
    """A function giving each restored execution layer objects of its own.

    A restore loads the snapshot's state into the layers it is given: two executions
    handed the same objects would both end up with the last one's state.
    """
    if callable(context):
        factory = context
        return lambda: list(factory())
    template = list(context)
    try:
        copy.deepcopy(template)
    except Exception as exc:
        raise ConfigError(
            "reattach_live_children(context=[...]): the layers cannot be copied for each "
            f"execution ({type(exc).__name__}: {exc}); pass context=a function that returns "
            "fresh layers instead"
        ) from exc
    return lambda: copy.deepcopy(template)


async def reattach_live_children(harness: AgentHarness, **restore: Any) -> LiveChildren:
    """The seed's host-restart step: live children, and their restored parent contexts.

    Lists the live children of ``harness.environment.subprocess`` and restores the
    context of each one's execution (``harness.restore``; ``restore`` keyword arguments
    are passed on as ``RestoreContextOptions``). ``context=`` may be the layers, which
    each execution gets a deep copy of (the objects passed are templates, never loaded
    into), or a function returning fresh layers, called once per execution. Children of
    one execution share its context. A parent context that cannot be restored (a typed
    ``LittleWorkflowError``) is reported in ``failed`` for each of its children, and the
    others are restored. With no adapter, or one without storage, this returns nothing
    at once.
    """
    from little_workflow.harness._harness import RestoreContextOptions

    adapter = harness.subprocess_adapter
    if adapter is None:
        return LiveChildren()
    layers = restore.pop("context", None)
    fresh = None if layers is None else _fresh_layers(layers)
    base = RestoreContextOptions(**restore)
    handles = list(await adapter.list_live())
    contexts: dict[str, Context] = {}
    failed: dict[str, LittleWorkflowError] = {}
    restored: dict[str, Context | LittleWorkflowError | None] = {}
    for handle in handles:
        execution_id = handle.execution_id
        if execution_id is None:
            continue
        if execution_id not in restored:
            options = base if fresh is None else replace(base, context=fresh())
            try:
                restored[execution_id] = await harness.restore(execution_id, options)
            except LittleWorkflowError as exc:
                logger.warning(
                    "the context of execution %r (parent of live child %r) was not restored: %s",
                    execution_id,
                    handle.handle_id,
                    exc,
                )
                restored[execution_id] = exc
        found = restored[execution_id]
        if isinstance(found, LittleWorkflowError):
            failed[handle.handle_id] = found
        elif found is not None:
            contexts[handle.handle_id] = found
    return LiveChildren(handles=handles, contexts=contexts, failed=failed)
