"""The outer loop's Python side: the checker tool, the supervisor, and the setup.

``little-workflow loop`` runs ``workflow.yaml`` once per cycle and calls ``supervise``
after each: ``Done`` ends the loop with a final output, ``Continue`` runs another cycle
whose input carries this one's output and the summary given here (the feedback the
writer acts on). The stand-in model's answers are in ``scripted.py``.
"""

from __future__ import annotations

from examples.outer_loop.scripted import answer
from examples.providers import model_slots, record
from little_workflow import RuntimeSetup, StepContext, tool
from little_workflow.harness import ToolContext
from little_workflow.runtime import Continue, Cycle, Done

__all__ = ["check_announcement", "setup", "supervise"]


@tool
def check_announcement(
    text: str, must_mention: list[str], max_chars: int, ctx: StepContext | ToolContext
) -> list[str]:
    """Check an announcement against the house rules; the problems found.

    Args:
        text: The announcement.
        must_mention: Phrases it must contain, word for word.
        max_chars: Its greatest length in characters.
    """
    record("tool", ctx.idempotency_key)
    problems = [f'missing "{phrase}"' for phrase in must_mention if phrase not in text]
    if len(text) > max_chars:
        problems.append(f"too long: {len(text)} characters, at most {max_chars}")
    return problems


def supervise(cycle: Cycle) -> Done | Continue:
    """Done when the checker found nothing; otherwise its problems are the feedback."""
    # Logged so a test can see, from outside the process, that a resumed loop never
    # asks twice about one cycle.
    record("supervise", f"{cycle.outer_loop_id}#{cycle.cycle_number}")
    output = cycle.output if isinstance(cycle.output, dict) else {}
    problems = output.get("problems")
    if not isinstance(problems, list) or not problems:
        return Done({"announcement": output.get("draft"), "cycles": cycle.cycle_number})
    return Continue(summary="; ".join(str(problem) for problem in problems))


def setup() -> RuntimeSetup:
    """The writer's model slot (scripted unless ``EXAMPLE_PROVIDER`` says otherwise), the tool."""
    return RuntimeSetup(model_slots=model_slots(["writer"], answer), tools=[check_announcement])
