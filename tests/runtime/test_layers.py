"""The shape of ``runtime/``: no import circle, no file past ~600 lines.

Read from the source with ``ast``, so an import under ``TYPE_CHECKING`` or inside a
function counts as much as one at the top: each is an edge the layering must respect
(docs/runtime.md, "How the parts fit").
"""

from __future__ import annotations

import ast
from pathlib import Path

import little_workflow.runtime

RUNTIME = Path(little_workflow.runtime.__file__).parent
PACKAGE = "little_workflow.runtime"
MAX_LINES = 600


def _imports(path: Path) -> set[str]:
    """The ``runtime`` modules ``path`` imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(f"{PACKAGE}._"):
                module = name.split(".")[2]
                if (RUNTIME / f"{module}.py").exists():
                    found.add(module)
    found.discard(path.stem)
    return found


def _graph() -> dict[str, set[str]]:
    return {
        path.stem: _imports(path)
        for path in sorted(RUNTIME.glob("*.py"))
        if path.stem != "__init__"
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` (its modules in order), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                found = visit(target)
                if found is not None:
                    return found
        stack.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module)
            if found is not None:
                return found
    return None


def test_the_runtime_modules_import_one_another_without_a_circle() -> None:
    graph = _graph()
    # The parser sees what it must: the facade reaches the core through the LWIR program.
    assert "_lwir_program" in graph["_runtime"]
    assert "_core" in graph["_lwir_walk"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_circle_check_finds_a_circle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_an_import_inside_a_function_or_type_checking_block_counts(tmp_path: Path) -> None:
    module = tmp_path / "_probe.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from little_workflow.runtime._core import DurableRun\n"
        "def f() -> None:\n"
        "    from little_workflow.runtime import _state\n"
        "    import little_workflow.runtime._host\n"
    )
    assert _imports(module) == {"_core", "_state", "_host"}


def test_no_runtime_module_is_longer_than_600_lines() -> None:
    lengths = {
        path.name: len(path.read_text().splitlines()) for path in sorted(RUNTIME.glob("*.py"))
    }
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
