"""``@workflow`` and ``@step``: the declarations of the code-first front end.

Both decorators return the function itself, marked with a small frozen spec, so a
decorated function is still an ordinary, fully typed function (a test may call it
directly) and ``WorkflowContext.step`` keeps its parameter and return types. Nothing
here touches a run: the context (``_code_context``) and the program (``_code_program``)
read the specs.

A workflow is found again by its **qualified name**, ``module:qualname``: the run
records it, and a resume in another process (a worker, ``little-workflow resume``)
imports it. A workflow decorated in this process is also kept in a registry by that
name, so one defined in ``__main__`` or inside a function resumes in the process that
defined it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import re
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from pydantic import BaseModel

from little_workflow.errors import ConfigError, InvalidStepPathError
from little_workflow.lwir import RetryPolicy
from little_workflow.lwir._models import check_json_schema
from little_workflow.runtime._state import CODE_VERSION_PREFIX

__all__ = [
    "CODE_VERSION_PREFIX",
    "DeclaredEvents",
    "StepSpec",
    "WorkflowSpec",
    "checked_name",
    "declared_events",
    "load_workflow_function",
    "qualified_name",
    "registered_step",
    "source_hash",
    "step",
    "step_spec",
    "workflow",
    "workflow_spec",
]

F = TypeVar("F", bound=Callable[..., Any])
W = TypeVar("W", bound=Callable[..., Coroutine[Any, Any, Any]])

_STEP_ATTRIBUTE = "__little_workflow_step__"
_WORKFLOW_ATTRIBUTE = "__little_workflow_workflow__"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_DEFAULT_RETRY = RetryPolicy()
#: ``@workflow(events=...)`` as pinned: each event's JSON Schema (``None``: any JSON).
DeclaredEvents = dict[str, dict[str, Any] | None]
_REGISTRY: dict[str, Callable[..., Any]] = {}
#: ``@step`` functions decorated in this process, by qualified name: a resume compares
#: the code a run pinned with them (``_code_drift``).
_STEPS: dict[str, Callable[..., Any]] = {}


@dataclass(frozen=True, slots=True)
class StepSpec:
    """How a step function runs: its path name, identity, retry policy, outbox."""

    #: The step's name in paths (``fetch``, ``score[cand_1]``).
    name: str
    #: ``module:qualname``: what the log records as the step's identity.
    qualified: str
    retry: RetryPolicy
    #: ``side_effect=True``: each attempt goes through the outbox (so does a function
    #: marked ``@side_effect``, found when it is called: the marks may come in any order).
    side_effect: bool
    #: ``None``: the first call is at ``name``, later ones at ``name.visit[N]``. A number
    #: (LWIR's ``maxVisits``): every call at ``name.visit[N]`` from 0, at most that many.
    max_visits: int | None = None


@dataclass(frozen=True, slots=True)
class WorkflowSpec:
    """A code-first workflow: its name, qualified name, source hash and declared events."""

    name: str
    qualified: str
    #: A hash of the function's source when it was decorated ("" when there is none).
    source_hash: str
    #: ``@workflow(events=...)``: the events its waits take, and their schemas; ``None``
    #: when it declares none (then ``send`` cannot check an event before its wait).
    events: DeclaredEvents | None = None

    @property
    def version_id(self) -> str:
        """What a run of it records as its ``workflowVersionId``."""
        return f"{CODE_VERSION_PREFIX}{self.qualified}"


def qualified_name(function: Callable[..., Any]) -> str:
    """``module:qualname`` of ``function``."""
    return f"{function.__module__}:{function.__qualname__}"


def source_hash(function: Callable[..., Any]) -> str:
    """A hash of ``function``'s source (best effort: "" when Python has none)."""
    try:
        source = inspect.getsource(function)
    except (OSError, TypeError):
        return ""
    return "py-" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def checked_name(name: str, what: str) -> str:
    """``name`` if it can be a step path segment, else ``InvalidStepPathError``."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidStepPathError(
            f"{what} name {name!r} cannot be a step path segment: use letters, digits, "
            "'_' and '-', starting with a letter or digit (pass name=...)"
        )
    return name


@overload
def step(function: F, /) -> F: ...


@overload
def step(
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    side_effect: bool = False,
    max_visits: int | None = None,
) -> Callable[[F], F]: ...


def step(
    function: F | None = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    side_effect: bool = False,
    max_visits: int | None = None,
) -> F | Callable[[F], F]:
    """Declare a step function of code-first workflows (sync or async).

    ``name`` is its name in step paths (default: the function's ``__name__``);
    ``retry`` its retry policy (default: one attempt); ``side_effect=True`` sends each
    attempt through the outbox, and a ``@side_effect(reconcile=...)`` hook on the function
    settles an attempt a crash cut short (docs/runtime.md, "Side effects"); ``max_visits``
    (LWIR's ``maxVisits``) numbers every call ``name.visit[N]`` from 0 and allows that
    many in a scope (more raise ``StepFailedError``, ``max_visits_exceeded``). The function
    is returned unchanged; call it through ``ctx.step(fn, ...)`` to make the call durable.
    """

    if max_visits is not None and (
        isinstance(max_visits, bool) or not isinstance(max_visits, int) or max_visits < 1
    ):
        raise ConfigError(f"@step max_visits must be an int from 1, not {max_visits!r}")

    def mark(target: F) -> F:
        if not callable(target):
            raise ConfigError(f"@step needs a function, not {type(target).__name__}")
        spec = StepSpec(
            name=checked_name(name or target.__name__, "step"),
            qualified=qualified_name(target),
            retry=retry or _DEFAULT_RETRY,
            side_effect=side_effect,
            max_visits=max_visits,
        )
        setattr(target, _STEP_ATTRIBUTE, spec)
        _STEPS[spec.qualified] = target
        return target

    return mark if function is None else mark(function)


def registered_step(qualified: str) -> Callable[..., Any] | None:
    """The ``@step`` function decorated last under ``qualified`` in this process, if any."""
    return _STEPS.get(qualified)


def step_spec(function: Callable[..., Any]) -> StepSpec:
    """The spec of a step function; an undecorated function gets the defaults."""
    spec = getattr(function, _STEP_ATTRIBUTE, None)
    if isinstance(spec, StepSpec):
        return spec
    name = getattr(function, "__name__", None)
    if not callable(function) or not isinstance(name, str):
        raise ConfigError(f"ctx.step needs a function, not {type(function).__name__}")
    return StepSpec(
        name=checked_name(name, "step"),
        qualified=qualified_name(function),
        retry=_DEFAULT_RETRY,
        side_effect=False,
    )


@overload
def workflow(function: W, /) -> W: ...


@overload
def workflow(
    *,
    name: str | None = None,
    events: Mapping[str, type[BaseModel] | Mapping[str, Any] | None] | None = None,
) -> Callable[[W], W]: ...


def workflow(
    function: W | None = None,
    /,
    *,
    name: str | None = None,
    events: Mapping[str, type[BaseModel] | Mapping[str, Any] | None] | None = None,
) -> W | Callable[[W], W]:
    """Declare a code-first workflow: ``async def body(ctx: WorkflowContext, **input)``.

    ``name`` is the workflow's name in the run index (default: the function's
    ``__name__``). ``events`` declares the events its ``ctx.wait_for`` calls take, each
    with a pydantic model, a JSON Schema dict or ``None`` (any JSON): a run pins them, so
    ``send`` refuses an undeclared event or a failing payload even before the run reaches
    its wait (docs/waits.md). Run it with ``Runtime.run(body, {...})`` or
    ``little-workflow run module:body``; docs/code-first.md.
    """
    declared = None if events is None else declared_events(events)

    def mark(target: W) -> W:
        if not inspect.iscoroutinefunction(target):
            raise ConfigError(
                f"@workflow {getattr(target, '__qualname__', target)!r} must be an async "
                "function (async def body(ctx, ...)): its steps run in threads, not it"
            )
        spec = WorkflowSpec(
            name=checked_name(name or target.__name__, "workflow"),
            qualified=qualified_name(target),
            source_hash=source_hash(target),
            events=declared,
        )
        setattr(target, _WORKFLOW_ATTRIBUTE, spec)
        _REGISTRY[spec.qualified] = target
        return target

    return mark if function is None else mark(function)


def declared_events(
    events: Mapping[str, type[BaseModel] | Mapping[str, Any] | None],
) -> DeclaredEvents:
    """``@workflow(events=...)`` as JSON Schemas; ``ConfigError`` for a bad name or schema."""
    if not isinstance(events, Mapping):
        raise ConfigError(f"@workflow events must be a dict, not {type(events).__name__}")
    declared: DeclaredEvents = {}
    for event, schema in events.items():
        where = f"@workflow events[{event!r}]"
        if not isinstance(event, str) or not _NAME_RE.fullmatch(event):
            raise ConfigError(f"{where}: not an event name (letters, digits, '_' and '-')")
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            declared[event] = schema.model_json_schema()
        elif schema is None:
            declared[event] = None
        elif isinstance(schema, Mapping):
            try:
                check_json_schema(dict(schema))
            except ValueError as exc:
                raise ConfigError(f"{where}: {exc}") from None
            declared[event] = dict(schema)
        else:
            raise ConfigError(
                f"{where}: a pydantic model, a JSON Schema dict or None, not "
                f"{type(schema).__name__}"
            )
    return declared


def workflow_spec(function: object) -> WorkflowSpec | None:
    """The spec of a ``@workflow`` function, ``None`` for anything else."""
    spec = getattr(function, _WORKFLOW_ATTRIBUTE, None)
    return spec if isinstance(spec, WorkflowSpec) else None


def load_workflow_function(qualified: str) -> Callable[..., Any]:
    """The ``@workflow`` function named ``module:qualname`` (registered, else imported).

    ``ConfigError`` (``workflow_not_importable``) if it cannot be found or is not a
    ``@workflow``.
    """
    found = _REGISTRY.get(qualified)
    if found is not None:
        return found
    module_name, _, attribute = qualified.partition(":")
    reason = ""
    target: object = None
    if module_name and attribute:
        try:
            target = importlib.import_module(module_name)
            for part in attribute.split("."):
                target = getattr(target, part)
        except ImportError as exc:
            reason = f": {exc}"
            target = None
        except AttributeError:
            reason = f": module {module_name!r} has no {attribute!r}"
            target = None
    if target is not None and workflow_spec(target) is None:
        reason = ": it is not decorated with @workflow"
        target = None
    if target is None or not callable(target):
        raise ConfigError(
            f"cannot import workflow {qualified!r}{reason}; a code-first workflow is "
            "named module:function and must be importable where the run is driven",
            code="workflow_not_importable",
        )
    return target
