"""A code-first workflow: a style check of a folder of documents, as plain Python.

``style_review`` lists the documents (a step), checks each in a branch of its own, two
at a time (``ctx.branches``: each branch reads the document and checks it, two steps),
asks for a fix of every document with findings, where a fix that fails for good is
caught and reported (``StepFailedError``: failure is a value), and returns a summary.
Every call is durable: kill it anywhere and ``little-workflow resume <run id>``
continues without calling any committed step again. Run it with::

    little-workflow run examples.code_first.style:style_review \\
        --input '{"documents": "examples/review_pipeline/documents"}'
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from little_workflow import StepFailedError, WorkflowContext, step, workflow

#: Words a style guide would have writers drop (the review pipeline's list).
BANNED = ("simply", "just", "obviously", "very", "easy")


@step
def list_documents(folder: str) -> list[str]:
    """The ``.md`` files of ``folder``, by name."""
    return sorted(str(path) for path in Path(folder).glob("*.md"))


@step
def read(path: str) -> str:
    """A document's text (a sync step: it runs in a thread)."""
    return Path(path).read_text(encoding="utf-8")


@step
async def check(text: str) -> dict[str, Any]:
    """The banned words a text uses, and how many of its sentences run long."""
    words = re.findall(r"[a-z']+", text.lower())
    sentences = [s for s in re.split(r"[.!?]\s", text) if s.strip()]
    return {
        "banned": sorted({word for word in words if word in BANNED}),
        "long_sentences": sum(1 for s in sentences if len(s.split()) > 30),
    }


@step
def propose_fix(name: str, findings: dict[str, Any]) -> str:
    """A note for the writer; a document with long sentences cannot be fixed here."""
    if findings["long_sentences"]:
        raise ValueError(f"{name}: {findings['long_sentences']} long sentence(s) need a person")
    return f"{name}: drop {', '.join(findings['banned'])}"


async def review_one(ctx: WorkflowContext, path: str) -> dict[str, Any]:
    """One branch: read a document, check it (paths ``review_one[<name>].read``, ...)."""
    text = await ctx.step(read, path)
    findings = await ctx.step(check, text)
    return {"name": Path(path).stem, **findings}


@workflow
async def style_review(ctx: WorkflowContext, documents: str) -> dict[str, Any]:
    """Check every document of ``documents``; propose fixes; summarise."""
    paths = await ctx.step(list_documents, documents)
    reviews = await ctx.branches(review_one, paths, key=lambda p: Path(p).stem, concurrency=2)
    notes: list[str] = []
    for review in reviews:
        if not review["banned"] and not review["long_sentences"]:
            continue
        try:
            notes.append(await ctx.step(propose_fix, review["name"], review))
        except StepFailedError as error:
            notes.append(f"needs a person ({error.path})")
    return {"documents": len(reviews), "clean": len(reviews) - len(notes), "notes": notes}
