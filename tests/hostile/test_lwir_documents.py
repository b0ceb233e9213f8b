"""LWIR workflow files (JSON and YAML) from a hostile author: every document ends in a
``Workflow`` or an ``LwirError``, quickly and in bounded memory.

``tests/lwir/test_load.py`` already covers text noise, the classic list billion laughs,
50,000-deep nesting and a 1 MB comment; these add what it lacks: 100,000 levels in every
shape, 100 MB inputs measured for memory, laughs through mappings, surrogates, huge
numbers, and structure-aware fuzzing of whole documents.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.codec import canonical_json
from little_workflow.errors import LittleWorkflowError
from little_workflow.lwir import (
    MAX_DOCUMENT_BYTES,
    LwirError,
    LwirSyntaxError,
    LwirTooLargeError,
    LwirValidationError,
    definition_hash,
    load_workflow,
    parse_workflow,
    read_document,
)
from tests.hostile.support import FUZZ, HUNDRED_MB, expect, json_values, measured

DEEP = 100_000

# Each is 100,000 levels deep and under the 1 MB size limit, so the depth limit is what
# must refuse it.
DEEP_DOCUMENTS = {
    "json arrays": ("json", "[" * DEEP + "]" * DEEP),
    "json objects": ("json", '{"a":' * DEEP + "1" + "}" * DEEP),
    "json inside a step": (
        "json",
        '{"lwir":1,"name":"w","steps":[{"id":"o","kind":"output","value":'
        + "[" * DEEP
        + "]" * DEEP
        + "}]}",
    ),
    "yaml flow sequences": ("yaml", "[" * DEEP + "]" * DEEP),
    "yaml flow mappings": ("yaml", "{a: " * DEEP + "1" + "}" * DEEP),
    "yaml block sequences": ("yaml", "- " * DEEP + "x\n"),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("shape", sorted(DEEP_DOCUMENTS))
def test_100k_levels_of_nesting_are_refused(shape: str) -> None:
    syntax, text = DEEP_DOCUMENTS[shape]
    assert len(text.encode()) <= MAX_DOCUMENT_BYTES
    with pytest.raises(LwirTooLargeError) as caught:
        parse_workflow(text, source=f"deep.{syntax}", format=syntax)  # type: ignore[arg-type]
    assert caught.value.code == "lwir_too_large"
    assert caught.value.message == "deep." + syntax + " is nested more than 100 deep"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("as_bytes", [False, True])
@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_a_100_mb_document_is_refused_before_it_is_parsed(as_bytes: bool, syntax: str) -> None:
    body = '{"lwir": 1, "name": "' + "x" * HUNDRED_MB + '"}'
    document: str | bytes = body.encode() if as_bytes else body
    with measured() as peak, pytest.raises(LwirTooLargeError) as caught:
        parse_workflow(document, source=f"big.{syntax}")
    assert peak.bytes < 1024 * 1024  # nothing copied: refused from its length
    assert caught.value.message == (
        f"big.{syntax} is {len(document)} bytes; the limit is {MAX_DOCUMENT_BYTES} bytes"
    )


@pytest.mark.timeout(30)
def test_a_100_mb_file_is_read_only_up_to_the_limit(tmp_path: Path) -> None:
    file = tmp_path / "huge.json"
    with file.open("wb") as handle:
        handle.write(b'{"lwir": 1, "name": "')
        handle.truncate(HUNDRED_MB)  # sparse: 100 MB of NUL bytes after the prefix
    with measured() as peak, pytest.raises(LwirTooLargeError) as caught:
        load_workflow(file)
    assert peak.bytes < 4 * MAX_DOCUMENT_BYTES
    assert str(file) in caught.value.message


@pytest.mark.timeout(20)
def test_a_string_of_4_byte_characters_is_measured_in_utf8() -> None:
    # Under the limit in characters, over it in bytes: refused, and cheaply.
    text = "#" + "\U0001f600" * (MAX_DOCUMENT_BYTES // 4 + 1)
    with measured() as peak, pytest.raises(LwirTooLargeError):
        read_document(text, format="yaml")
    assert peak.bytes < 8 * MAX_DOCUMENT_BYTES


LAUGHS_THROUGH_MAPPINGS = "a: &a {x: lol, y: lol, z: lol}\n" + "".join(
    f"{b}: &{b} {{x: *{a}, y: *{a}, z: *{a}, w: *{a}}}\n"
    for a, b in zip("abcdefghijklmno", "bcdefghijklmnop", strict=True)
)
LAUGHS_IN_A_STEP = "lwir: 1\nname: w\nsteps:\n  - id: o\n    kind: output\n    value:\n" + "".join(
    f"      {n}: &{n} [{', '.join([f'*{p}'] * 10) if p else 'lol'}]\n"
    for p, n in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "text", [LAUGHS_THROUGH_MAPPINGS, LAUGHS_IN_A_STEP], ids=["mappings", "in-a-step"]
)
def test_billion_laughs_in_other_shapes_are_refused_cheaply(text: str) -> None:
    with measured() as peak, pytest.raises(LwirTooLargeError) as caught:
        parse_workflow(text, source="laughs.yaml")
    assert peak.bytes < 64 * 1024 * 1024
    assert caught.value.message.startswith("laughs.yaml expands to more than 100000 nodes")


@pytest.mark.timeout(10)
def test_an_alias_cycle_through_a_mapping_is_refused() -> None:
    with pytest.raises(LwirSyntaxError, match="alias refers to a node that contains it"):
        read_document("a: &x {b: [1, {c: *x}]}\n", format="yaml")


@pytest.mark.parametrize(
    ("text", "syntax", "where"),
    [
        (
            '{"lwir":1,"name":"w","steps":[{"id":"o","kind":"output","value":"\\ud800"}]}',
            "json",
            "steps[0].value",
        ),
        ('{"lwir":1,"name":"\\udfff x"}', "json", "name"),
        ('{"\\ud800":1}', "json", "a key of the document"),
        (
            'lwir: 1\nname: w\nsteps: [{id: o, kind: output, value: ["\\ud800"]}]\n',
            "yaml",
            "steps[0].value[0]",
        ),
        ('name: "\\ud83d\\ude00"\n', "yaml", "name"),  # a YAML \u pair is two surrogates
    ],
)
def test_a_lone_surrogate_is_a_syntax_error_naming_its_place(
    text: str, syntax: str, where: str
) -> None:
    # Before: read as valid, then UnicodeEncodeError (untyped) when the definition was hashed.
    with pytest.raises(LwirSyntaxError) as caught:
        parse_workflow(text, source=f"flow.{syntax}")
    assert caught.value.code == "lwir_syntax"
    assert caught.value.message.startswith(f"flow.{syntax}: {where} holds a lone surrogate")


def test_a_surrogate_pair_in_json_is_one_character() -> None:
    workflow = parse_workflow(
        '{"lwir":1,"name":"w","steps":[{"id":"o","kind":"output","value":"\\ud83d\\ude00"}]}'
    )
    assert workflow.steps[0].value == "\U0001f600"  # type: ignore[union-attr]
    assert definition_hash(workflow).startswith("sha256:")


@pytest.mark.parametrize(
    ("text", "syntax", "error"),
    [
        ("1" * 5000, "json", LwirSyntaxError),  # past Python's int-digits limit
        ('{"a": ' + "9" * 4000 + "}", "json", LwirValidationError),  # under it: not a workflow
        ("a: " + "1" * 5000, "yaml", LwirSyntaxError),
        (
            '{"lwir":1,"name":"w","steps":[{"id":"o","kind":"output","value":1e999}]}',
            "json",
            LwirValidationError,
        ),
        (
            "lwir: 1\nname: w\nsteps: [{id: o, kind: output, value: 1e999}]\n",
            "yaml",
            LwirSyntaxError,
        ),
        ('{"a": -Infinity}', "json", LwirSyntaxError),
        ("\x00", "json", LwirSyntaxError),
        ("\x00", "yaml", LwirSyntaxError),
        ("a: !!python/name:os.system ''\n", "yaml", LwirSyntaxError),
        ("a: !!python/object/apply:os.system [echo]\n", "yaml", LwirSyntaxError),
        ("%YAML 1.1\n%TAG !e! tag:evil:\n---\na: !e!x 1\n", "yaml", LwirSyntaxError),
    ],
)
def test_numbers_nuls_and_tags_end_in_a_typed_error(
    text: str, syntax: str, error: type[LwirError]
) -> None:
    with pytest.raises(error):
        parse_workflow(text, format=syntax)  # type: ignore[arg-type]


# --- structure-aware fuzzing ---------------------------------------------------------

STEP_KINDS = ["execute", "tool", "agent", "decision", "map", "workflow", "output", "evil", 1]
step_fields = st.dictionaries(
    st.sampled_from(
        [
            "id",
            "kind",
            "fn",
            "tool",
            "with",
            "value",
            "next",
            "items",
            "body",
            "maxVisits",
            "retry",
            "routes",
            "workflow",
            "keyBy",
            "input",
            "__class__",
        ]
    ),
    json_values,
    max_size=5,
)
steps = st.builds(
    lambda fields, kind, ident: {"id": ident, "kind": kind, **fields},
    step_fields,
    st.sampled_from(STEP_KINDS),
    st.sampled_from(["a", "b", "o", "", "../x", "a.b", "\u0000", 7]),
)
documents = st.fixed_dictionaries(
    {"lwir": st.sampled_from([1, 2, "1", None]), "name": st.text(max_size=8) | json_values},
    optional={
        "steps": st.lists(steps, max_size=4) | json_values,
        "input": json_values,
        "description": json_values,
    },
)


def _ends_well(document: object) -> None:
    try:
        workflow = parse_workflow(document)  # type: ignore[arg-type]
    except LwirError as exc:
        expect(exc.code.startswith("lwir_"), exc)
        return
    # What parsed can be hashed and written: no later stage finds it malformed.
    assert definition_hash(workflow).startswith("sha256:")
    assert parse_workflow(
        json.loads(
            canonical_json(workflow.model_dump(mode="json", by_alias=True, exclude_none=True))
        )
    )


@FUZZ
@given(documents, st.sampled_from(["mapping", "json", "yaml"]))
def test_fuzzed_documents_parse_or_fail_with_an_lwir_error(
    document: dict[str, object], form: str
) -> None:
    if form == "mapping":
        _ends_well(document)
        return
    text = json.dumps(document)  # JSON is YAML: the same text through both parsers
    try:
        workflow = parse_workflow(text, format=form)  # type: ignore[arg-type]
    except LittleWorkflowError as exc:
        expect(isinstance(exc, LwirError), exc)
        return
    assert definition_hash(workflow).startswith("sha256:")


@FUZZ
@given(st.binary(max_size=300), st.sampled_from(["json", "yaml"]))
def test_fuzzed_bytes_parse_or_fail_with_an_lwir_error(data: bytes, syntax: str) -> None:
    try:
        read_document(data, format=syntax)  # type: ignore[arg-type]
    except LittleWorkflowError as exc:
        expect(isinstance(exc, LwirError), exc)
