"""Shared by the hostile-input tests: deterministic hypothesis settings, memory measurement,
and strategies for JSON values and for the strings an attacker would try in a path."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from little_workflow.codec import JsonValue

#: Deterministic (the same examples on every run, so CI cannot flake) and quick.
FUZZ = settings(
    max_examples=150,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: 100 MB: a string far over every limit of the parsers under test.
HUNDRED_MB = 100 * 1024 * 1024

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values: st.SearchStrategy[JsonValue] = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=15,
)

#: Pieces an attacker puts in an id, a key, a name or a path.
PATH_TRICKS = [
    "..",
    ".",
    "../",
    "/",
    "\\",
    "..\\",
    "\x00",
    "/etc/passwd",
    "~",
    "%2e%2e",
    "%2f",
    "\u2215",  # DIVISION SLASH
    "\uff0e\uff0e",  # FULLWIDTH FULL STOPs
    "\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u200b",  # ZERO WIDTH SPACE
    "\ufeff",
    "\n",
    "\r",
    "\t",
    " ",
    ":",
    "a",
    "run_1",
    "\ud800",  # a lone surrogate
    "e\u0301",  # combining accent
    "\u212a",  # KELVIN SIGN (NFKC: K)
]
path_tricks = st.lists(st.sampled_from(PATH_TRICKS), min_size=1, max_size=6).map("".join)


@dataclass
class Peak:
    """The peak of Python allocations inside a ``measured()`` block, in bytes."""

    bytes: int = 0


@contextmanager
def measured() -> Iterator[Peak]:
    """Measure the peak of Python allocations made inside the block (``tracemalloc``)."""
    peak = Peak()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        yield peak
        peak.bytes = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def expect(condition: object, error: BaseException) -> None:
    """Fail with ``error`` chained unless ``condition``: the check on an error a fuzz test
    caught (either outcome is valid there, so ``pytest.raises`` does not fit)."""
    if not condition:
        raise AssertionError(f"unexpected {type(error).__name__}: {error}") from error
