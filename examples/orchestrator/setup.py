"""The orchestrator's Python side: the ``search_notes`` tool and the setup.

The workflows it may start are named in ``workflow.yaml`` (``workflows:`` and
``workflow:``) as files next to it: they are pinned with the run when it starts, so a
resume never reads them again. The stand-in models' answers are in ``scripted.py``.
"""

from __future__ import annotations

from examples.orchestrator.scripted import answer
from examples.providers import model_slots, record
from little_workflow import RuntimeSetup, tool
from little_workflow.harness import ToolContext

__all__ = ["NOTES", "search_notes", "setup"]

#: The team's notes, a stand-in for a search index or a wiki.
NOTES: dict[str, list[dict[str, str]]] = {
    "sqlite": [
        {"kind": "strength", "note": "zero configuration: one file next to the application"},
        {"kind": "strength", "note": "WAL mode: readers never wait for the writer"},
        {"kind": "strength", "note": "backups are a file copy (or VACUUM INTO)"},
        {"kind": "risk", "note": "one machine only: the database must be on a local disk"},
    ],
    "postgresql": [
        {"kind": "strength", "note": "many writers on many machines"},
        {"kind": "strength", "note": "work queues with SELECT ... FOR UPDATE SKIP LOCKED"},
        {"kind": "risk", "note": "a server to run, monitor, back up and upgrade"},
        {"kind": "risk", "note": "connection limits: needs a pool in front of many workers"},
    ],
}


@tool
def search_notes(query: str, ctx: ToolContext) -> list[dict[str, str]]:
    """Search the team's notes.

    Args:
        query: What to look for: a product or a technique, such as "SQLite".
    """
    record("tool", ctx.idempotency_key)
    words = query.lower().split()
    return [note for topic, notes in NOTES.items() if topic in words for note in notes]


def setup() -> RuntimeSetup:
    """Model slots (scripted unless ``EXAMPLE_PROVIDER`` says otherwise) and the tool."""
    return RuntimeSetup(
        model_slots=model_slots(["lead", "researcher", "writer"], answer),
        tools=[search_notes],
    )
