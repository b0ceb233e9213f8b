"""Per-tool redaction: secret arguments and results stored as ``"[REDACTED]"``.

A tool built with ``tool(fn, redact=Redaction(arguments=("password",)))`` is called,
live, with the real values, and its real result goes back to the model. What is
*stored* (Layer C events in the run's log, the step ledger, checkpoint snapshots) holds
``"[REDACTED]"`` instead:

* Fields are named, not pathed: every object key in ``arguments`` (or ``result``) is
  replaced at any depth, with whatever value it held; ``whole_result=True`` replaces
  the whole result. Names are exact and case-sensitive.
* The values replaced are remembered, in memory only, for the execution (the
  ``Redactor``), and every string stored afterwards by the execution is scrubbed of
  them: the model request that quotes the tool result, the model response that asked
  for the call, a composite step's output, the snapshot's item log and layers. A
  string value shorter than ``MIN_SCRUBBED_CHARS`` is replaced where it was found but
  not searched for elsewhere (it would blank unrelated text); keys are never scrubbed.

Replay: the real values are never on disk, so after a restart what replays is the
redacted form. A recorded tool result comes back as ``"[REDACTED]"`` where it was
redacted, and a model call made after the restart sees the redacted conversation. A
tool call cut off by the crash (started, no outcome) or asked for by a replayed model
answer would be re-run with ``"[REDACTED]"`` in place of a redacted argument: it is
not, it fails with ``tool_arguments_redacted`` and the model is told so (it can ask
again with the real value, if it has it). Chosen over keeping the real values
encrypted on disk: that needs a key, and a key kept beside the data protects nothing.

Rejected: redacting in each recorder (the run log, the ledger) separately: two copies of
the rule, and a third recorder would forget it. The ``RedactingRecorder`` wraps any
recorder, so whatever records a unit stores only what passed through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from little_workflow._secrets import MIN_SCRUBBED_CHARS, REDACTED, Secrets
from little_workflow.codec import JsonValue
from little_workflow.durable._recorder import Recorded, Recorder, Unit
from little_workflow.errors import ToolCallError, ToolDefinitionError

__all__ = [
    "MIN_SCRUBBED_CHARS",
    "REDACTED",
    "RedactingRecorder",
    "Redaction",
    "Redactor",
    "has_redacted_arguments",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class Redaction:
    """Which parts of a tool's arguments and result are stored as ``"[REDACTED]"``.

    Given to ``tool(fn, redact=...)``. The model and the tool see the real values in the
    live run; see ``little_workflow.harness._redaction`` for what replays after a restart.
    """

    #: Argument fields (object keys, at any depth) whose values are not stored.
    arguments: tuple[str, ...] = ()
    #: Result fields (object keys, at any depth) whose values are not stored.
    result: tuple[str, ...] = ()
    #: Store no part of the result: it is ``"[REDACTED]"`` whole.
    whole_result: bool = False

    def __post_init__(self) -> None:
        for what in ("arguments", "result"):
            names = getattr(self, what)
            if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
                raise ToolDefinitionError(
                    f"Redaction({what}=...) takes a tuple of field names, not {names!r}"
                )
            object.__setattr__(self, what, tuple(names))

    @property
    def is_empty(self) -> bool:
        """Whether the rule redacts nothing."""
        return not (self.arguments or self.result or self.whole_result)


def _strings(value: JsonValue, into: set[str]) -> None:
    if isinstance(value, str):
        into.add(value)
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, into)
    elif isinstance(value, list):
        for item in value:
            _strings(item, into)


def _replace_fields(value: JsonValue, names: frozenset[str], found: set[str]) -> JsonValue:
    if isinstance(value, dict):
        result: dict[str, JsonValue] = {}
        for key, item in value.items():
            if key in names:
                _strings(item, found)
                result[key] = REDACTED
            else:
                result[key] = _replace_fields(item, names, found)
        return result
    if isinstance(value, list):
        return [_replace_fields(item, names, found) for item in value]
    return value


def has_redacted_arguments(rule: Redaction | None, arguments: JsonValue) -> bool:
    """Whether ``arguments`` hold ``"[REDACTED]"`` at a field ``rule`` redacts (a replay)."""
    if rule is None or not rule.arguments:
        return False
    names = frozenset(rule.arguments)

    def walk(value: JsonValue) -> bool:
        if isinstance(value, dict):
            return any(
                (key in names and item == REDACTED) or walk(item) for key, item in value.items()
            )
        if isinstance(value, list):
            return any(walk(item) for item in value)
        return False

    return walk(arguments)


class Redactor:
    """One execution's rules and the secret values it has seen (in memory only).

    ``sink``: the run's ``Secrets``, told every value learned, so that the run's writer
    scrubs it from every event, whichever carries it (``little_workflow._secrets``).
    """

    def __init__(self, rules: Mapping[str, Redaction], *, sink: Secrets | None = None) -> None:
        self.rules = {name: rule for name, rule in rules.items() if not rule.is_empty}
        self._secrets = Secrets(sink)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def _learn(self, found: set[str]) -> None:
        self._secrets.learn(found)

    def arguments(self, tool_name: str, arguments: JsonValue) -> JsonValue:
        """``arguments`` as stored; their redacted values are remembered."""
        rule = self.rules.get(tool_name)
        if rule is None or not rule.arguments:
            return arguments
        found: set[str] = set()
        stored = _replace_fields(arguments, frozenset(rule.arguments), found)
        self._learn(found)
        return stored

    def result(self, tool_name: str, value: JsonValue) -> JsonValue:
        """A tool result as stored; its redacted values are remembered."""
        rule = self.rules.get(tool_name)
        if rule is None:
            return value
        found: set[str] = set()
        if rule.whole_result:
            _strings(value, found)
            stored: JsonValue = REDACTED
        elif rule.result:
            stored = _replace_fields(value, frozenset(rule.result), found)
        else:
            return value
        self._learn(found)
        return stored

    def tool_calls(self, value: JsonValue) -> JsonValue:
        """``value`` with the arguments of every tool call in it redacted (a model response,
        a request's assistant messages, an item): any object with a ``name`` and
        ``arguments`` whose tool has rules."""
        if isinstance(value, list):
            return [self.tool_calls(item) for item in value]
        if not isinstance(value, dict):
            return value
        name = value.get("name")
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            if key == "arguments" and isinstance(name, str) and name in self.rules:
                out[key] = self.arguments(name, item)
            else:
                out[key] = self.tool_calls(item)
        return out

    def scrub(self, value: JsonValue) -> JsonValue:
        """``value`` with every remembered secret replaced inside every string."""
        return self._secrets.scrub(value)

    def stored(self, value: JsonValue) -> JsonValue:
        """Any other value about to be stored: tool calls in it redacted, then scrubbed."""
        return self.scrub(self.tool_calls(value))


class RedactingRecorder:
    """A ``Recorder`` that stores, through ``inner``, only what the ``Redactor`` lets through.

    The unit's real detail and value still go to the caller of ``run_unit``: only the
    copies handed to ``inner`` are redacted. Replays return what ``inner`` stored.
    """

    def __init__(self, inner: Recorder, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor

    def _detail(self, unit: Unit) -> Unit:
        detail = dict(unit.detail)
        if unit.kind == "tool":
            name = detail.get("name")
            if isinstance(name, str):
                detail["arguments"] = self.redactor.arguments(name, detail.get("arguments"))
        stored = self.redactor.stored(detail)
        return replace(unit, detail=stored if isinstance(stored, dict) else detail)

    def _value(self, unit: Unit, value: JsonValue) -> JsonValue:
        if unit.kind == "tool":
            name = unit.detail.get("name")
            if isinstance(name, str):
                value = self.redactor.result(name, value)
        return self.redactor.stored(value)

    def replay(self, unit: Unit) -> Recorded | None:
        """What ``inner`` recorded (redacted as it was stored)."""
        return self.inner.replay(unit)

    def in_flight(self, unit: Unit) -> Mapping[str, JsonValue] | None:
        """The recorded start of a unit cut off by a crash (redacted as stored)."""
        return self.inner.in_flight(unit)

    async def started(self, unit: Unit) -> None:
        """Record the start, its detail redacted."""
        await self.inner.started(self._detail(unit))

    async def succeeded(self, unit: Unit, value: JsonValue) -> None:
        """Record the outcome, redacted; learn the secrets first, then scrub."""
        stored = self._value(unit, value)
        await self.inner.succeeded(self._detail(unit), stored)

    async def failed(self, unit: Unit, error: BaseException) -> None:
        """Record the failure against the redacted unit, its message scrubbed."""
        if isinstance(error, ToolCallError):
            message = self.redactor.scrub(error.message)
            if message != error.message and isinstance(message, str):
                error = ToolCallError(message, error_code=error.error_code)
        await self.inner.failed(self._detail(unit), error)
