"""The published LWIR JSON Schema (issue 21): generated from the models, committed in
``docs/lwir.schema.json``, referenced by the examples, and met by every workflow file of
the repository.

The repository has no JSON Schema library among its dependencies; the schema is checked
with the validator the input check uses (``little_workflow.lwir._jsonschema``), whose own
keywords are tested at the end of this file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from little_workflow.lwir import LwirError, parse_workflow, read_document
from little_workflow.lwir._jsonschema import schema_problems, validate
from little_workflow.lwir._schema import lwir_json_schema, lwir_json_schema_text

REPO = Path(__file__).resolve().parents[2]
COMMITTED = REPO / "docs" / "lwir.schema.json"
REGENERATE = "little-workflow schema > docs/lwir.schema.json"
_SKIP_DIRS = {".git", ".venv", "node_modules", ".little-workflow"}


def workflow_files() -> list[Path]:
    """Every LWIR document in the repository: a .yaml/.yml/.json file with an ``lwir`` key."""
    found = []
    for path in sorted(REPO.rglob("*")):
        relative = path.relative_to(REPO)
        if _SKIP_DIRS & set(relative.parts) or path.suffix not in {".yaml", ".yml", ".json"}:
            continue
        if path == COMMITTED:
            continue
        try:
            document = read_document(path.read_bytes(), source=str(path))
        except Exception:  # not a document this project reads (a CI file, say)
            continue
        if isinstance(document, dict) and "lwir" in document:
            found.append(path)
    return found


FILES = workflow_files()


def test_the_committed_schema_is_the_generated_one() -> None:
    assert COMMITTED.exists(), f"docs/lwir.schema.json is missing; create it with: {REGENERATE}"
    assert COMMITTED.read_text(encoding="utf-8") == lwir_json_schema_text(), (
        f"docs/lwir.schema.json is out of date with the LWIR models; regenerate it with: "
        f"{REGENERATE}"
    )


def test_the_schema_is_a_schema_the_validator_applies() -> None:
    assert schema_problems(lwir_json_schema(), "schema") == []


def test_the_repository_has_workflow_files_in_every_place_they_live() -> None:
    places = {path.relative_to(REPO).parts[0] for path in FILES}
    assert {"examples", "little_workflow", "tests"} <= places
    assert len(FILES) > 40


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_workflow_file_meets_the_schema(path: Path) -> None:
    document = read_document(path.read_bytes(), source=str(path))
    problems = validate(document, lwir_json_schema(), "document")
    assert problems == [], f"{path.relative_to(REPO)}: {problems}"


def test_every_example_workflow_names_the_schema_for_its_editor() -> None:
    examples = [path for path in FILES if path.relative_to(REPO).parts[0] == "examples"]
    assert examples
    for path in examples:
        first = path.read_text(encoding="utf-8").splitlines()[0]
        match = re.fullmatch(r"# yaml-language-server: \$schema=(\S+)", first)
        assert match, f"{path}: the first line should be '# yaml-language-server: $schema=...'"
        assert (path.parent / match.group(1)).resolve() == COMMITTED


@pytest.mark.parametrize(
    ("change", "where", "says"),
    [
        ({"kind": "execut"}, "document.steps[0].kind", "must be one of"),
        ({"fn": "no_colon"}, "document.steps[0].fn", "does not match the pattern"),
        ({"id": "a.b"}, "document.steps[0].id", "does not match the pattern"),
        ({"nxt": "done"}, "document.steps[0].nxt", "is not a field of this object"),
        ({"maxVisits": "3"}, "document.steps[0].maxVisits", "must be an integer"),
        ({"kind": None}, "document.steps[0].kind", "required, and missing"),
    ],
)
def test_the_schema_refuses_what_the_loader_refuses(
    change: dict[str, Any], where: str, says: str
) -> None:
    step: dict[str, Any] = {"id": "s", "kind": "execute", "fn": "pkg.mod:f"}
    step.update(change)
    step = {key: value for key, value in step.items() if value is not None}
    document = {
        "lwir": 1,
        "name": "w",
        "steps": [step, {"id": "done", "kind": "output", "value": 1}],
    }
    problems = validate(document, lwir_json_schema(), "document")
    assert [p.path for p in problems] == [where]
    assert says in problems[0].message
    with pytest.raises(LwirError):  # the loader agrees: it is not a workflow
        parse_workflow(document)


def test_the_schema_is_printed_by_the_command_module() -> None:
    # `little-workflow schema` prints exactly the committed text (tests/cli checks the CLI).
    assert json.loads(lwir_json_schema_text())["$schema"].endswith("2020-12/schema")


# --- the validator's keywords ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "good", "bad"),
    [
        ({"type": "integer"}, [1, 2.0], [1.5, True, "1"]),
        ({"type": ["string", "null"]}, ["a", None], [1]),
        ({"enum": [1, "a"]}, [1, 1.0, "a"], [True, "b"]),
        ({"const": {"a": [1]}}, [{"a": [1]}], [{"a": [2]}]),
        ({"minimum": 1, "exclusiveMaximum": 3}, [1, 2.5], [0, 3]),
        ({"multipleOf": 0.1}, [0.3, 1], [0.35]),
        ({"minLength": 2, "maxLength": 3, "pattern": "^a"}, ["ab", "abc"], ["a", "abcd", "ba"]),
        ({"minItems": 1, "uniqueItems": True}, [[1, 2]], [[], [1, 1.0]]),
        ({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}}, [["a", 1]], [[1]]),
        ({"contains": {"const": 3}}, [[1, 3]], [[1]]),
        (
            {"patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False},
            [{"x_a": 1}],
            [{"x_a": "1"}, {"y": 1}],
        ),
        ({"propertyNames": {"maxLength": 2}, "maxProperties": 1}, [{"ab": 1}], [{"abc": 1}]),
        ({"dependentRequired": {"a": ["b"]}}, [{"a": 1, "b": 2}, {"b": 1}], [{"a": 1}]),
        ({"anyOf": [{"type": "string"}, {"minimum": 5}]}, ["a", 6], [4]),
        ({"oneOf": [{"minimum": 0}, {"maximum": 10}]}, [-1, 11], [5]),
        ({"not": {"type": "null"}}, [0], [None]),
        (
            {"if": {"minimum": 10}, "then": {"multipleOf": 2}, "else": {"maximum": 5}},
            [12, 4],
            [11, 6],
        ),
        ({"$defs": {"n": {"type": "integer"}}, "items": {"$ref": "#/$defs/n"}}, [[1]], [["1"]]),
        (False, [], [None]),
    ],
)
def test_the_validator_applies_each_keyword(
    schema: object, good: list[object], bad: list[object]
) -> None:
    assert schema_problems(schema) == []
    for value in good:
        assert validate(value, schema) == [], value
    for value in bad:
        assert validate(value, schema) != [], value
