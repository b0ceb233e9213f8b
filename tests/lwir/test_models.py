"""The document model: the issue's example, the Python builder, defaults, hashing."""

from __future__ import annotations

import json
from pathlib import Path

import pydantic
import pytest

from little_workflow.lwir import (
    DEFAULT_CONCURRENCY,
    STEP_KINDS,
    AgentStep,
    DecisionStep,
    ExecuteStep,
    LwirValidationError,
    MapStep,
    OutputStep,
    RetryPolicy,
    SleepStep,
    SubWorkflowStep,
    ToolStep,
    WaitStep,
    Workflow,
    canonical_definition,
    definition_hash,
    effective_next,
    load_workflow,
    parse_workflow,
    workflow_version_id,
)

# Pinned: the hash is stored in every run's log, so a change in how it is computed
# breaks every resume. Change it only together with a new ``lwir`` version.
EXAMPLE_HASH = "sha256:2b79df39e30d11e11ff6388729195a3fb3c3f1d4d425d28633ca31625a62a64b"


def build_example() -> Workflow:
    return Workflow(
        name="review",
        steps=[
            ExecuteStep(
                id="fetch",
                fn="pkg.module:fetch",
                with_={"query": "${input.query}"},
                next="review-candidates",
            ),
            MapStep(
                id="review-candidates",
                items="${steps.fetch.output.candidates}",
                key="id",
                body=[
                    ExecuteStep(id="worker", fn="pkg.module:score", with_={"candidate": "${item}"})
                ],
                next="judge",
            ),
            DecisionStep(
                id="judge",
                fn="pkg.module:judge",
                max_visits=3,
                routes={"revise": "revise", "accept": "done"},
            ),
            ExecuteStep(id="revise", fn="pkg.module:revise", max_visits=3, next="judge"),
            OutputStep(id="done", value="${steps.judge.output}"),
        ],
    )


def test_example_parses_equal_from_yaml_and_json(example_yaml: str, example_json: str) -> None:
    from_yaml = parse_workflow(example_yaml, format="yaml")
    from_json = parse_workflow(example_json, format="json")
    assert from_yaml == from_json
    assert definition_hash(from_yaml) == definition_hash(from_json) == EXAMPLE_HASH
    assert workflow_version_id(from_yaml) == "wv_" + EXAMPLE_HASH[7:23]


def test_example_fields(example_yaml: str) -> None:
    workflow = parse_workflow(example_yaml)
    fetch, review, judge, revise, done = workflow.steps
    assert isinstance(fetch, ExecuteStep)
    assert fetch.with_ == {"query": "${input.query}"}
    assert isinstance(review, MapStep)
    assert review.key == "id"
    assert review.concurrency == DEFAULT_CONCURRENCY
    assert [step.id for step in review.body] == ["worker"]
    assert isinstance(judge, DecisionStep)
    assert judge.max_visits == 3
    assert judge.routes == {"revise": "revise", "accept": "done"}
    assert isinstance(revise, ExecuteStep)
    assert revise.retry == RetryPolicy()
    assert isinstance(done, OutputStep)
    assert done.value == "${steps.judge.output}"


def test_builder_produces_the_parsed_model(example_yaml: str) -> None:
    built = build_example()
    assert built == parse_workflow(example_yaml)
    assert definition_hash(built) == EXAMPLE_HASH


def test_builder_may_leave_default_nexts_out() -> None:
    workflow = Workflow(
        name="review",
        steps=[
            ExecuteStep(id="fetch", fn="pkg.module:fetch", with_={"query": "${input.query}"}),
            MapStep(
                id="review-candidates",
                items="${steps.fetch.output.candidates}",
                key="id",
                body=[
                    ExecuteStep(id="worker", fn="pkg.module:score", with_={"candidate": "${item}"})
                ],
            ),
            DecisionStep(
                id="judge",
                fn="pkg.module:judge",
                max_visits=3,
                routes={"revise": "revise", "accept": "done"},
            ),
            ExecuteStep(id="revise", fn="pkg.module:revise", max_visits=3, next="judge"),
            OutputStep(id="done", value="${steps.judge.output}"),
        ],
    )
    assert definition_hash(workflow) == EXAMPLE_HASH


def test_load_workflow_reads_files(tmp_path: Path, example_yaml: str, example_json: str) -> None:
    for name, text in [("a.yaml", example_yaml), ("b.yml", example_yaml), ("c.json", example_json)]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        assert definition_hash(load_workflow(tmp_path / name)) == EXAMPLE_HASH


def test_models_are_frozen() -> None:
    workflow = build_example()
    with pytest.raises(pydantic.ValidationError):
        workflow.name = "other"  # type: ignore[misc]
    assert isinstance(workflow.steps, tuple)


def test_dump_by_alias_uses_document_names() -> None:
    dumped = build_example().model_dump(by_alias=True, exclude_defaults=True)
    assert dumped["steps"][0]["with"] == {"query": "${input.query}"}
    assert dumped["steps"][2]["maxVisits"] == 3


def test_hash_ignores_spelled_out_defaults_and_key_order(example_yaml: str) -> None:
    data = json.loads(json.dumps(canonical_definition(parse_workflow(example_yaml))))
    fetch, review, judge, _revise, done = data["steps"]
    fetch.update(maxVisits=1, retry={"attempts": 1, "backoff": 1, "retryOn": []}, description=None)
    review.update(concurrency=DEFAULT_CONCURRENCY, next="judge")
    judge["with"] = {}
    done["id"] = "done"
    reordered = dict(reversed(list(data.items())))
    assert definition_hash(parse_workflow(reordered)) == EXAMPLE_HASH


def test_hash_omits_next_naming_the_following_step(example_yaml: str) -> None:
    definition = canonical_definition(parse_workflow(example_yaml))
    steps = definition["steps"]
    assert isinstance(steps, list)
    assert isinstance(steps[0], dict)
    assert "next" not in steps[0]  # fetch -> review-candidates is the default
    assert isinstance(steps[3], dict)
    assert steps[3]["next"] == "judge"  # revise -> judge is not
    assert all(isinstance(step, dict) and "kind" in step for step in steps)
    assert definition["lwir"] == 1


def test_canonical_definition_round_trips(example_yaml: str) -> None:
    workflow = parse_workflow(example_yaml)
    again = parse_workflow(canonical_definition(workflow))
    assert definition_hash(again) == definition_hash(workflow)


def test_hash_changes_with_content(example_yaml: str) -> None:
    edited = parse_workflow(example_yaml.replace("maxVisits: 3, routes", "maxVisits: 4, routes"))
    assert definition_hash(edited) != EXAMPLE_HASH
    integer = parse_workflow(example_yaml.replace('value: "${steps.judge.output}"', "value: 1"))
    floating = parse_workflow(example_yaml.replace('value: "${steps.judge.output}"', "value: 1.0"))
    assert definition_hash(integer) != definition_hash(floating)


def test_effective_next(example_yaml: str) -> None:
    steps = parse_workflow(example_yaml).steps
    assert [effective_next(steps, i) for i in range(len(steps))] == [
        "review-candidates",
        "judge",
        None,  # a decision follows a route
        "judge",
        None,  # an output ends its scope
    ]
    review = steps[1]
    assert isinstance(review, MapStep)
    assert effective_next(review.body, 0) is None  # the end of the branch


def test_step_kinds_maps_every_kind() -> None:
    expected = {
        "execute": ExecuteStep,
        "tool": ToolStep,
        "agent": AgentStep,
        "decision": DecisionStep,
        "map": MapStep,
        "workflow": SubWorkflowStep,
        "output": OutputStep,
        "wait": WaitStep,
        "sleep": SleepStep,
    }
    assert expected == STEP_KINDS


def test_every_kind_in_one_document() -> None:
    workflow = parse_workflow(
        {
            "lwir": 1,
            "name": "all.kinds",
            "description": "one of each",
            "input": {"type": "object", "properties": {"q": {"type": "string"}}},
            "steps": [
                {"id": "t", "kind": "tool", "tool": "web_search", "with": {"q": "${input.q}"}},
                {"id": "sub", "kind": "workflow", "workflow": "flows/score.yaml"},
                {"id": "named", "kind": "workflow", "workflow": "candidate.scoring"},
                {
                    "id": "m",
                    "kind": "map",
                    "items": [1, 2],
                    "body": [
                        {"id": "x", "kind": "execute", "fn": "a.b:c", "with": {"n": "${item}"}},
                        {"id": "r", "kind": "output", "value": {"n": "${steps.x.output}"}},
                    ],
                },
                {"id": "out", "kind": "output", "value": "${steps.m.output}"},
            ],
        }
    )
    sub, named = workflow.steps[1], workflow.steps[2]
    assert isinstance(sub, SubWorkflowStep)
    assert isinstance(named, SubWorkflowStep)
    assert sub.is_file
    assert not named.is_file


def test_retry_policy_delays_and_matching() -> None:
    policy = RetryPolicy(
        attempts=5, backoff=0.5, multiplier=3, max_backoff=4, retry_on=("timeout",)
    )
    assert [policy.delay_before(n) for n in range(1, 6)] == [0.0, 0.5, 1.5, 4.0, 4.0]
    assert policy.retries(["timeout", "TimeoutError"])
    assert not policy.retries(["step_failed", "ValueError"])
    assert RetryPolicy().retries(["anything"])
    huge = RetryPolicy(attempts=100, backoff=1, multiplier=1e300, max_backoff=7)
    assert huge.delay_before(100) == 7


def test_building_an_invalid_workflow_raises_the_typed_error() -> None:
    with pytest.raises(LwirValidationError) as caught:
        Workflow(name="w", steps=[ExecuteStep(id="a", fn="m:f", next="nowhere")])
    assert [str(p) for p in caught.value.problems] == [
        'steps[0].next: unknown step "nowhere"',
        "steps: no output step at the top level; add one ({kind: output, value: ...}) "
        "so the run has a result",
    ]
    assert caught.value.code == "lwir_invalid"
