"""Finding and calling the Python callables that ``execute`` and ``decision`` steps name.

``fn: "pkg.module:attr"`` is looked up first in the runtime's registry (names given to
``Runtime(functions=...)``, which a setup's ``functions`` fill), then, unless the runtime
was built with ``import_functions=False``, imported: the module with ``importlib``, then
the attribute path. Private names (a part starting with ``_``) are never imported.

Who wrote the workflow decides which of the two a name may reach (README, "Trust
model"). A workflow file, or a ``Workflow`` a program builds, is code: it may name any
importable callable, as its author could call it. A workflow computed at run time (a
planner's answer, any ``definition:`` a step evaluates; ``WorkflowVersion.trusted`` is
false) is data a model may have written: its names reach the registry only, whatever
``import_functions`` says, and checking one imports nothing (``check_offered``). A
runtime that runs workflow files from people it does not trust passes
``import_functions=False`` (``--no-import-functions``) and registers what they may call.

A callable is called with the rendered ``with`` as keyword arguments. If it declares a
parameter named ``ctx``, it also gets a ``StepContext`` (run id, step path, attempt,
visit): the natural idempotency key for an effect outside the run. An async callable is
awaited on the event loop; a sync one runs in a worker thread of the runtime's pool
(``platform/_threads.py``), so that a blocking call does not stop the loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from little_workflow.artifacts import ArtifactStore, StepArtifacts
from little_workflow.codec import JsonValue
from little_workflow.errors import ConfigError, FunctionNotAllowedError
from little_workflow.memory import MemoryStore
from little_workflow.platform._threads import call_user
from little_workflow.references import import_reference

__all__ = ["FunctionRegistry", "StepContext", "accepts_ctx", "invoke"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext:
    """What a step's callable may know about where it runs (pass ``ctx`` to receive it)."""

    run_id: str
    #: The step path, e.g. ``review-candidates[cand_1].worker.visit[0]``.
    step_path: str
    step_id: str
    #: 1 for the first attempt, 2 for the first retry, ...
    attempt: int
    visit: int | None
    #: For a side-effecting step, the key the far end deduplicates on (the same for every
    #: attempt and resume of this visit; see ``durable/_side_effects.py``); else ``None``.
    side_effect_key: str | None = None
    #: The runtime's stores, behind ``artifacts`` and ``memory`` (``None`` outside a run).
    artifact_store: ArtifactStore | None = field(default=None, repr=False, compare=False)
    memory_store: MemoryStore | None = field(default=None, repr=False, compare=False)

    @property
    def artifacts(self) -> StepArtifacts:
        """The run's artifacts, seen from this step: ``ctx.artifacts.put("report.md", data)``."""
        if self.artifact_store is None:
            raise ConfigError("this StepContext has no artifact store: it is not inside a run")
        return StepArtifacts(self.artifact_store, self.run_id, self.step_path)

    @property
    def memory(self) -> MemoryStore:
        """The runtime's memory store; what this step puts records this run and step."""
        if self.memory_store is None:
            raise ConfigError("this StepContext has no memory store: it is not inside a run")
        return self.memory_store.bound(self.run_id, self.step_path)

    @property
    def idempotency_key(self) -> str:
        """``<run id>/<step path>``: the same for every attempt of this step visit."""
        return f"{self.run_id}/{self.step_path}"


def accepts_ctx(function: Callable[..., Any]) -> bool:
    """Whether ``function`` declares a parameter named ``ctx``."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return "ctx" in parameters


class FunctionRegistry:
    """Resolves ``module:attr`` references to callables, once each."""

    def __init__(
        self, functions: Mapping[str, Callable[..., Any]] | None = None, *, allow_import: bool
    ) -> None:
        self._functions = dict(functions or {})
        self._allow_import = allow_import
        self._cache: dict[str, tuple[Callable[..., Any], bool]] = {}

    def check_offered(self, reference: str, *, workflow: str, step: str, computed: bool) -> None:
        """Refuse ``reference`` unless this registry may give it to that workflow.

        A computed workflow (``computed``) may name registered functions only; any other
        one may also name one to import, unless imports are off. Imports nothing: a
        module's import is code running, and a name a model wrote must not run anything,
        even a refused one. ``FunctionNotAllowedError`` names the workflow, the step
        (``step``: its path or id) and the function.
        """
        if reference in self._functions or (self._allow_import and not computed):
            return
        registered = ", ".join(sorted(self._functions)) or "none"
        if computed:
            why = (
                "which this runtime was not given; a workflow computed at run time (a "
                "planner's answer, a step's output) may call only registered functions, "
                "never import one"
            )
        else:
            why = (
                "which is not registered, and this runtime imports no function by name "
                "(import_functions=False, --no-import-functions)"
            )
        raise FunctionNotAllowedError(
            f"workflow {workflow!r} step {step!r} calls function {reference!r}, {why} "
            f"(registered: {registered}); register it with Runtime(functions={{...}}) or "
            "a setup's functions",
            step_path=step,
            function=reference,
        )

    def resolve(self, reference: str) -> tuple[Callable[..., Any], bool]:
        """The callable ``reference`` names, and whether it takes ``ctx``; else ``ConfigError``."""
        cached = self._cache.get(reference)
        if cached is not None:
            return cached
        function = self._functions.get(reference)
        if function is None:
            function = self._import(reference)
        if not callable(function):
            raise ConfigError(f"{reference!r} names a {type(function).__name__}, not a callable")
        resolved = (function, accepts_ctx(function))
        self._cache[reference] = resolved
        return resolved

    def _import(self, reference: str) -> Callable[..., Any]:
        if not self._allow_import:
            raise ConfigError(
                f"function {reference!r} is not registered, and this runtime does not import "
                "functions by name (import_functions=False); register it with "
                "Runtime(functions={...})"
            )
        module, _, attribute = reference.partition(":")
        if module == "__main__":
            # A script's or a notebook's own namespace: importable by no other process (a
            # resume, a worker), and in this one only by accident of how it was started.
            raise ConfigError(
                f"function {reference!r} is defined in a script or notebook (module "
                f"__main__), which no other process can import: register it, "
                f"Runtime(functions={{{reference!r}: {attribute or 'fn'}}}), or move it into "
                'a module (docs/lwir.md, "Functions from a script or notebook")'
            )
        target: Any = import_reference(reference, what="function", public_only=True)
        result: Callable[..., Any] = target
        return result


async def invoke(
    function: Callable[..., Any],
    takes_ctx: bool,
    arguments: Mapping[str, JsonValue],
    ctx: StepContext | None,
) -> Any:
    """Call ``function`` with ``arguments`` (and ``ctx`` if it takes one) through ``call_user``.

    ``ctx`` may be ``None`` when the function takes none.
    """
    kwargs: dict[str, Any] = dict(arguments)
    if takes_ctx:
        kwargs["ctx"] = ctx
    return await call_user(function, **kwargs)
