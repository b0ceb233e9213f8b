"""``show``'s tree, drawn a line at a time: the text rich's tree printed, at any size."""

from __future__ import annotations

import io

from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from little_workflow.cli._tree import collapsed, print_tree, tree_lines
from little_workflow.views import StepRow, TreeNode, step_tree


def _row(path: str, status: str = "completed", error: str | None = None) -> StepRow:
    return StepRow(
        path=path,
        step_id=path.rsplit(".", 1)[-1],
        kind="execute",
        visit=None,
        status=status,
        attempts=1,
        failures=0 if error is None else 1,
        started_at=1.0,
        ended_at=1.25,
        route=None,
        error=error,
        sub_run_id=None,
        output=None,
    )


ROWS = [
    _row("fetch"),
    _row("m[a].s"),
    _row("m[a].t"),
    _row("m[b.c].s", "failed", "boom: it broke"),
    _row("m[d].s", "running"),
    _row("judge.visit[0].w"),
    _row("judge.visit[1].w"),
    _row("last"),
]


def _rich(nodes: list[TreeNode]) -> list[str]:
    """What ``show`` printed through ``rich.tree.Tree`` before (on a pipe: no styles)."""
    tree = Tree("run_t  flow  completed")
    parents = [tree]
    for node in nodes:
        del parents[node.depth + 1 :]
        label = escape(node.label)
        row = node.step
        if row is not None:
            label += f"  {row.kind}  {row.status}  attempts {row.attempts}  250 ms"
            if row.status == "failed" and row.error:
                label += f"\nerror: {escape(row.error)}"
        parents.append(parents[node.depth].add(label))
    out = io.StringIO()
    Console(file=out, width=500, color_system=None).print(tree)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_the_lines_are_those_of_richs_tree() -> None:
    nodes = step_tree(ROWS)
    ours = [line.replace("...", "250 ms") for line in tree_lines("run_t  flow  completed", nodes)]
    assert ours == _rich(nodes)
    assert any("└── " in line for line in ours)
    assert any("│   " in line for line in ours)


def test_a_terminal_gets_colours_and_no_control_characters() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard")
    rows = [_row("s[\x1b]0;evil\x07]", "failed", "boom:\x1b[2J cleared")]
    print_tree(console, ("run_t", "flow", "failed"), step_tree(rows))
    text = out.getvalue()
    assert "\x1b[31mfailed\x1b[0m" in text  # red, as rich styles it
    assert "\x07" not in text
    assert "\x1b[2J" not in text
    assert "\x1b]0" not in text


def test_step_tree_puts_each_path_under_its_prefixes_in_the_order_they_began() -> None:
    # Branches interleave in the log (a map runs them at once): each stays one subtree.
    rows = [_row(p) for p in ("fetch", "m[a].s", "m[b].s", "m[a].t", "j.visit[0].w", "m[b].t")]
    shown = [(node.depth, node.label, node.step is not None) for node in step_tree(rows)]
    assert shown == [
        (0, "fetch", True),
        (0, "m", False),
        (1, "[a]", False),
        (2, "s", True),
        (2, "t", True),
        (1, "[b]", False),
        (2, "s", True),
        (2, "t", True),
        (0, "j", False),
        (1, "visit[0]", False),
        (2, "w", True),
    ]
    assert [node.path for node in step_tree(rows)][:4] == ["fetch", "m", "m[a]", "m[a].s"]


def _labels(nodes: list[TreeNode]) -> list[tuple[int, str]]:
    return [(node.depth, node.label) for node in nodes]


def test_a_long_tree_is_collapsed_under_each_node_but_never_a_step_that_did_not_complete() -> None:
    rows = [_row("fetch")]
    rows += [_row(f"m[{i}].s", "failed" if i == 7 else "completed", "boom: x") for i in range(10)]
    rows += [_row("m[10].s", "running"), _row("m[11].s"), _row("m[12].s"), _row("last")]
    shown = collapsed(step_tree(rows), keep=3)
    assert _labels(shown) == [
        (0, "fetch"),
        (0, "m"),
        *[(depth, label) for i in range(3) for depth, label in ((1, f"[{i}]"), (2, "s"))],
        (1, "[7]"),  # failed: shown wherever it is
        (2, "s"),
        (1, "[10]"),  # running: shown too
        (2, "s"),
        (1, "… 8 more (8 steps), all completed: show --all lists every step"),
        (0, "last"),
    ]
    lines = list(tree_lines("run_t  flow  failed", shown))
    assert lines[-2] == "│   └── … 8 more (8 steps), all completed: show --all lists every step"
    assert lines[-1].startswith("└── last  execute")
    # Under the limit, nothing changes.
    assert collapsed(step_tree(rows), keep=13) == step_tree(rows)
    assert collapsed(step_tree(ROWS)) == step_tree(ROWS)


def test_a_collapsed_tree_counts_the_steps_of_the_subtrees_it_hides() -> None:
    rows = [_row(f"m[{i}].{step}") for i in range(4) for step in ("s", "t")]
    rows += [_row(f"top{i}") for i in range(3)]
    shown = collapsed(step_tree(rows), keep=2)
    assert _labels(shown)[-3:] == [
        (1, "… 2 more (4 steps), all completed: show --all lists every step"),
        (0, "top0"),
        (0, "… 2 more (2 steps), all completed: show --all lists every step"),
    ]
