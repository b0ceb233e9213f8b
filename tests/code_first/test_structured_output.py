"""Structured output: ``ctx.agent(output=Model | schema)`` and LWIR's ``outputSchema``.

The schema goes to the provider (``response_format``), an answer that does not match is
sent back with what is wrong, each try is a committed model call, and a resume replays
the tries already made instead of paying for them again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel

from little_workflow import StepFailedError, WorkflowContext, workflow
from little_workflow.errors import LwirValidationError
from little_workflow.events import HarnessModelCalled, StepCompleted
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.lwir import parse_workflow
from tests.runtime.session_support import cut_log, make


class City(BaseModel):
    city: str
    population: int


SEEN: list[ModelRequest] = []


def _answers(request: ModelRequest) -> str:
    """Wrong twice (not JSON, then a missing field), right the third time."""
    SEEN.append(request)
    tries = sum(1 for message in request.messages if message.role == "assistant")
    return ["Oslo, I think.", '{"city": "Oslo"}', '{"city": "Oslo", "population": 709000}'][
        min(tries, 2)
    ]


@workflow
async def capital(ctx: WorkflowContext, country: str) -> dict[str, object]:
    answer = await ctx.agent("worker", prompt=f"Capital of {country}?", output=City)
    assert isinstance(answer, City)  # an instance, not a dict
    return answer.model_dump()


@workflow
async def stubborn(ctx: WorkflowContext, country: str) -> str:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    try:
        await ctx.agent("worker", prompt=country, output=schema, output_tries=2)
    except StepFailedError as error:
        return f"{error.cause_code}: {error}"
    return "answered"


@pytest.fixture(autouse=True)
def _fresh() -> None:
    SEEN.clear()


async def test_an_answer_is_sent_back_until_it_matches_the_model(tmp_path: Path) -> None:
    provider = scripted(_answers)
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        result = await rt.run(capital, {"country": "Norway"}, run_id="run_city")
        records = await rt.events.read("run_city")
    assert result.output == {"city": "Oslo", "population": 709000}
    assert provider.calls == 3
    assert sum(isinstance(r.event, HarnessModelCalled) for r in records) == 3
    # The schema went to the provider on every try, named after the model.
    formats = [request.response_format for request in SEEN]
    assert len(formats) == 3
    fmt = formats[0]
    assert fmt is not None
    assert formats == [fmt] * 3
    assert (fmt.name, fmt.schema_) == ("City", City.model_json_schema())
    # Each refusal told the model what was wrong.
    feedback = [m.text or "" for m in SEEN[-1].messages if m.role == "user"][1:]
    assert len(feedback) == 2
    assert "was asked for JSON" in feedback[0]
    assert "population" in feedback[1]
    completed = [r.event for r in records if isinstance(r.event, StepCompleted)]
    assert [(e.step_path, e.output) for e in completed] == [("worker", result.output)]


async def test_the_tries_are_bounded_and_the_step_fails_typed(tmp_path: Path) -> None:
    provider = scripted(lambda request: "no JSON here")
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        result = await rt.run(stubborn, {"country": "Norway"}, run_id="run_stubborn")
    assert result.output.startswith("step_failed: ")
    assert "output_invalid: the model gave no answer matching the output schema" in result.output
    assert "in 2 tries" in result.output
    assert provider.calls == 2


async def test_a_resume_replays_the_tries_already_paid_for(tmp_path: Path) -> None:
    rt, _, _ = make(tmp_path, provider=scripted(_answers))
    async with rt:
        whole = await rt.run(capital, {"country": "Norway"}, run_id="run_whole")
        records = await rt.events.read("run_whole")
        # The log as a kill would leave it right after the second try was committed.
        called = [i for i, r in enumerate(records) if isinstance(r.event, HarnessModelCalled)]
        upto = next(
            i + 1
            for i, r in enumerate(records)
            if i > called[1] and type(r.event).__name__ == "HarnessModelResponded"
        )
        await cut_log(rt, "run_whole", "run_cut", upto)
    provider = scripted(_answers)
    rt, _, _ = make(tmp_path, provider=provider)
    async with rt:
        resumed = await rt.resume("run_cut")
    assert resumed.output == whole.output
    assert provider.calls == 1  # only the third try is made again


def test_lwir_output_schema_is_checked_when_the_file_is_read() -> None:
    end = {"id": "end", "kind": "output", "value": "${steps.a.output}"}
    base = {"lwir": 1, "name": "w", "steps": [{"id": "a", "kind": "agent", "slot": "s"}, end]}
    good = {**base}
    good["steps"] = [
        {**base["steps"][0], "outputSchema": {"type": "object"}, "outputTries": 2},
        end,
    ]  # type: ignore[index]
    step = parse_workflow(good).steps[0]
    assert (step.output_schema, step.output_tries) == ({"type": "object"}, 2)  # type: ignore[union-attr]
    bad = {**base}
    bad["steps"] = [{**base["steps"][0], "outputSchema": {"type": "thing"}}, end]  # type: ignore[index]
    with pytest.raises(LwirValidationError, match="not a valid JSON Schema"):
        parse_workflow(bad)
