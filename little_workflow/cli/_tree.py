"""``show``'s step tree as lines of text, drawn here rather than by ``rich.tree``.

The same guides as ``rich.tree.Tree`` (``├── ``, ``└── ``, ``│   ``), but each line is one
string with its styles as escape codes: rich renders a tree node in some 100 µs, so a run
of 50,000 steps took over 5 s to print. Here the tree is written a line at a time, and a
line is not held after it was written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

    from little_workflow.views import StepRow, TreeNode

__all__ = ["print_tree", "tree_lines"]

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
