"""``show``'s step tree as lines of text, drawn here rather than by ``rich.tree``.

The same guides as ``rich.tree.Tree`` (``├── ``, ``└── ``, ``│   ``), but each line is one
string with its styles as escape codes: rich renders a tree node in some 100 µs, so a run
of 50,000 steps took over 5 s to print. Here the tree is written a line at a time, and a
line is not held after it was written.

A long run's tree is summarized (``collapsed``): under each node, the first ``keep``
children are drawn, and so is every child with a step below it that did not complete
(a failure, a step still running: what a person looks for); the other completed
children are one line, ``… N more``. A map of 50,000 branches is then some fifty lines,
not 100,000 that no terminal scrolls back through. ``show --all`` draws every node, and
``show --json`` has every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from little_workflow.views import StepRow, TreeNode

__all__ = ["SHOWN_CHILDREN", "collapsed", "print_tree", "tree_lines"]

#: Children drawn under each node before the completed rest become one ``… N more`` line.
SHOWN_CHILDREN = 50

_COLOURS = {"completed": "green", "failed": "red", "running": "yellow"}
#: Control characters a terminal would act on, as rich leaves them out of printed text.
_CONTROLS = dict.fromkeys((*range(9), *range(11, 32), 127))

Styler = Callable[[str, str], str]


def _plain(text: str, _style: str) -> str:
    return text


def _styler(console: Console) -> Styler:
    """Text in a rich style name, as escape codes for this console (none for a pipe)."""
    from rich.console import COLOR_SYSTEMS
    from rich.style import Style

    system = console.color_system
    if system is None or console.no_color:
        return _plain
    colour_system = COLOR_SYSTEMS[system]
    styles: dict[str, Style] = {}

    def styled(text: str, style: str) -> str:
        found = styles.get(style)
        if found is None:
            found = styles[style] = Style.parse(style)
        return found.render(text, color_system=colour_system)

    return styled


def _clean(text: str) -> str:
    return text.translate(_CONTROLS)


def _label(node: TreeNode, style: Styler) -> list[str]:
    """A node's label: its line, and a failed step's error on the next one."""
    label = _clean(node.label)
    row: StepRow | None = node.step
    if row is None:
        return [label]
    took = (
        f"{(row.ended_at - row.started_at) * 1000:.0f} ms"
        if row.ended_at is not None and row.started_at is not None
        else "..."
    )
    route = f" -> {row.route}" if row.route else ""
    if row.sub_run_id:
        route += f"  sub-run {row.sub_run_id}"
    status = style(row.status, _COLOURS.get(row.status, "white"))
    lines = [
        f"{label}  {style(row.kind, 'dim')}  {status}{_clean(route)}  attempts {row.attempts}  "
        f"{took}"
    ]
    if row.status == "failed" and row.error:
        # The cause and message as the log records them (whole: `show --json` has them too).
        first, *rest = row.error.splitlines() or [""]
        lines += [f"{style('error:', 'red')} {_clean(first)}", *map(_clean, rest)]
    return lines


def _ends(nodes: Sequence[TreeNode]) -> list[int]:
    """For each node, the index just past its subtree (``nodes`` depth first)."""
    ends = [len(nodes)] * len(nodes)
    open_: list[int] = []
    for index, node in enumerate(nodes):
        while open_ and nodes[open_[-1]].depth >= node.depth:
            ends[open_.pop()] = index
        open_.append(index)
    return ends


def collapsed(nodes: Sequence[TreeNode], keep: int = SHOWN_CHILDREN) -> list[TreeNode]:
    """``nodes`` with, under each node, the completed children past the first ``keep``
    replaced by one ``… N more`` node (module docstring); depth first, as given."""
    from little_workflow.views import TreeNode

    ends = _ends(nodes)
    # Running counts, so that a subtree's unfinished steps and steps are two subtractions.
    unfinished, steps = [0], [0]
    for node in nodes:
        row = node.step
        unfinished.append(unfinished[-1] + (row is not None and row.status != "completed"))
        steps.append(steps[-1] + (row is not None))
    shown: list[TreeNode] = []
    # Per open level: [depth of its children, children shown, hidden, steps hidden].
    levels = [[0, 0, 0, 0]]

    def close(level: list[int]) -> None:
        depth, _, hidden, hidden_steps = level
        if hidden:
            label = (
                f"… {hidden:,} more ({hidden_steps:,} step{'s' if hidden_steps != 1 else ''}), "
                "all completed: show --all lists every step"
            )
            shown.append(TreeNode(path="", label=label, depth=depth, step=None))

    index = 0
    while index < len(nodes):
        node = nodes[index]
        while levels[-1][0] > node.depth:
            close(levels.pop())
        level, end = levels[-1], ends[index]
        if level[1] >= keep and unfinished[end] == unfinished[index]:
            level[2] += 1
            level[3] += steps[end] - steps[index]
            index = end
            continue
        level[1] += 1
        shown.append(node)
        levels.append([node.depth + 1, 0, 0, 0])
        index += 1
    while levels:
        close(levels.pop())
    return shown


def tree_lines(title: str, nodes: Sequence[TreeNode], style: Styler = _plain) -> Iterator[str]:
    """The tree under ``title``, a line at a time (``nodes`` depth first, as ``step_tree``)."""
    yield title
    # Whether each node is the last of its siblings: known from the nodes after it.
    last = [False] * len(nodes)
    later: list[bool] = []
    for index in range(len(nodes) - 1, -1, -1):
        depth = nodes[index].depth
        del later[depth + 1 :]
        later += [False] * (depth + 1 - len(later))
        last[index] = not later[depth]
        later[depth] = True
    guides: list[str] = []  # per ancestor depth: what its later lines begin with
    for node, is_last in zip(nodes, last, strict=True):
        del guides[node.depth :]
        head = "".join(guides)
        first, *more = _label(node, style)
        yield f"{head}{'└── ' if is_last else '├── '}{first}"
        below = "    " if is_last else "│   "
        for line in more:
            yield f"{head}{below}{line}"
        guides.append(below)


def print_tree(console: Console, title: tuple[str, str, str], nodes: Sequence[TreeNode]) -> None:
    """Write ``tree_lines`` to ``console``'s file, styled as the console can show;
    ``title``: the run id (in bold), its workflow and its status."""
    out = console.file
    style = _styler(console)
    run_id, workflow, status = (_clean(part) for part in title)
    for line in tree_lines(f"{style(run_id, 'bold')}  {workflow}  {status}", nodes, style):
        out.write(line)
        out.write("\n")
    out.flush()
