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
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import little_workflow
from little_workflow.cli._main import COMMANDS

REPO = Path(__file__).resolve().parents[1]

#: Third-party packages only some commands or backends need.
HEAVY = (
    "anthropic",
    "click",
    "httpx",
    "httpx2",
    "openai",
    "psycopg",
    "rich",
    "starlette",
    "uvicorn",
    "websockets",
    "yaml",
)

#: Packages whose ``__init__`` re-exports lazily (``little_workflow._lazy``).
LAZY_PACKAGES = (
    "little_workflow",
    "little_workflow.durable",
    "little_workflow.harness",
    "little_workflow.harness.models",
    "little_workflow.platform",
    "little_workflow.platform.ipc",
    "little_workflow.runtime",
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
        "croniter",  # 0.1 s: imported only where schedules are read or checked
    ):
        assert module not in modules, module


def _imported_by_cli(*args: str, env: dict[str, str] | None = None) -> list[str]:
    # What `python -m little_workflow ARGS` imports: `runpy.run_module` is what `-m` does
    # (`-X importtime` would not do: it misses `importlib.import_module`, which is how the
    # lazy group imports a command). The list goes to stderr, after the command's output.
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['little-workflow', *{list(args)!r}]\n"
        "try:\n"
        "    runpy.run_module('little_workflow', run_name='__main__', alter_sys=True)\n"
        "except SystemExit as exc:\n"
        "    assert exc.code in (0, None), exc.code\n"
        "sys.stderr.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    modules: list[str] = json.loads(done.stderr.splitlines()[-1])
    return modules


#: What listing the commands or one command's options needs none of.
_NOT_FOR_HELP = ("pydantic", "pydantic_core", "asyncio", "rich", "httpx", "psycopg", "yaml")


def test_cli_help_imports_no_runtime_and_no_pydantic() -> None:
    modules = _imported_by_cli("--help")
    assert "little_workflow.cli._main" in modules  # the measurement saw the CLI
    assert _top_level(modules, _NOT_FOR_HELP) == []
    # No command module: the listing is printed from the names and one-line helps.
    assert [m for m in modules if m.startswith("little_workflow.")] == [
        "little_workflow._environment",
        "little_workflow._lazy",
        "little_workflow.cli",
        "little_workflow.cli._group",
        "little_workflow.cli._main",
    ]


_KILLING_STEP = """\
import os, signal

async def step(index: int) -> dict[str, int]:
    if index == int(os.environ.get("KILL_AT", "-1")):
        os.kill(os.getpid(), signal.SIGKILL)
    return {"index": index}
"""

#: What a resume of a run of ``execute`` steps does not touch, made lazy for issue 23
#: (``bench/cli_resume.py``): the code-first API, the services the facade only
#: delegates to, the harness's slots and model types, the checkpoint and ledger models,
#: the agents' artifact and memory tools, the views and the UI.
_NOT_FOR_A_RESUME = (
    "little_workflow.artifacts._tools",
    "little_workflow.durable._checkpoints",
    "little_workflow.durable._ledger",
    "little_workflow.harness._slots",
    "little_workflow.harness.models",
    "little_workflow.memory._tools",
    "little_workflow.runtime._ask_user",
    "little_workflow.runtime._code_api",
    "little_workflow.runtime._code_program",
    "little_workflow.runtime._code_run",
    "little_workflow.runtime._input_check",
    "little_workflow.runtime._liveness",
    "little_workflow.runtime._model_limits",
    "little_workflow.runtime._outer",
    "little_workflow.runtime._queues",
    "little_workflow.runtime._schedules",
    "little_workflow.runtime._stuck",
    "little_workflow.runtime._worker",
    "little_workflow.ui",
    "little_workflow.views",
)


def test_a_cli_resume_of_a_killed_run_imports_only_what_it_runs(tmp_path: Path) -> None:
    (tmp_path / "killing_steps.py").write_text(_KILLING_STEP)
    steps: list[dict[str, object]] = [
        {"id": f"s{i}", "kind": "execute", "fn": "killing_steps:step", "with": {"index": i}}
        for i in range(6)
    ]
    steps.append({"id": "out", "kind": "output", "value": "${steps.s5.output}"})
    workflow = tmp_path / "chain.json"
    workflow.write_text(json.dumps({"lwir": 1, "name": "chain", "steps": steps}))
    data = str(tmp_path / "data")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    run = ["run", str(workflow), "--run-id", "killed"]
    killed = subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", data, *run],
        env={**env, "KILL_AT": "3"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    modules = _imported_by_cli("--data-dir", data, "resume", "killed", env=env)
    # The measurement saw a real resume: the runtime, the SQLite store, the step module.
    for module in ("little_workflow.runtime._runtime", "little_workflow.storage._sqlite"):
        assert module in modules, module
    assert "killing_steps" in modules
    assert _top_level(modules, tuple(name for name in HEAVY if name != "click")) == []
    assert "croniter" not in modules
    for module in modules:
        assert not module.startswith(_NOT_FOR_A_RESUME), module


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_help_imports_only_its_own_module(command: str) -> None:
    modules = _imported_by_cli(command, "--help")
    assert COMMANDS[command].module in modules
    assert _top_level(modules, _NOT_FOR_HELP) == []
    for module in modules:
        assert not module.startswith(
            ("little_workflow.runtime", "little_workflow.events", "little_workflow.views")
        ), module


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
