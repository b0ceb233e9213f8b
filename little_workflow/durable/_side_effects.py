"""Side effects: the outbox for steps that act on the outside world, and reconciliation.

A step is side-effecting when its LWIR says so (``sideEffect: {key: ...}`` on an
``execute`` or ``tool`` step) or when its callable was marked with ``@side_effect``. For
such a step, every attempt goes:

1. ``StepAttemptStarted`` + ``SideEffectIntended(key, attempt)``, committed durably
   *before* the callable is called (the outbox entry; one more commit than a plain
   step, which holds its attempt write-behind);
2. the call, with ``ctx.side_effect_key`` = the key, so the far end can deduplicate;
3. the outcome: ``StepCompleted`` (or ``StepAttemptFailed``), as for any step.

A crash between 1 and 3 leaves an intent without an outcome. The resume then does not
call blind: it asks the callable's ``reconcile(key)`` hook whether the effect happened.
``Happened(result)`` completes the step with that result and no call; ``None`` means it
did not, and the step is dispatched again under the same key. Without a hook the step is
dispatched again (at-least-once, like any step; the key still lets an idempotent far
end drop the duplicate). ``SideEffectReconciled`` records the answer.

The key is the same for every attempt and every resume of one step visit: by default
``<run id>/<step path>`` (the path names the visit, ``notify.visit[1]``); a ``key``
template in the LWIR replaces it (``"order-${input.order_id}"``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from little_workflow.codec import JsonValue
from little_workflow.platform._threads import call_user

__all__ = ["Happened", "Reconcile", "SideEffect", "declared_side_effect", "side_effect"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Happened:
    """A ``reconcile`` hook's answer when the effect took place: the step's result."""

    result: JsonValue = None


#: ``reconcile(key)``: ``Happened(result)`` if the effect took place, else ``None``.
Reconcile = Callable[[str], "Happened | Awaitable[Happened | None] | None"]

_ATTRIBUTE = "__little_workflow_side_effect__"


@dataclass(frozen=True, slots=True)
class SideEffect:
    """How a callable declared itself side-effecting (``@side_effect``)."""

    reconcile: Reconcile | None = None

    async def ask(self, key: str) -> Happened | None:
        """The hook's answer for ``key``, ``None`` without a hook (a sync hook runs in a thread)."""
        if self.reconcile is None:
            return None
        answer = await call_user(self.reconcile, key)
        if answer is not None and not isinstance(answer, Happened):
            raise TypeError(
                f"reconcile({key!r}) returned {type(answer).__name__}; return "
                "Happened(result) if the effect took place, or None"
            )
        return answer


@overload
def side_effect(function: F, /) -> F: ...


@overload
def side_effect(*, reconcile: Reconcile | None = None) -> Callable[[F], F]: ...


def side_effect(
    function: F | None = None, /, *, reconcile: Reconcile | None = None
) -> F | Callable[[F], F]:
    """Mark a step function (or a tool's function) as acting on the outside world.

    ``@side_effect`` or ``@side_effect(reconcile=hook)``: see the module docstring.
    """

    def mark(target: F) -> F:
        setattr(target, _ATTRIBUTE, SideEffect(reconcile=reconcile))
        return target

    return mark if function is None else mark(function)


#: ``id(target)`` -> ``(target, declaration)``: asked once per step run, and a missing
#: attribute costs an exception inside ``getattr`` each time. The target is kept so that
#: its id cannot be reused by another object while the entry lives.
_DECLARED: dict[int, tuple[object, SideEffect | None]] = {}


def declared_side_effect(target: object) -> SideEffect | None:
    """The ``@side_effect`` declaration of ``target`` (or of the function it wraps)."""
    cached = _DECLARED.get(id(target))
    if cached is not None and cached[0] is target:
        return cached[1]
    found: SideEffect | None = None
    for candidate in (target, getattr(target, "fn", None), getattr(target, "function", None)):
        declared = getattr(candidate, _ATTRIBUTE, None)
        if isinstance(declared, SideEffect):
            found = declared
            break
    if len(_DECLARED) < 10_000:
        _DECLARED[id(target)] = (target, found)
    return found
