"""Workflows, tools and a model script for the harness crash tests.

The model is served over HTTP by a fake server (another process) speaking the OpenAI
wire format; the runtime reaches it through ``setup()`` (``--setup
tests.harness.flows:setup``), which reads its address from ``LW_TEST_MODEL_URL``. Each
tool call appends ``<tool> <arguments>`` to the file named by ``LW_TEST_TOOL_CALLS``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import tool
from little_workflow.harness.models import ModelRequest, OpenAICompatibleProvider
from little_workflow.runtime import RuntimeSetup


def _count(name: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("LW_TEST_TOOL_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(f"{name} {json.dumps(arguments, sort_keys=True)}\n")
            handle.flush()
            os.fsync(handle.fileno())


@tool
def lookup(name: str) -> dict[str, Any]:
    """Look a candidate up by name.

    Args:
        name: The candidate's name.
    """
    _count("lookup", {"name": name})
    return {"name": name, "years": len(name) + 4}


@tool
def score(years: int) -> int:
    """Score a candidate's years of experience.

    Args:
        years: Years of experience.
    """
    _count("score", {"years": years})
    return years * 10


INVALID_PLAN = {"lwir": 1, "name": "planned", "steps": [{"id": "s", "kind": "tool"}]}
VALID_PLAN = {
    "lwir": 1,
    "name": "planned",
    "steps": [
        {"id": "s", "kind": "tool", "tool": "score", "with": {"years": "${input.years}"}},
        {"id": "out", "kind": "output", "value": "${steps.s.output}"},
    ],
}


def script(request: ModelRequest) -> Any:
    """Answers by who is asking (the model in the request) and how far the talk has got."""
    turns = sum(1 for message in request.messages if message.role == "assistant")
    last = request.messages[-1].content or ""
    if request.model == "planner-model":
        # A first plan that does not validate, then (told why) a good one.
        return json.dumps(INVALID_PLAN if turns == 0 else VALID_PLAN)
    if request.model == "orchestrator-model":
        if turns == 0:
            return {
                "tool_calls": [
                    {
                        "name": "start_workflow",
                        "arguments": {"workflow": "score-one", "input": {"who": "Ada"}},
                    }
                ]
            }
        return f"Shortlist ready: {last}"
    if turns == 0:
        return {"tool_calls": [{"name": "lookup", "arguments": {"name": "Ada"}}]}
    if turns == 1:
        years = json.loads(last)["years"]
        return {"tool_calls": [{"name": "score", "arguments": {"years": years}}]}
    return f"Ada scores {last}"


def setup() -> RuntimeSetup:
    """Model slots on the fake server at ``LW_TEST_MODEL_URL``, and the two tools."""
    base = os.environ["LW_TEST_MODEL_URL"]
    provider = OpenAICompatibleProvider(f"{base}/v1", api_key_env=None, max_retries=0, timeout=20)
    return RuntimeSetup(
        model_slots={
            "orchestrator": ModelSlot(provider=provider, model="orchestrator-model"),
            "worker": ModelSlot(provider=provider, model="worker-model"),
            "planner": ModelSlot(provider=provider, model="planner-model"),
        },
        tools=[lookup, score],
    )
