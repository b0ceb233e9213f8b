"""Step paths: the seed's spelling, branch-key escaping, strict parsing, round trips."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.lwir import (
    MAX_BRANCH_KEY_LENGTH,
    BranchSegment,
    InvalidStepPathError,
    StepPath,
    StepSegment,
    branch_key,
    format_step_path,
    parse_step_path,
)


def test_the_seed_examples() -> None:
    worker = StepPath.root("review-candidates").branch("cand_123").child("worker")
    assert str(worker) == "review-candidates[cand_123].worker"
    visit = StepPath.root("review-candidates").branch("cand_123").child("worker", visit=1)
    assert str(visit) == "review-candidates[cand_123].worker.visit[1]"
    assert parse_step_path("review-candidates[cand_123].worker.visit[0]") == StepPath(
        (StepSegment("review-candidates"), BranchSegment("cand_123"), StepSegment("worker", 0))
    )
    assert str(StepPath.root("judge", visit=2)) == "judge.visit[2]"


def test_navigation() -> None:
    path = parse_step_path("outer[a].inner.visit[1][b].leaf.visit[3]")
    assert path.step_id == "leaf"
    assert path.visit == 3
    assert str(path.without_visit()) == "outer[a].inner.visit[1][b].leaf"
    assert str(path.parent) == "outer[a].inner.visit[1][b]"
    branch = path.parent
    assert branch is not None
    assert branch.is_branch
    assert branch.step_id == "inner"
    assert branch.visit is None
    assert StepPath.root("a").parent is None
    assert StepPath.root("a").without_visit() == StepPath.root("a")


@pytest.mark.parametrize(
    ("key", "written"),
    [
        ("cand_123", "m[cand_123]"),
        ("0", "m[0]"),
        ("-x_", "m[-x_]"),
        ("a.b", 'm["a.b"]'),
        ("a]b", 'm["a]b"]'),
        ("[", 'm["["]'),
        ('say "hi"', 'm["say \\"hi\\""]'),
        ("", 'm[""]'),
        ("é", 'm["é"]'),
        ("a\nb", 'm["a\\nb"]'),
        ("back\\slash", 'm["back\\\\slash"]'),
    ],
)
def test_branch_key_escaping(key: str, written: str) -> None:
    path = StepPath.root("m").branch(key)
    assert format_step_path(path) == written
    assert parse_step_path(written) == path
    assert str(path.child("w")) == written + ".w"


@pytest.mark.parametrize(
    "text",
    [
        "",
        ".a",
        "a.",
        "a.b",  # a child needs its map's branch
        "a[x]b",
        "a[x].",
        "a[x][y]",
        "a.visit[01]",
        "a.visit[-1]",
        "a.visit[]",
        "a.visit[1",
        "a.visit",
        "a[x",
        'a["x"]',  # must be written bare
        'a["\\u0061.b"]',  # not the canonical JSON spelling
        'a["x',
        "a[]",
        "a[x y]",
        "a.b[x]",
        "-a",
        "a[x].-b",
        "a[" + "k" * (MAX_BRANCH_KEY_LENGTH + 1) + "]",
    ],
)
def test_malformed_paths_are_refused(text: str) -> None:
    with pytest.raises(InvalidStepPathError) as caught:
        parse_step_path(text)
    assert caught.value.code == "invalid_step_path"


def test_builders_refuse_bad_parts() -> None:
    with pytest.raises(InvalidStepPathError):
        StepPath.root("a.b")
    with pytest.raises(InvalidStepPathError):
        StepPath.root("a", visit=-1)
    with pytest.raises(InvalidStepPathError):
        StepPath.root("a").child("b")
    with pytest.raises(InvalidStepPathError):
        StepPath.root("a").branch("x").branch("y")
    with pytest.raises(InvalidStepPathError):
        StepPath.root("a").branch("\ud800")
    with pytest.raises(InvalidStepPathError):
        StepPath((BranchSegment("x"),))
    with pytest.raises(InvalidStepPathError):
        StepPath(())


def test_branch_key_from_items() -> None:
    assert branch_key({"id": "cand_123"}, key="id", index=0) == "cand_123"
    assert branch_key({"id": 42}, key="id", index=0) == "42"
    assert branch_key("anything", key=None, index=7) == "7"
    for item in [{"id": True}, {"id": None}, {"id": 1.5}, {"id": ["x"]}, {"other": 1}, "text"]:
        with pytest.raises(InvalidStepPathError) as caught:
            branch_key(item, key="id", index=3)
        assert caught.value.code == "invalid_branch_key"
        assert "map item [3]" in caught.value.message


# --- properties ----------------------------------------------------------------------

step_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_-]{0,12}", fullmatch=True)
visits = st.none() | st.integers(min_value=0, max_value=10**6)
keys = st.text(max_size=20) | st.from_regex(r"[A-Za-z0-9_-]{1,10}", fullmatch=True)


@st.composite
def step_paths(draw: st.DrawFn) -> StepPath:
    path = StepPath.root(draw(step_ids), visit=draw(visits))
    for _ in range(draw(st.integers(0, 3))):
        path = path.branch(draw(keys))
        path = path.child(draw(step_ids), visit=draw(visits))
    if draw(st.booleans()):
        path = path.branch(draw(keys))
    return path


@given(step_paths())
def test_format_then_parse_is_identity(path: StepPath) -> None:
    assert parse_step_path(format_step_path(path)) == path


@given(st.text(alphabet=st.sampled_from('ab0_-.[]"\\visit'), max_size=30))
def test_parse_accepts_only_canonical_text(text: str) -> None:
    try:
        path = parse_step_path(text)
    except InvalidStepPathError:
        return
    assert format_step_path(path) == text


@given(st.text())
def test_parse_raises_only_its_own_error(text: str) -> None:
    with contextlib.suppress(InvalidStepPathError):
        parse_step_path(text)
