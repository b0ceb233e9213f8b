"""The orchestrator example as code: ``workflow.yaml``, ``research.yaml`` and
``brief.yaml`` as three ``@workflow`` functions.

The lead is an agent given ``workflows=[research]``: an orchestrator, like LWIR's
``role: orchestrator``, with a ``start_workflow`` tool that runs ``research`` as a sub-run
(its id recorded before it starts). ``brief`` is a fixed sub-workflow (``ctx.workflow``).
Same paths (``lead``, ``brief``) and same output as the LWIR form given the same models
(``tests/examples/test_code_forms.py``). Run it with::

    little-workflow --setup examples.orchestrator.setup:setup \\
        run examples.orchestrator.workflow:tech_choice \\
        --input '{"question": "Where should a small team keep its workflow runs?",
                  "options": ["SQLite", "PostgreSQL"]}'
"""

from __future__ import annotations

import json
from typing import Any

from little_workflow import JsonValue, WorkflowContext, workflow

__all__ = ["brief", "research", "tech_choice"]

# The prompts are the LWIR files', word for word: a real model sees the same requests.
LEAD = (
    "You lead a technical decision. Start the research workflow once per option (you may "
    "start several at once), then compare what came back. Answer with JSON only: "
    '{"recommendation": <one option>, "why": <one sentence>, "findings": [<each research '
    "result as it came back>]}.\n"
)
RESEARCHER = (
    "You research one option for a technical question. Search the team's notes for it "
    'first. Answer with JSON only: {"option": <the option>, "strengths": [<strings>], '
    '"risks": [<strings>], "fit": <1 to 5, how well it answers the question>}.\n'
)
WRITER = (
    "You write decision briefs: three sentences at most, plain text. Say what was decided, "
    "why, and the main risk to watch.\n"
)


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


@workflow(name="research")
async def research(ctx: WorkflowContext, option: str, question: str) -> JsonValue:
    """Research one option for a question in the team's notes; report strengths, risks and a fit from 1 to 5."""  # noqa: E501
    return await ctx.agent(
        "researcher",
        prompt=_json({"option": option, "question": question}),
        instructions=RESEARCHER,
        tools=["search_notes"],
        max_turns=4,
        output="json",
    )


@workflow(name="brief")
async def brief(ctx: WorkflowContext, question: str, decision: dict[str, Any]) -> JsonValue:
    """Write a short decision brief from a recommendation and its findings."""
    prompt = _json({"question": question, "decision": decision})
    return await ctx.agent("writer", prompt=prompt, instructions=WRITER)


@workflow(name="tech-choice")
async def tech_choice(ctx: WorkflowContext, question: str, options: list[str]) -> dict[str, Any]:
    """Research each option in a sub-run of its own (the lead starts them), combine the
    findings into a recommendation, and write the brief in a fixed sub-workflow."""
    lead = await ctx.agent(
        "lead",
        prompt=_json({"question": question, "options": options}),
        instructions=LEAD,
        workflows=[research],
        max_turns=6,
        output="json",
    )
    if not isinstance(lead, dict):
        raise TypeError(f"the lead answered {lead!r}, not a JSON object")
    written = await ctx.workflow(brief, {"question": question, "decision": lead})
    return {
        "recommendation": lead["recommendation"],
        "findings": lead["findings"],
        "brief": written,
    }
