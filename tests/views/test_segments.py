"""``segments``' fast path splits every path as the character walk does."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from little_workflow.views import segments
from little_workflow.views._read import _walked


def _merged(path: str) -> list[str]:
    merged: list[str] = []
    for part in _walked(path):
        if merged and merged[-1] == ".visit" and part.startswith("["):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


@settings(max_examples=3000)
@given(
    st.text(alphabet="ab.[]", max_size=14) | st.sampled_from(["a.visit[1].b", "m[x.y].visit[0]"])
)
def test_the_same_parts_as_the_walk(path: str) -> None:
    assert segments(path) == _merged(path)


def test_a_map_branch_and_a_visit() -> None:
    assert segments("m[a.b].s") == ["m", "[a.b]", ".s"]
    assert segments("j.visit[2].w") == ["j", ".visit[2]", ".w"]
    assert segments("a[b[c]].d") == ["a", "[b[c]]", ".d"]
