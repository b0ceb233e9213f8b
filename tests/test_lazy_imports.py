"""Importing the library stays lean: heavy dependencies load only where they are used.

Every process pays for its imports (a resume, each CLI command, a spawned child), so an
eager import of, say, ``websockets`` from a module every run needs is a regression even
though nothing breaks. These tests check which modules an import pulls in, never a
time. They run in a fresh interpreter: this one has imported everything already.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import little_workflow

#: Third-party packages only some commands or backends need.
HEAVY = ("click", "httpx", "psycopg", "rich", "starlette", "uvicorn", "websockets", "yaml")

#: Packages whose ``__init__`` re-exports lazily (``little_workflow._lazy``).
LAZY_PACKAGES = (
    "little_workflow",
    "little_workflow.harness",
    "little_workflow.harness.models",
    "little_workflow.platform",
    "little_workflow.platform.ipc",
    "little_workflow.storage",
    "little_workflow.testing",
)


def _imported_after(statement: str) -> list[str]:
    code = f"{statement}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules: list[str] = json.loads(done.stdout)
    return modules


def _top_level(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in names)


def test_import_little_workflow_imports_no_dependency() -> None:
    modules = _imported_after("import little_workflow")
    assert _top_level(modules, (*HEAVY, "pydantic", "pydantic_core", "asyncio")) == []
    assert [m for m in modules if m.startswith("little_workflow.")] == ["little_workflow._lazy"]


def test_the_runtime_imports_no_harness_transport_or_yaml() -> None:
    # What a resume of a run of ``execute`` steps imports.
    modules = _imported_after("import little_workflow.runtime, little_workflow.lwir")
    assert _top_level(modules, HEAVY) == []
    for module in (
        "little_workflow.harness._harness",
        "little_workflow.harness._tools",
        "little_workflow.harness.models._anthropic",
        "little_workflow.platform.ipc",
        "little_workflow.platform._local",
        "little_workflow.runtime._planner",
    ):
        assert module not in modules, module


def test_a_subprocess_target_does_not_import_pytest() -> None:
    modules = _imported_after("import little_workflow.testing.subprocess_targets")
    assert _top_level(modules, ("pytest", "_pytest", *HEAVY)) == []


def test_a_unix_socket_client_does_not_import_websockets() -> None:
    modules = _imported_after("import little_workflow.platform.ipc as ipc; ipc.dial, ipc.listen")
    assert "little_workflow.platform.ipc._transport" in modules
    assert _top_level(modules, ("websockets",)) == []


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_lazy_exports_match_the_type_checking_imports(package: str) -> None:
    # Type checkers read the ``if TYPE_CHECKING:`` imports, the interpreter ``_EXPORTS``:
    # the two must name the same things from the same modules.
    module = importlib.import_module(package)
    assert module.__file__ is not None
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    guarded = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    typed: dict[str, tuple[str, ...]] = {
        node.module: tuple(alias.name for alias in node.names)
        for node in guarded.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    assert typed == module._EXPORTS
    exported = {name for names in typed.values() for name in names}
    assert set(module.__all__) - {"__version__"} == exported


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_lazy_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, name
        assert name in dir(module)
    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        _ = module.nonexistent


def test_the_root_reexports_the_layers_objects() -> None:
    from little_workflow.runtime import Runtime
    from little_workflow.storage import open_event_log

    assert little_workflow.Runtime is Runtime
    assert little_workflow.open_event_log is open_event_log
