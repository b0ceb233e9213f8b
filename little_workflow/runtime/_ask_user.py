"""An agent step's ``ask_user`` tool inside a run: the question parks the run as a wait.

Offered only when the step asks for it (LWIR ``askUser: true``, ``ctx.agent(...,
ask_user=True)``): a model must not be able to park a run its developer did not mean to
wait. The tool goes through a ``ToolHook``, so its start (with the question) is committed
before it runs; its run is a wait (``_waits.wait_point``, kind ``ask_user``) at the path
``<agent step path>#<tool call path>`` for the event ``ask_user:<agent step path>``, whose
payload, the answer, must be a string. The run parks like any wait: the process exits, a
``send`` records the answer, and the next pass replays the session from its ledger (no
committed model call is made again) up to this tool call, which was started but has no
outcome: it runs again, the wait now ends, and its answer is the tool's result, which the
model reads in its next request. A timeout (``askUserTimeout``) ends the wait with no
answer: the tool fails with ``no_answer``, which the model is told.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from little_workflow.codec import JsonValue
from little_workflow.errors import ToolArgumentsError, ToolCallError
from little_workflow.lwir import AgentStep, RetryPolicy
from little_workflow.runtime._core import DurableRun, Site, StepUnit
from little_workflow.runtime._waits import ASK_PREFIX, ASK_USER, parse_duration, wait_point

if TYPE_CHECKING:
    from little_workflow.harness._harness import ToolHook
    from little_workflow.harness._tools import Tool

__all__ = ["ANSWER_SCHEMA", "ask_event", "ask_user_hook", "ask_user_tool"]

#: What an answer must be: the text the model gets as the tool's result.
ANSWER_SCHEMA: dict[str, JsonValue] = {"type": "string"}
_NOT_IN_EVENT = re.compile(r"[^A-Za-z0-9_:-]+")
_NO_RETRY = RetryPolicy()


def ask_event(agent_path: str) -> str:
    """The event that answers a question of the agent at ``agent_path``.

    ``ask_user:`` and the path, where each run of characters an event name cannot hold
    (the brackets and quotes of a map branch's key, a ``.``) becomes one ``_``:
    ``ask_user:review``, ``ask_user:review_visit_2_``, ``ask_user:m_a_review``.
    """
    return (ASK_PREFIX + _NOT_IN_EVENT.sub("_", agent_path))[:200]


def ask_user_tool() -> Tool[..., Any]:
    """The ``ask_user`` tool a model sees (its calls run through the hook)."""
    from little_workflow.harness._tools import tool

    def ask_user(question: str) -> str:
        """Ask the person who runs this workflow a question and wait for the answer.

        Use it when you cannot go on without something only they know or decide.
        The workflow pauses until they answer; the answer is this tool's result.

        Args:
            question: The question, complete enough to answer without other context.
        """
        raise AssertionError("ask_user runs through its hook")  # pragma: no cover

    return tool(ask_user)


def ask_user_hook(run: DurableRun, agent: StepUnit, step: AgentStep) -> ToolHook:
    """How the ``ask_user`` of the agent at ``agent`` runs: a wait (see the module doc)."""
    from little_workflow.harness._harness import ToolHook

    agent_path = agent.site.text
    event = ask_event(agent_path)
    timeout = step.ask_user_timeout

    def prepare(detail: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
        return detail

    async def ask(detail: Mapping[str, JsonValue], context: Any) -> JsonValue:
        arguments = detail.get("arguments")
        question = arguments.get("question") if isinstance(arguments, dict) else None
        if not isinstance(question, str) or not question.strip():
            raise ToolArgumentsError("ask_user needs a question: a non-empty string")
        path = f"{agent_path}#{getattr(context, 'path', ASK_USER)}"
        site = Site(path=agent.site.path, text=path, visit=None, identity=ASK_USER)
        unit = StepUnit(site=site, kind=ASK_USER, step_id=agent.step_id, retry=_NO_RETRY)

        def wake_at() -> float | None:
            if timeout is None:
                return None
            return time.time() + parse_duration(timeout, where=f"{agent_path}.askUserTimeout")

        output, route = await wait_point(
            run, unit, event=event, schema=ANSWER_SCHEMA, wake_at=wake_at, question=question
        )
        if route == "timeout":
            raise ToolCallError(
                f"no answer to this question came within {timeout}; go on without it",
                error_code="no_answer",
            )
        return output

    return ToolHook(prepare=prepare, run=ask)
