from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.codec import (
    MAX_DEPTH,
    canonical_json,
    check_json_value,
    dumps,
    loads,
    sha256_digest,
    to_json_value,
)
from little_workflow.errors import CorruptDataError, InvalidValueError
from little_workflow.storage import create_file_storage, open_storage

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"])),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.text(alphabet=st.characters(exclude_categories=["Cs"])), children, max_size=5
        )
    ),
    max_leaves=30,
)


def test_canonical_json_sorts_keys_and_drops_spaces() -> None:
    value = {"b": [1, {"z": None, "a": True}], "a": "ü"}
    assert canonical_json(value) == '{"a":"ü","b":[1,{"a":true,"z":null}]}'.encode()


def test_sha256_digest_is_prefixed_hex_of_canonical_json() -> None:
    value = {"name": "review", "steps": []}
    expected = hashlib.sha256(b'{"name":"review","steps":[]}').hexdigest()
    assert sha256_digest(value) == f"sha256:{expected}"
    assert sha256_digest({"steps": [], "name": "review"}) == sha256_digest(value)
    assert sha256_digest({"steps": [1], "name": "review"}) != sha256_digest(value)


@given(json_values)
def test_dumps_loads_round_trip(value: Any) -> None:
    assert loads(dumps(value)) == value
    assert json.loads(canonical_json(value)) == value


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (float("nan"), "JSON cannot represent"),
        ({"a": [1, float("inf")]}, "value.a[1]"),
        ({1: "x"}, "keys must be strings"),
        (b"bytes", "bytes"),
        ({"s": {1}}, "set"),
        (object(), "object"),
        ("lone \ud800 surrogate", "surrogate"),
        ({"n": [10**5000]}, "digits"),
    ],
    ids=["nan", "inf", "int-key", "bytes", "set", "object", "surrogate", "huge-int"],
)
def test_non_json_values_are_refused_with_the_place(value: object, fragment: str) -> None:
    with pytest.raises(InvalidValueError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        dumps(value)


@pytest.mark.parametrize("value", [10**5000, {"a": [1, 10**4301]}], ids=["int", "nested"])
def test_an_int_too_long_to_write_is_invalid_not_a_value_error(value: object) -> None:
    for check in (dumps, to_json_value):
        with pytest.raises(InvalidValueError, match="the result"):
            check(value, where="the result")


@given(json_values)
def test_to_json_value_returns_a_plain_value_as_it_is(value: Any) -> None:
    assert to_json_value(value) is value


def test_to_json_value_turns_tuples_into_lists_wherever_they_are() -> None:
    value = {"a": (1, (2, {"b": (3,)})), "c": [()]}
    copied = to_json_value(value)
    assert copied == {"a": [1, [2, {"b": [3]}]], "c": [[]]}
    assert json.dumps(copied) == json.dumps(value)
    assert type(copied["a"]) is list  # type: ignore[index,call-overload]


def test_deep_nesting_is_refused_not_a_recursion_error() -> None:
    deep: Any = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(InvalidValueError, match="nested"):
        check_json_value(deep)
    with pytest.raises(CorruptDataError):
        loads("[" * 100_000 + "]" * 100_000, where="file x")


@pytest.mark.parametrize("text", ['{"a": 1', "", "nope", '{"a": NaN}x'])
def test_loads_reports_where(text: str) -> None:
    with pytest.raises(CorruptDataError, match="snapshot of run_1"):
        loads(text, where="snapshot of run_1")


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for index in range(levels):
        value = {"k": value} if index % 2 else [value]
    return value


@pytest.mark.parametrize("levels", [MAX_DEPTH + 9, 900])
def test_loads_refuses_text_nested_deeper_than_the_limit(levels: int) -> None:
    # 900 levels parse without a RecursionError: only the depth check stops them.
    text = "[" * levels + "]" * levels
    with pytest.raises(CorruptDataError, match=r"snapshot x is JSON nested more than \d+ levels"):
        loads(text, where="snapshot x")
    with pytest.raises(CorruptDataError, match="nested more than"):
        loads(text.encode(), where="snapshot x")


async def test_a_value_nested_to_the_write_limit_reads_back_from_every_store(
    tmp_path: Path,
) -> None:
    deepest = _nested(MAX_DEPTH)
    assert loads(dumps(deepest)) == deepest
    with pytest.raises(InvalidValueError):
        dumps([deepest])
    file_store = create_file_storage(tmp_path / "files")
    sqlite_store = await open_storage(f"sqlite:///{tmp_path / 'db'}")
    try:
        for store in (file_store, sqlite_store):
            await store.set("deep", deepest)
            assert await store.get("deep") == deepest
    finally:
        await file_store.close()
        await sqlite_store.close()


def test_wide_values_and_brackets_in_strings_are_not_too_deep() -> None:
    wide = [{"a": [i]} for i in range(2_000)]
    assert loads(dumps(wide)) == wide
    brackets = {"text": "[{" * 5_000}
    assert loads(dumps(brackets)) == brackets
