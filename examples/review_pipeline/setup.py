"""The review pipeline's Python side: two step functions, one tool, and the setup.

``collect`` and ``save`` are the workflow's ``execute`` steps; ``check_style`` is the
tool the reviewer model calls; ``setup`` is what ``--setup`` names. The stand-in
models' answers are in ``scripted.py``.

A decision loop cannot hand data from one lap to the next inside the workflow (the
step at the head of a loop cannot refer to a step later in it: on the first lap that
step has not run), so the documents travel through files: ``collect`` reads the run's
working copy at the start of every lap and ``save`` writes the revisions into it.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from examples.providers import model_slots, record
from examples.review_pipeline.scripted import answer
from little_workflow import RuntimeSetup, StepContext, tool
from little_workflow.harness import ToolContext

__all__ = ["BANNED", "check_style", "collect", "save", "setup"]

#: Words a style guide would have writers drop: they add nothing, or talk down.
BANNED = ("simply", "just", "obviously", "very", "easy")

_SENTENCE_WORDS = 30


def _working_copy(documents: str, workspace: str, run_id: str) -> Path:
    folder = Path(workspace) / run_id
    if not folder.exists():
        # Copied next to its final place and renamed: a process killed mid-copy leaves a
        # stray temporary folder, never a half-filled working copy.
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{run_id}-", dir=folder.parent))
        for source in sorted(Path(documents).glob("*.md")):
            shutil.copyfile(source, staging / source.name)
        staging.rename(folder)
    return folder


def collect(documents: str, workspace: str, ctx: StepContext) -> dict[str, Any]:
    """The documents to review: the run's working copy (made from ``documents`` at first)."""
    record("step", ctx.idempotency_key)
    folder = _working_copy(documents, workspace, ctx.run_id)
    found = [
        {"id": path.stem, "text": path.read_text(encoding="utf-8")}
        for path in sorted(folder.glob("*.md"))
    ]
    if not found:
        raise FileNotFoundError(f"no .md documents in {documents!r}")
    # The round goes into each reviewer's prompt: a reviewer knows the set was revised,
    # and no two reviews in a run are the same request.
    return {"workspace": str(folder), "round": (ctx.visit or 0) + 1, "documents": found}


def save(revised: dict[str, Any], workspace: str, ctx: StepContext) -> list[str]:
    """Write the writer's revisions into the working copy; the ids it wrote."""
    record("step", ctx.idempotency_key)
    folder = Path(workspace)
    known = {path.stem for path in folder.glob("*.md")}
    written: list[str] = []
    for document in revised.get("documents", []):
        # The ids come from a model: only a document that exists may be overwritten.
        doc_id = document.get("id")
        if doc_id not in known or not isinstance(document.get("text"), str):
            raise ValueError(f"the writer revised an unknown document {doc_id!r}")
        temporary = folder / f".{doc_id}.md.tmp"
        temporary.write_text(document["text"], encoding="utf-8")
        os.replace(temporary, folder / f"{doc_id}.md")
        written.append(doc_id)
    return written


def publish(documents: list[dict[str, Any]], ctx: StepContext) -> list[dict[str, Any]]:
    """Keep each approved document as an artifact of the run; their names and hashes."""
    record("step", ctx.idempotency_key)
    published = []
    for document in documents:
        # Re-run after a crash, the same name and bytes land on the same artifact.
        manifest = ctx.artifacts.put(f"{document['id']}.md", document["text"])
        published.append({"name": manifest.name, "sha256": manifest.sha256})
    return published


@tool
def check_style(text: str, ctx: ToolContext) -> dict[str, Any]:
    """Run the style checker on a document.

    Args:
        text: The document's text, whole.
    """
    record("tool", ctx.idempotency_key)
    words = re.findall(r"[a-z']+", text.lower())
    sentences = [s for s in re.split(r"[.!?]\s", text) if s.strip()]
    return {
        "words": len(words),
        "banned": sorted({word for word in words if word in BANNED}),
        "long_sentences": sum(1 for s in sentences if len(s.split()) > _SENTENCE_WORDS),
    }


def setup() -> RuntimeSetup:
    """Model slots (scripted unless ``EXAMPLE_PROVIDER`` says otherwise) and the tool."""
    return RuntimeSetup(
        model_slots=model_slots(["reviewer", "editor", "writer"], answer),
        tools=[check_style],
    )
