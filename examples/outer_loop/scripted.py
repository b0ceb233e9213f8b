"""The stand-in writer of the outer-loop example: what a real model would answer, scripted.

It acts on the supervisor's feedback the way a model would, from the request alone:
the first draft leaves out what the house rules want; the next adds every phrase the
feedback says is missing, and grows too long; the one after that says it all shortly.
Delete this file when the slot points at a real provider (see ``examples/providers.py``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from examples.providers import by_instructions, first_user_message
from little_workflow.harness.models import ModelRequest, ScriptReply

__all__ = ["answer"]

# How the writer works a phrase the feedback asks for into a sentence.
_SENTENCES = {
    "kill -9": "Kill it with kill -9 at any moment and it resumes from its log.",
    "pip install little-workflow": "Try it now: pip install little-workflow.",
}


def _writer(request: ModelRequest) -> ScriptReply:
    brief: dict[str, Any] = json.loads(first_user_message(request))
    feedback = " ".join(str(cycle.get("summary") or "") for cycle in brief["feedback"])
    missing = re.findall(r'missing "([^"]+)"', feedback)
    extra = [_SENTENCES.get(phrase, f"It has {phrase}.") for phrase in dict.fromkeys(missing)]
    if "too long" in feedback:
        return f"{brief['product']}: {brief['facts'][0]}. {' '.join(extra)}"
    return f"{brief['product']} is out: {', '.join(brief['facts'])}. {' '.join(extra)}".strip()


#: The scripted writer's draft for a request.
answer = by_instructions({"You write release announcements": _writer})
