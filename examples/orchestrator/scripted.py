"""The stand-in models of the orchestrator example: what a real model would answer, scripted.

``answer`` tells the lead, the researcher and the brief writer apart by their
instructions and answers from the request alone. Delete this file when the slots point
at a real provider (see ``examples/providers.py``).
"""

from __future__ import annotations

import json

from examples.providers import by_instructions, first_user_message, tool_results, turns
from little_workflow.harness.models import ModelRequest, ScriptReply

__all__ = ["answer"]


def _lead(request: ModelRequest) -> ScriptReply:
    task = json.loads(first_user_message(request))
    if turns(request) == 0:
        # Both sub-runs in one answer: each call is recorded, with its sub-run's id,
        # before that sub-run starts.
        return {
            "tool_calls": [
                {
                    "name": "start_workflow",
                    "arguments": {
                        "workflow": "research",
                        "input": {"option": option, "question": task["question"]},
                    },
                }
                for option in task["options"]
            ]
        }
    findings = [json.loads(result.content or "{}") for result in tool_results(request)]
    best = max(findings, key=lambda finding: finding["fit"])
    why = f"{best['option']} fits best ({best['fit']}/5): {best['strengths'][0]}."
    return json.dumps({"recommendation": best["option"], "why": why, "findings": findings})


def _researcher(request: ModelRequest) -> ScriptReply:
    task = json.loads(first_user_message(request))
    if turns(request) == 0:
        return {"tool_calls": [{"name": "search_notes", "arguments": {"query": task["option"]}}]}
    notes = json.loads(tool_results(request)[0].content or "[]")
    strengths = [note["note"] for note in notes if note["kind"] == "strength"]
    risks = [note["note"] for note in notes if note["kind"] == "risk"]
    fit = max(1, min(5, 3 + len(strengths) - len(risks)))
    return json.dumps(
        {"option": task["option"], "strengths": strengths, "risks": risks, "fit": fit}
    )


def _writer(request: ModelRequest) -> ScriptReply:
    decision = json.loads(first_user_message(request))["decision"]
    chosen = next(f for f in decision["findings"] if f["option"] == decision["recommendation"])
    risk = chosen["risks"][0] if chosen["risks"] else "none found"
    return f"Decision: {decision['recommendation']}. {decision['why']} Risk to watch: {risk}."


#: The scripted answer of the lead, a researcher or the brief writer to a request.
answer = by_instructions(
    {"You lead": _lead, "You research": _researcher, "You write decision briefs": _writer}
)
