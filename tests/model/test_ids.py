from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.errors import InvalidIdError, InvalidInputError
from little_workflow.ids import MAX_ID_LENGTH, is_valid_id, new_id, validate_id

GOOD = [
    "run_abc123",
    "cand_123",
    "a",
    "0",
    "run-1.2:3",
    "x" * MAX_ID_LENGTH,
    "ol_01JD",
    "A.b_c-d:e",
]
BAD = [
    "",
    "../x",
    "a..b",
    "/etc/passwd",
    "a/b",
    "a b",
    "a\x00b",
    "_leading",
    ".hidden",
    "-dash",
    "x" * (MAX_ID_LENGTH + 1),
    "ünïcode",
    "tab\t",
    "new\nline",
]


@pytest.mark.parametrize("value", GOOD)
def test_good_ids_pass(value: str) -> None:
    assert validate_id(value) == value
    assert is_valid_id(value)


@pytest.mark.parametrize("value", BAD)
def test_bad_ids_raise_a_typed_error_that_says_why(value: str) -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id(value, what="run id")
    assert info.value.code == "invalid_id"
    assert isinstance(info.value, InvalidInputError)
    assert str(info.value).startswith("invalid run id")
    assert not is_valid_id(value)


@pytest.mark.parametrize("value", [None, 3, b"run_1", ["run_1"]])
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(InvalidIdError, match="not a string"):
        validate_id(value)


def test_long_ids_are_shortened_in_the_message() -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id("y" * 5000)
    assert len(str(info.value)) < 250


def test_new_ids_are_valid_unique_and_time_ordered() -> None:
    ids = [new_id("run") for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"run_[0-9a-hjkmnp-tv-z]{26}", value) for value in ids)
    assert all(is_valid_id(value) for value in ids)
    # The first ten characters after the prefix are milliseconds: non-decreasing.
    stamps = [value[4:14] for value in ids]
    assert stamps == sorted(stamps)


@pytest.mark.parametrize("prefix", ["", "Run", "run_", "r-1", "x" * 17])
def test_bad_prefixes_are_refused(prefix: str) -> None:
    with pytest.raises(InvalidIdError):
        new_id(prefix)


@given(st.text(max_size=300))
def test_validation_never_raises_anything_else(value: str) -> None:
    try:
        assert validate_id(value) == value
    except InvalidIdError:
        assert not is_valid_id(value)
    else:
        assert ".." not in value
        assert "/" not in value
        assert len(value) <= MAX_ID_LENGTH
