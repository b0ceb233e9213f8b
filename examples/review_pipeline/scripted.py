"""The stand-in models of the review pipeline: what a real model would answer, scripted.

``answer`` tells the three roles apart by their instructions (the system prompt the
workflow gives each one) and answers from the request alone. Delete this file when the
slots point at a real provider (see ``examples/providers.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from examples.providers import by_instructions, first_user_message, tool_results, turns
from little_workflow.harness.models import ModelRequest, ScriptReply

__all__ = ["answer"]


def _reviewer(request: ModelRequest) -> ScriptReply:
    document = json.loads(first_user_message(request))
    if turns(request) == 0:
        return {"tool_calls": [{"name": "check_style", "arguments": {"text": document["text"]}}]}
    style = json.loads(tool_results(request)[0].content or "{}")
    issues = [f'drop "{word}"' for word in style["banned"]]
    if style["long_sentences"]:
        issues.append("split the long sentences")
    verdict = "revise" if issues else "approve"
    return json.dumps({"id": document["id"], "verdict": verdict, "issues": issues})


def _editor(request: ModelRequest) -> ScriptReply:
    reviews: list[dict[str, Any]] = json.loads(first_user_message(request))
    flagged = [review["id"] for review in reviews if review["verdict"] == "revise"]
    if flagged:
        note = f"Revise {', '.join(flagged)}: act on each reviewer's issues, change nothing else."
        return json.dumps({"route": "revise", "output": {"note": note}})
    note = f"All {len(reviews)} documents pass review."
    return json.dumps({"route": "approve", "output": {"note": note}})


def _writer(request: ModelRequest) -> ScriptReply:
    brief = json.loads(first_user_message(request))
    texts = {document["id"]: document["text"] for document in brief["documents"]}
    revised = []
    for review in brief["reviews"]:
        if review["verdict"] != "revise":
            continue
        text = texts[review["id"]]
        for issue in review["issues"]:
            for word in re.findall(r'drop "([a-z]+)"', issue):
                text = re.sub(rf"\b{word}\b\s?", "", text, flags=re.IGNORECASE)
        revised.append({"id": review["id"], "text": text})
    return json.dumps({"documents": revised})


#: The scripted answer of the reviewer, the editor or the writer to a request.
answer = by_instructions(
    {"You review": _reviewer, "You are the editor": _editor, "You revise": _writer}
)
