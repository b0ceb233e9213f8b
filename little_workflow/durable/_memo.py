"""Memoization by path: the one mechanism under Layer A, Layer C and the step ledger.

A durable unit (a step visit, a model call, a tool call, a ledger entry) has a **path**
(where it sits in the run: ``review-candidates[cand_1].worker.visit[0]``, or a session's
``call[3]``) and an **identity** (a hash of what runs there: its kind and
configuration, or the request sent). If the log holds a committed result for the path
*and the same identity*, the recorded value is returned and nothing runs; otherwise the
unit runs and its result is committed before anything downstream sees it.

What a different identity at a recorded path means depends on the layer, so it is a
policy of the table:

* ``"error"``: the recorded run did something else there. Replaying its value would be
  silently wrong, so ``MemoMismatchError`` is raised (Layer C: a model call whose
  request differs from the recorded one).
* ``"rerun"``: the step was edited; it runs fresh and the recorded entries under its
  path are discarded (the seed's ledger rule, and a fork's changed steps).

Recorded failures are entries too (``ok=False``): a tool call that failed replays as
the same failure rather than being called again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from little_workflow.codec import JsonValue
from little_workflow.errors import MemoMismatchError

__all__ = ["MemoEntry", "MemoMismatchError", "MemoTable", "MismatchPolicy"]

MismatchPolicy = Literal["error", "rerun"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoEntry:
    """A committed result at a path."""

    path: str
    identity: str
    value: JsonValue
    #: ``False`` for a recorded failure, which replays as that failure.
    ok: bool = True


class MemoTable:
    """Committed results by path, rebuilt from a log; lookups check identity.

    ``scope`` names the table in messages ("run 'run_1'", "session 's_1'").
    """

    def __init__(self, *, scope: str, on_mismatch: MismatchPolicy = "error") -> None:
        self.scope = scope
        self.on_mismatch = on_mismatch
        self._entries: dict[str, MemoEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[MemoEntry]:
        return iter(self._entries.values())

    def record(self, path: str, identity: str, value: JsonValue, *, ok: bool = True) -> MemoEntry:
        """Remember a committed result (call it once the commit returned)."""
        entry = MemoEntry(path=path, identity=identity, value=value, ok=ok)
        self._entries[path] = entry
        return entry

    def peek(self, path: str) -> MemoEntry | None:
        """The entry at ``path`` whatever its identity (for display, not for replay)."""
        return self._entries.get(path)

    def lookup(self, path: str, identity: str) -> MemoEntry | None:
        """The entry to replay at ``path``, or ``None`` if the unit must run.

        A different identity raises ``MemoMismatchError`` (policy ``"error"``) or drops
        the entry and everything recorded beneath its path (policy ``"rerun"``).
        """
        entry = self._entries.get(path)
        if entry is None or entry.identity == identity:
            return entry
        if self.on_mismatch == "error":
            raise MemoMismatchError(
                f"{self.scope}: the result recorded at {path!r} was made by "
                f"{entry.identity}, but this run now has {identity} there. Replaying it "
                "would return a value for something else; restore the prior code or "
                "configuration, or start a new run.",
                path=path,
                recorded=entry.identity,
                current=identity,
            )
        self.discard_subtree(path)
        return None

    def discard_subtree(self, path: str) -> int:
        """Forget ``path`` and every entry beneath it; return how many were dropped."""
        doomed = [
            key for key in self._entries if key == path or key.startswith((f"{path}.", f"{path}["))
        ]
        for key in doomed:
            del self._entries[key]
        return len(doomed)
