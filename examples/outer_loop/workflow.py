"""One cycle of the outer loop as code: ``workflow.yaml`` as a ``@workflow`` function.

``little-workflow loop`` takes it where it takes the LWIR file; each cycle's input is the
same object (``input``, ``cycle``, ``previous``), here the body's keyword arguments. Same
paths (``draft``, ``check``), kinds (an agent, a tool) and output as the LWIR form given the
same model (``tests/examples/test_code_forms.py``). Run it with::

    little-workflow --setup examples.outer_loop.setup:setup \\
        loop examples.outer_loop.workflow:announcement \\
        --input "$(cat examples/outer_loop/input.json)" --max-cycles 5 \\
        --supervise examples.outer_loop.setup:supervise
"""

from __future__ import annotations

import json
from typing import Any

from examples.outer_loop.setup import check_announcement
from little_workflow import WorkflowContext, workflow

__all__ = ["announcement"]

# workflow.yaml's instructions, word for word: a real model sees the same requests.
WRITER = (
    "You write release announcements: one short paragraph, plain text, no headings. Act on "
    "every point of the feedback on earlier drafts, if there is any.\n"
)


@workflow(name="announcement")
async def announcement(
    ctx: WorkflowContext, input: dict[str, Any], cycle: int, previous: list[dict[str, Any]]
) -> dict[str, Any]:
    """A writer drafts a release announcement from the facts and the feedback on earlier
    cycles; a checker holds it to the house rules."""
    brief = {"product": input["product"], "facts": input["facts"], "feedback": previous}
    draft = await ctx.agent(
        "writer", name="draft", prompt=json.dumps(brief, ensure_ascii=False), instructions=WRITER
    )
    if not isinstance(draft, str):
        raise TypeError(f"the writer answered {draft!r}, not text")
    # workflow.yaml's ``tool`` step: the registered checker, called once as a step.
    problems = await ctx.tool(
        check_announcement,
        {"text": draft, "must_mention": input["must_mention"], "max_chars": input["max_chars"]},
        name="check",
    )
    return {"cycle": cycle, "draft": draft, "problems": problems}
