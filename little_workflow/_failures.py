"""What user code raised, described without trusting it.

A step, tool, hook or supervisor is untrusted code: it may raise ``SystemExit``,
``GeneratorExit``, a ``BaseException`` of its own, an ``asyncio.CancelledError`` nobody
asked for, or an exception whose ``__str__`` (or ``code`` property) itself raises. Each of
those is the callable's outcome, to be recorded like any failure, and the functions here
read an error's code, names and message so that describing it can never fail in turn.

Three things stay interruptions of the process and are never recorded as a step's
failure: ``KeyboardInterrupt`` (a second Ctrl-C arrives as one wherever the main thread
is, and a run is resumable after it), a ``CancelledError`` while the current task is
being cancelled (the runtime's own cancellation: a cancel request, a sibling branch that
failed, the caller), and ``SimulatedKill``, which tests raise to stop a process's work on
the spot as a kill would. A ``CancelledError`` raised while nobody cancelled the task is
the callable's own doing, so it is a failure like any other.
"""

from __future__ import annotations

import asyncio

__all__ = [
    "RunParked",
    "SimulatedKill",
    "error_code",
    "error_message",
    "error_names",
    "is_interruption",
]

#: Messages longer than this are cut (a hostile ``__str__`` may return megabytes).
_MAX_MESSAGE = 2000


class SimulatedKill(BaseException):
    """Raised by test code to stand for the process dying where it is raised.

    Nothing records it: the events committed before it stay, nothing after it is
    appended, and what it interrupted resumes as after a real kill. Subclass it for a
    test's own crash marker. (Crash tests that matter also kill real processes; this is
    for the fast in-process ones.)
    """


class RunParked(BaseException):
    """A run reached a wait that cannot end now (``runtime/_waits.py``): it stops cleanly.

    Not an outcome: nothing records it as a failure, and user code's ``except Exception``
    does not catch it. Its ``WaitStarted`` is committed before it is raised.
    """

    def __init__(self, run_id: str, waits: list[dict[str, object]]) -> None:
        super().__init__(f"run {run_id!r} waits")
        self.run_id = run_id
        self.waits = waits


def _attribute(exc: BaseException, name: str) -> object:
    try:
        return getattr(exc, name, None)
    except Exception:  # a property that raises says nothing
        return None


def error_names(exc: BaseException) -> tuple[str, list[str]]:
    """An error's code and every name it goes by (for a retry policy's ``on`` list).

    The code is its ``error_code`` or ``code`` string attribute (a library error, a
    tool's), else its class name. The names are the code, then each class of its MRO
    below the built-in roots, bare and qualified by module.
    """
    names: list[str] = []
    for attribute in ("error_code", "code"):
        code = _attribute(exc, attribute)
        if isinstance(code, str) and code:
            names.append(code)
            break
    for cls in type(exc).__mro__:
        if cls in (BaseException, Exception, object):
            break
        names += [cls.__name__, f"{cls.__module__}.{cls.__qualname__}"]
    return (names[0] if names else type(exc).__name__), names


def error_code(exc: BaseException) -> str:
    """``exc``'s code: its ``error_code``/``code`` string attribute, else its class name."""
    return error_names(exc)[0]


def error_message(exc: BaseException) -> str:
    """``str(exc)``, or a description of ``exc`` when that raises; cut to a readable size."""
    try:
        text = str(exc)
    except BaseException as inner:
        if is_interruption(inner):
            raise
        text = f"<{type(exc).__name__} whose str() raised {type(inner).__name__}>"
    if len(text) > _MAX_MESSAGE:
        text = f"{text[:_MAX_MESSAGE]}... ({len(text) - _MAX_MESSAGE} more characters)"
    return text


def is_interruption(exc: BaseException) -> bool:
    """Whether ``exc`` interrupts the process or this task, rather than being an outcome."""
    if isinstance(exc, KeyboardInterrupt | SimulatedKill | RunParked):
        return True
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: a thread's own cancellation
            return True
        return task is None or task.cancelling() > 0
    return False
