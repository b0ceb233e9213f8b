"""A run's input is checked before the run exists (issue 21, "Catch mistakes before a run
exists"): against the workflow's ``input:`` JSON Schema, and against the ``${input...}``
references every completed run evaluates. A refused input is a ``RunInputError`` naming
the field and the workflow, and nothing is written: no run, no pinned workflow."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from little_workflow import workflow
from little_workflow.errors import LwirValidationError, RunInputError
from little_workflow.lwir import parse_workflow
from little_workflow.lwir._input import input_problems
from little_workflow.runtime import Runtime, WorkflowContext

FUNCS = "tests.lwir.test_input_check"


def echo(**values: Any) -> Any:
    return values


def pick(**values: Any) -> str:
    return "a"


def doc(steps: list[dict[str, Any]], schema: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {"lwir": 1, "name": "checked", "steps": steps}
    if schema is not None:
        document["input"] = schema
    return document


SCHEMA = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "limit": {"type": "integer", "minimum": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["query"],
    "additionalProperties": False,
}
ECHO_QUERY = [
    {"id": "fetch", "kind": "execute", "fn": f"{FUNCS}:echo", "with": {"q": "${input.query}"}},
    {"id": "done", "kind": "output", "value": "${steps.fetch.output}"},
]


def paths(workflow_doc: dict[str, Any], value: object) -> list[str]:
    return [problem.path for problem in input_problems(parse_workflow(workflow_doc), value)]


def test_the_input_schema_is_enforced_field_by_field() -> None:
    workflow_doc = doc(ECHO_QUERY, SCHEMA)
    assert paths(workflow_doc, {"query": "q", "limit": 2, "tags": ["a"]}) == []
    assert paths(workflow_doc, {"limit": 2}) == ["input.query"]
    assert paths(workflow_doc, {"query": "", "limit": 0}) == ["input.query", "input.limit"]
    assert paths(workflow_doc, {"query": "q", "tags": ["a", 3]}) == ["input.tags[1]"]
    assert paths(workflow_doc, {"query": "q", "extra": 1}) == ["input.extra"]
    problems = input_problems(parse_workflow(workflow_doc), {"query": 5})
    assert str(problems[0]) == (
        "input.query: must be a string, not an integer (the workflow's input schema)"
    )


def test_an_input_schema_the_check_cannot_apply_is_a_validation_error() -> None:
    schema = {
        "type": "objekt",
        "required": "query",
        "properties": {"q": {"pattern": "("}},
        "unevaluatedProperties": False,
    }
    with pytest.raises(LwirValidationError) as caught:
        parse_workflow(doc(ECHO_QUERY, schema))
    assert [p.path for p in caught.value.problems] == [
        "input.unevaluatedProperties",
        "input.type",
        "input.required",
        "input.properties.q.pattern",
    ]


def test_without_a_schema_the_references_every_run_reads_are_checked() -> None:
    workflow_doc = doc(ECHO_QUERY)
    assert paths(workflow_doc, {"query": "q"}) == []
    [problem] = input_problems(parse_workflow(workflow_doc), {"qeury": "q"})
    assert str(problem) == (
        "input.query: missing, and step 'fetch' at steps[0].with.q reads it (${input.query})"
    )
    [problem] = input_problems(parse_workflow(workflow_doc), None)
    assert problem.path == "input.query"
    assert "no input was given" in problem.message


def test_nested_reads_and_indexes_name_the_field_at_fault() -> None:
    steps = [
        {
            "id": "fetch",
            "kind": "execute",
            "fn": f"{FUNCS}:echo",
            "with": {"city": "${input.user.address.city}", "first": "x=${input.items[0]}"},
        },
        {"id": "done", "kind": "output", "value": "${steps.fetch.output}"},
    ]
    assert paths(doc(steps), {"user": {"address": {"city": "c"}}, "items": [1]}) == []
    assert paths(doc(steps), {"user": {"address": {}}, "items": [1]}) == ["input.user.address.city"]
    assert paths(doc(steps), {"user": {"address": "here"}, "items": []}) == [
        "input.user.address",
        "input.items",
    ]


def test_references_a_run_may_never_evaluate_are_left_to_run_time() -> None:
    steps = [
        {"id": "route", "kind": "decision", "fn": f"{FUNCS}:pick", "routes": {"a": "a", "b": "b"}},
        {"id": "a", "kind": "output", "value": "${input.only_on_a}"},
        {"id": "b", "kind": "output", "value": "${input.only_on_b}"},
    ]
    assert paths(doc(steps), {}) == []
    mapped = [
        {
            "id": "each",
            "kind": "map",
            "items": "${input.items}",
            "body": [{"id": "o", "kind": "output", "value": "${input.in_body}"}],
        },
        {"id": "done", "kind": "output", "value": "${steps.each.output}"},
    ]
    # The map's items are read by every run; its body only when there are items.
    assert paths(doc(mapped), {}) == ["input.items"]
    assert paths(doc(mapped), {"items": []}) == []
    guarded = [
        {
            "id": "risky",
            "kind": "execute",
            "fn": f"{FUNCS}:echo",
            "with": {"a": "${input.a}"},
            "onError": "handle",
        },
        {"id": "after", "kind": "output", "value": "${input.after}"},
        {"id": "handle", "kind": "output", "value": "${input.handled}"},
    ]
    # Not even the step with onError is read: a template of its own that does not render
    # is a failure it routes (to ``handle``), so the run may still complete.
    assert paths(doc(guarded), {}) == []


async def test_run_refuses_the_input_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checked.json"
    path.write_text(json.dumps(doc(ECHO_QUERY, SCHEMA)))
    async with Runtime(tmp_path / "data") as rt:
        with pytest.raises(RunInputError) as caught:
            await rt.run(path, {"limit": 3}, run_id="run_x")
        with pytest.raises(RunInputError):
            await rt.submit(path, {"query": 1})
        assert await rt.events.list_runs() == []
        assert await rt.kv.list("workflows/") == []
        result = await rt.run(path, {"query": "q"})
    assert result.output == {"q": "q"}
    error = caught.value
    assert error.code == "run_input_invalid"
    assert error.field == "input.query"
    assert error.workflow == f"'checked' ({path})"
    assert error.message == (
        f"the input does not fit workflow 'checked' ({path}): input.query: required, and "
        "missing (the workflow's input schema); no run was started"
    )


async def test_a_refused_input_does_not_even_create_the_data_directory(tmp_path: Path) -> None:
    rt = Runtime(tmp_path / "data")
    with pytest.raises(RunInputError):
        await rt.run(parse_workflow(doc(ECHO_QUERY)), {})
    await rt.close()
    assert not (tmp_path / "data").exists()


@workflow
async def typed(ctx: WorkflowContext, n: int, names: list[str], mode: str = "fast") -> int:
    return n


class Opaque:
    """A hint no JSON value can be: not checked (the body would get a dict)."""


@workflow
async def opaque(ctx: WorkflowContext, thing: Opaque) -> None:
    return None


async def test_a_code_first_input_is_checked_against_the_signature_and_hints(
    tmp_path: Path,
) -> None:
    async with Runtime(tmp_path / "data") as rt:
        with pytest.raises(RunInputError) as caught:
            await rt.run(typed, {"n": "3", "names": ["a", 2], "speed": 1})
        with pytest.raises(RunInputError) as missing:
            await rt.submit(typed, {"names": []})
        assert await rt.events.list_runs() == []
        assert (await rt.run(typed, {"n": 3, "names": ["a"]})).output == 3
        assert (await rt.run(opaque, {"thing": {"any": "dict"}})).output is None
    assert [p.path for p in caught.value.problems] == ["input.n", "input.names[1]", "input.speed"]
    assert caught.value.workflow == f"'{__name__}:typed'"
    assert missing.value.field == "input.n"


async def test_an_outer_loop_refuses_its_input_before_its_manifest(tmp_path: Path) -> None:
    steps = [
        {"id": "o", "kind": "output", "value": "${input.input.topic}"},
    ]
    async with Runtime(tmp_path / "data") as rt:
        with pytest.raises(RunInputError) as caught:
            await rt.run_outer_loop(
                parse_workflow(doc(steps)),
                {"subject": "x"},
                max_outer_cycles=2,
                supervise=lambda cycle: None,
                outer_loop_id="ol_x",
            )
        assert await rt.events.list_runs() == []
    assert caught.value.field == "input.input.topic"
    assert not list((tmp_path / "data" / "outer-loops").iterdir())
