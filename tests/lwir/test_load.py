"""Reading documents: formats, limits, hostile YAML, and errors that name file and line."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from little_workflow.lwir import (
    MAX_DOCUMENT_BYTES,
    MAX_NESTING_DEPTH,
    LwirLoadError,
    LwirSyntaxError,
    LwirTooLargeError,
    LwirValidationError,
    load_workflow,
    parse_workflow,
    read_document,
)

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.timeout(10)
def test_billion_laughs_is_refused() -> None:
    with pytest.raises(LwirTooLargeError) as caught:
        parse_workflow(BILLION_LAUGHS, source="laughs.yaml")
    assert caught.value.code == "lwir_too_large"
    assert "expands to more than" in caught.value.message


def test_small_aliases_are_fine() -> None:
    text = """\
lwir: 1
name: w
steps:
  - {id: a, kind: execute, fn: "m:f", retry: &r {attempts: 3}}
  - {id: b, kind: execute, fn: "m:g", retry: *r}
  - {id: done, kind: output, value: 1}
"""
    workflow = parse_workflow(text)
    assert workflow.steps[0] == workflow.steps[0]
    assert read_document(text)["steps"][1]["retry"] == {"attempts": 3}  # type: ignore[call-overload,index]


@pytest.mark.timeout(10)
def test_recursive_alias_is_refused() -> None:
    with pytest.raises(LwirSyntaxError, match="alias refers to a node that contains it"):
        read_document("a: &x [1, *x]\n", format="yaml")


@pytest.mark.timeout(10)
def test_oversized_documents_are_refused(tmp_path: Path) -> None:
    big = "# " + "x" * MAX_DOCUMENT_BYTES + "\n"
    with pytest.raises(LwirTooLargeError):
        parse_workflow(big)
    with pytest.raises(LwirTooLargeError):
        parse_workflow(big.encode())
    with pytest.raises(LwirTooLargeError):
        parse_workflow("#" + "é" * (MAX_DOCUMENT_BYTES // 2 + 1))  # counted in UTF-8 bytes
    file = tmp_path / "big.yaml"
    file.write_text(big, encoding="utf-8")
    with pytest.raises(LwirTooLargeError, match=r"big\.yaml"):
        load_workflow(file)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("syntax", ["json", "yaml"])
def test_deep_nesting_is_refused(syntax: str) -> None:
    for depth in (MAX_NESTING_DEPTH + 5, 50_000):
        with pytest.raises(LwirTooLargeError, match="nested more than"):
            read_document("[" * depth + "]" * depth, format=syntax)  # type: ignore[arg-type]
    nested: object = 1
    for _ in range(MAX_NESTING_DEPTH + 5):
        nested = [nested]
    with pytest.raises(LwirTooLargeError, match="nested more than"):
        parse_workflow({"lwir": 1, "name": "w", "steps": nested})


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "flow.yaml"
    file.write_text("lwir: 1\nname: w\nsteps:\n  - {id: a, kind: [\n", encoding="utf-8")
    with pytest.raises(LwirSyntaxError) as caught:
        load_workflow(file)
    assert caught.value.code == "lwir_syntax"
    assert caught.value.source == str(file)
    assert caught.value.line == 5
    assert caught.value.message.startswith(f"{file}:5:1: malformed YAML: ")


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "flow.json"
    file.write_text('{"lwir": 1,\n "name": "w",\n "steps": [,]}', encoding="utf-8")
    with pytest.raises(LwirSyntaxError) as caught:
        load_workflow(file)
    assert (caught.value.line, caught.value.column) == (3, 12)
    assert caught.value.message == f"{file}:3:12: malformed JSON: Expecting value"


@pytest.mark.parametrize(
    ("text", "syntax", "message"),
    [
        ('{"a": 1, "a": 2}', "json", "malformed JSON: duplicate key 'a'"),
        ('{"a": NaN}', "json", "malformed JSON: NaN is not JSON"),
        ("a: 1\na: 2\n", "yaml", "2:1: duplicate key 'a'"),
        ("a: !!python/object:os.system {}\n", "yaml", "unsupported YAML tag"),
        ("a: !!binary aGk=\n", "yaml", "unsupported YAML scalar"),
        ("a: !!float .nan\n", "yaml", "unsupported YAML scalar"),
        ("a: !custom x\n", "yaml", "unsupported YAML scalar"),
        ("1: x\n", "yaml", "mapping keys must be strings; quote the key '1'"),
        ("true: x\n", "yaml", "mapping keys must be strings"),
        ("? [a]\n: x\n", "yaml", "mapping keys must be strings"),
        ("a: &b {x: 1}\nc:\n  <<: *b\n", "yaml", "merge keys (<<) are not supported"),
        ("--- 1\n--- 2\n", "yaml", "malformed YAML"),
    ],
)
def test_not_json_is_refused(text: str, syntax: str, message: str) -> None:
    with pytest.raises(LwirSyntaxError, match=None) as caught:
        read_document(text, format=syntax)  # type: ignore[arg-type]
    assert message in caught.value.message


def test_yaml_scalars_mean_what_json_means() -> None:
    text = """\
bools: [true, False, TRUE]
strings: [yes, no, on, off, NO, y, 2024-01-01, 12:30, 0x10, 0o7, .inf, 1_000, "1"]
numbers: [0, -3, +4, 1.5, 1e3, .5, 2.]
nulls: [~, null, ]
empty:
"""
    assert read_document(text, format="yaml") == {
        "bools": [True, False, True],
        "strings": [
            *["yes", "no", "on", "off", "NO", "y", "2024-01-01", "12:30", "0x10", "0o7"],
            *[".inf", "1_000", "1"],
        ],
        "numbers": [0, -3, 4, 1.5, 1000.0, 0.5, 2.0],
        "nulls": [None, None],
        "empty": None,
    }


def test_format_is_chosen_by_suffix_then_by_content(example_json: str) -> None:
    assert read_document('{"a": 1}') == {"a": 1}
    assert read_document("a: 1") == {"a": 1}
    with pytest.raises(LwirSyntaxError, match="malformed JSON"):
        read_document("a: 1", source="x.json")
    assert parse_workflow(example_json.encode("utf-8-sig")).name == "review"  # BOM is fine


def test_bytes_must_be_utf8() -> None:
    with pytest.raises(LwirSyntaxError, match="not UTF-8"):
        read_document(b"a: \xff\n")


def test_load_errors(tmp_path: Path) -> None:
    with pytest.raises(LwirLoadError, match=r"unknown workflow file type '\.txt'"):
        load_workflow(tmp_path / "flow.txt")
    with pytest.raises(LwirLoadError, match="cannot read workflow file") as caught:
        load_workflow(tmp_path / "missing.yaml")
    assert caught.value.code == "lwir_load_error"


def test_validation_errors_name_the_file(tmp_path: Path) -> None:
    file = tmp_path / "flow.yaml"
    file.write_text("lwir: 1\nname: w\nsteps: []\n", encoding="utf-8")
    with pytest.raises(LwirValidationError) as caught:
        load_workflow(file)
    assert caught.value.source == str(file)
    assert str(caught.value) == (
        f"invalid LWIR workflow in {file} (1 problem):\n  steps: must not be empty"
    )


@given(st.text(max_size=200), st.sampled_from(["json", "yaml"]))
@settings(max_examples=300)
def test_any_text_reads_or_fails_with_a_load_error(text: str, syntax: str) -> None:
    with contextlib.suppress(LwirLoadError):
        read_document(text, format=syntax)  # type: ignore[arg-type]


@given(
    st.text(alphabet=st.sampled_from("{}[]:,-&*!? \n'\"#|>0a.<~"), max_size=60),
    st.sampled_from(["json", "yaml"]),
)
@settings(max_examples=300)
def test_syntax_shaped_noise_reads_or_fails_with_a_load_error(text: str, syntax: str) -> None:
    with contextlib.suppress(LwirLoadError):
        read_document(text, format=syntax)  # type: ignore[arg-type]
