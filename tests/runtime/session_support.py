"""Helpers for the Layer C tests: runtimes as after a restart, logs cut at a chosen event."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from little_workflow.errors import ModelProviderError
from little_workflow.events import Event
from little_workflow.harness.models import ModelRequest, ScriptedProvider, scripted
from little_workflow.lwir import Workflow
from little_workflow.runtime import Runtime
from tests.runtime.agent_flows import Tools, script, slots
from tests.runtime.support import runtime

ADA = {"who": "Ada"}
TURN0, TURN1, TURN2 = (f"agent.turns[{n}].model" for n in range(3))
LOOKUP, SCORE = "agent.turns[0].tools[call_lookup]", "agent.turns[1].tools[call_score]"


def make(
    data_dir: Path,
    *,
    provider: ScriptedProvider | None = None,
    workflows: tuple[Workflow, ...] = (),
    **options: Any,
) -> tuple[Runtime, ScriptedProvider, Tools]:
    """A runtime with the scripted model and fresh counting tools, as after a restart."""
    provider = provider or scripted(script)
    tools = Tools()
    rt = runtime(
        data_dir, model_slots=slots(provider), tools=tools.all(), workflows=workflows, **options
    )
    return rt, provider, tools


async def cut_log(
    rt: Runtime,
    source: str,
    target: str,
    upto: int,
    edit: Callable[[Event], Event] | None = None,
) -> list[Event]:
    """Write ``source``'s first ``upto`` events (edited) as the log of run ``target``."""
    events = [record.event for record in (await rt.events.read(source))[:upto]]
    if edit is not None:
        events = [edit(event) for event in events]
    await rt.events.append(target, events, sync=True, expected_seq=0)
    return events


def seq_of(records: list[Any], type_name: str, call_id: str | None = None) -> int:
    """The sequence number of the first event of ``type_name`` (and ``call_id``)."""
    for record in records:
        if record.type == type_name and call_id in (None, getattr(record.event, "call_id", None)):
            return int(record.seq)
    raise AssertionError(f"no {type_name} {call_id or ''} in the log")


def calls_to(records: list[Any], type_name: str, call_id: str) -> int:
    return sum(
        1
        for record in records
        if record.type == type_name and getattr(record.event, "call_id", None) == call_id
    )


class Outage:
    """The scripted model, down for the first ``failures`` requests of turn ``turn``."""

    def __init__(self, failures: int, turn: int = 1) -> None:
        self.failures = failures
        self.turn = turn

    def __call__(self, request: ModelRequest) -> Any:
        turns = sum(1 for message in request.messages if message.role == "assistant")
        if turns == self.turn and self.failures > 0:
            self.failures -= 1
            raise ModelProviderError("service unavailable", provider="scripted", status=503)
        return script(request)


def same_id_twice(request: ModelRequest) -> Any:
    """Asks for two lookups under one tool call id, then answers with what it got."""
    if not any(message.role == "assistant" for message in request.messages):
        calls = [("c1", "Ada"), ("c1", "Bo")]
        return {
            "tool_calls": [
                {"id": call_id, "name": "lookup", "arguments": {"name": name}}
                for call_id, name in calls
            ]
        }
    return json.dumps([json.loads(m.content or "") for m in request.messages if m.role == "tool"])
