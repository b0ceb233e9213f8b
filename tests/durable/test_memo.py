"""``MemoTable``: memoization by path, checked by identity, with a policy for mismatches."""

from __future__ import annotations

import pytest

from little_workflow.durable import MemoEntry, MemoMismatchError, MemoTable


def table(policy: str) -> MemoTable:
    memo = MemoTable(scope="run 'run_1'", on_mismatch=policy)  # type: ignore[arg-type]
    for path in ("a", "a.b", "a[k].c", "a[k].c.visit[0]", "ab", "b", "a-b"):
        memo.record(path, f"id:{path}", {"at": path})
    return memo


def test_a_lookup_with_the_recorded_identity_returns_the_entry() -> None:
    memo = table("error")
    assert memo.lookup("a.b", "id:a.b") == MemoEntry(
        path="a.b", identity="id:a.b", value={"at": "a.b"}
    )
    assert memo.lookup("nowhere", "id:x") is None
    assert len(memo) == 7
    assert [entry.path for entry in memo] == [
        "a",
        "a.b",
        "a[k].c",
        "a[k].c.visit[0]",
        "ab",
        "b",
        "a-b",
    ]


def test_policy_error_raises_a_mismatch_and_keeps_every_entry() -> None:
    memo = table("error")
    with pytest.raises(MemoMismatchError) as caught:
        memo.lookup("a", "id:edited")
    error = caught.value
    assert error.code == "memo_identity_mismatch"
    assert (error.path, error.recorded, error.current) == ("a", "id:a", "id:edited")
    assert "run 'run_1'" in str(error)
    assert "'a'" in str(error)
    assert len(memo) == 7
    assert memo.peek("a") is not None


def test_policy_rerun_discards_the_subtree_of_the_edited_path() -> None:
    memo = table("rerun")
    assert memo.lookup("a", "id:edited") is None
    # a, a.b, a[k].c and beneath are under "a"; "ab" and "a-b" only share its first letter.
    assert sorted(entry.path for entry in memo) == ["a-b", "ab", "b"]
    assert memo.peek("ab") == MemoEntry(path="ab", identity="id:ab", value={"at": "ab"})


def test_discard_subtree_counts_what_it_dropped() -> None:
    memo = table("rerun")
    assert memo.discard_subtree("a[k]") == 2
    assert memo.discard_subtree("a[k]") == 0
    assert memo.discard_subtree("b") == 1
    assert sorted(entry.path for entry in memo) == ["a", "a-b", "a.b", "ab"]


def test_peek_ignores_identity() -> None:
    memo = table("error")
    entry = memo.peek("b")
    assert entry is not None
    assert entry.identity == "id:b"
    assert memo.peek("c") is None
