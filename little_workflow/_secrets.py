"""Redacted values a run has seen, kept in memory only and scrubbed from all it stores.

A tool's redaction rule (``harness/_redaction.py``) learns the values it replaces. Each
``Redactor`` scrubs what its own recorder stores; that left gaps wherever another event
carried the value: a failing tool step's ``StepAttemptFailed`` message (the exception
quoting its argument), an agent's final answer repeating a token a tool returned (its
``StepCompleted`` output, the run's output). So every ``Redactor`` of a run also reports
what it learns to the run's ``Secrets``, and the run's writer scrubs every event it
appends, whichever event carries the value: a redacted value reaches no stored byte.

The check costs nothing while a run has no secrets (most runs). With secrets, each event
is encoded once more and searched; only an event that holds one is rebuilt, its string
values scrubbed (object keys never are), so that it still validates.

Sub-runs share their parent's ``Secrets`` (``FAMILY_SECRETS``, set in the parent's walk
task and read when a run in it is created): a value redacted in the parent and handed to a
sub-workflow as input is scrubbed from the sub-run's log too. A sub-run a worker process
runs has its own: secrets are never written anywhere to be shared.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING

from little_workflow.codec import JsonValue

if TYPE_CHECKING:
    from little_workflow.events import Event

__all__ = ["FAMILY_SECRETS", "MIN_SCRUBBED_CHARS", "REDACTED", "Secrets"]

#: What a redacted value is stored as.
REDACTED = "[REDACTED]"

#: A redacted string at least this long is also scrubbed from everything stored later.
MIN_SCRUBBED_CHARS = 4


class Secrets:
    """Values never to be stored, longest first; ``sink`` (a run's) learns them too."""

    def __init__(self, sink: Secrets | None = None) -> None:
        self._sink = sink
        self._known: set[str] = set()
        # Longest first, so a secret inside another is replaced after it.
        self._ordered: list[str] = []
        # How each appears inside encoded JSON (escaped), to find it in an event's text.
        self._encoded: list[str] = []
        #: Whether there is any secret: an attribute, not ``__bool__`` alone, because the
        #: run's writer looks at every append (a method call costs as much as the rest).
        self.active = False

    def __bool__(self) -> bool:
        return self.active

    def learn(self, found: Iterable[str]) -> None:
        """Remember the values in ``found`` long enough to be searched for."""
        new = {s for s in found if len(s) >= MIN_SCRUBBED_CHARS and s != REDACTED} - self._known
        if new:
            self._known |= new
            self._ordered = sorted(self._known, key=len, reverse=True)
            self._encoded = [json.dumps(s, ensure_ascii=False)[1:-1] for s in self._ordered]
            self._encoded += [json.dumps(s)[1:-1] for s in self._ordered if not s.isascii()]
            self.active = True
        if self._sink is not None and new:
            self._sink.learn(new)

    def scrub(self, value: JsonValue) -> JsonValue:
        """``value`` with every secret replaced inside every string (keys are kept)."""
        if not self._ordered:
            return value
        if isinstance(value, str):
            for secret in self._ordered:
                if secret in value:
                    value = value.replace(secret, REDACTED)
            return value
        if isinstance(value, dict):
            return {key: self.scrub(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.scrub(item) for item in value]
        return value

    def scrub_events(self, events: Sequence[Event]) -> Sequence[Event]:
        """``events``, each one that holds a secret rebuilt with it scrubbed."""
        if not self._ordered:
            return events
        from little_workflow.events import encode_event

        scrubbed: list[Event] | None = None
        for index, event in enumerate(events):
            text = encode_event(event)
            if not any(form in text for form in self._encoded):
                continue
            if scrubbed is None:
                scrubbed = list(events)
            fields = self.scrub(event.model_dump(mode="json", by_alias=True))
            scrubbed[index] = type(event).model_validate(fields)
        return events if scrubbed is None else scrubbed


#: The ``Secrets`` of the run whose walk this task is part of: a run created inside it (a
#: sub-run) shares them (see the module docstring).
FAMILY_SECRETS: ContextVar[Secrets | None] = ContextVar("little_workflow_secrets", default=None)
