"""Install what is used: the core alone runs the demo; a feature of an extra names it.

* The extras table in ``little_workflow/_extras.py`` agrees with ``pyproject.toml``.
* With an extra's packages made unimportable (``sys.modules[name] = None``, which is what
  an absent package looks like to ``import``), the commands that need them exit 3 with
  one line naming the extra to install.
* ``test_the_core_alone_in_a_fresh_venv``: ``pip install <a copy of the project>`` with no
  extras into a new virtual environment, none of the extras importable there, the demo
  runs, and ``ui`` and a ``postgresql://`` store say which extra to install.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from little_workflow._extras import EXTRAS
from tests.test_readme import REPO, clean_env, tracked_copy

#: Distribution name (as pyproject spells it) -> import name.
_IMPORT_NAME = {
    "anthropic": "anthropic",
    "openai": "openai",
    "psycopg": "psycopg",
    "psycopg-pool": "psycopg_pool",
    "starlette": "starlette",
    "uvicorn": "uvicorn",
    "websockets": "websockets",
    "opentelemetry-api": "opentelemetry",
    "opentelemetry-sdk": "opentelemetry",
}
_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _distribution(requirement: str) -> str:
    for stop in "[<>=!~; ":
        requirement = requirement.split(stop, 1)[0]
    return requirement


def _pyproject() -> dict[str, object]:
    with (REPO / "pyproject.toml").open("rb") as handle:
        project: dict[str, object] = tomllib.load(handle)["project"]
    return project


def test_the_extras_table_matches_pyproject() -> None:
    project = _pyproject()
    optional = project["optional-dependencies"]
    assert isinstance(optional, dict)
    core = {_distribution(r) for r in project["dependencies"]}  # type: ignore[attr-defined]
    every: set[str] = set()
    for extra, modules in EXTRAS.items():
        declared = {_IMPORT_NAME[_distribution(r)] for r in optional[extra]}
        assert declared == set(modules), extra
        every |= declared
    assert {_IMPORT_NAME[_distribution(r)] for r in optional["all"]} == every
    # The tests need every extra; no extra's package sneaks back into the core.
    dev = {_distribution(r) for r in optional["dev"]}
    assert {_IMPORT_NAME[d] for d in dev if d in _IMPORT_NAME} == every
    assert not core & set(_IMPORT_NAME)
    # psycopg's advice to libraries: depend on psycopg, let the application pick libpq.
    assert all("binary" not in r for r in optional["postgres"])


def _cli_without(
    blocked: tuple[str, ...], *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    code = (
        "import runpy, sys\n"
        f"for name in {list(blocked)!r}:\n"
        "    sys.modules[name] = None\n"
        f"sys.argv = ['little-workflow', *{list(args)!r}]\n"
        "runpy.run_module('little_workflow', run_name='__main__')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**clean_env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str], extra: str) -> str:
    assert done.returncode == 3, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "missing_extra" in lines[0]
    assert f"pip install 'little-workflow[{extra}]'" in lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("blocked", "args", "extra"),
    [
        (("starlette",), ("ui", "--port", "0"), "ui"),
        (("uvicorn",), ("ui", "--port", "0"), "ui"),
        (("psycopg",), ("--store", _POSTGRES_URL, "runs"), "postgres"),
        (("psycopg_pool",), ("--store", _POSTGRES_URL, "runs"), "postgres"),
        (("psycopg",), ("--store", _POSTGRES_URL, "db", "status"), "postgres"),
    ],
)
def test_a_command_without_its_extra_names_it(
    tmp_path: Path, blocked: tuple[str, ...], args: tuple[str, ...], extra: str
) -> None:
    _one_line(_cli_without(blocked, *args, cwd=tmp_path), extra)


def test_a_psycopg_without_libpq_names_the_binary_build(tmp_path: Path) -> None:
    # The same failure as a psycopg with no libpq on the machine: no implementation loads.
    done = _cli_without(
        (), "--store", _POSTGRES_URL, "runs", cwd=tmp_path, env={"PSYCOPG_IMPL": "c"}
    )
    assert done.returncode == 3, done.stdout + done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "missing_extra" in line
    assert "pip install 'psycopg[binary]'" in line


def test_a_ws_address_without_websockets_names_the_extra() -> None:
    code = (
        "import asyncio, sys\n"
        "sys.modules['websockets'] = None\n"
        "from little_workflow.errors import MissingExtraError\n"
        "from little_workflow.platform.ipc._address import IpcAddress\n"
        "from little_workflow.platform.ipc._transport import dial\n"
        "try:\n"
        "    asyncio.run(dial(IpcAddress.parse('ws://127.0.0.1:9')))\n"
        "except MissingExtraError as exc:\n"
        "    print(exc.code, exc.extra, exc.message)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.startswith("missing_extra ws "), done.stdout + done.stderr
    assert "pip install 'little-workflow[ws]'" in done.stdout


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_core_alone_in_a_fresh_venv(tmp_path: Path) -> None:
    project = tmp_path / "little-workflow"
    tracked_copy(project)
    venv = tmp_path / "venv"
    env = clean_env()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    installed = subprocess.run(
        [str(_venv_python(venv)), "-m", "pip", "install", "-q", str(project)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    # None of the extras' modules is there.
    modules = sorted({m for names in EXTRAS.values() for m in names})
    probe = subprocess.run(
        [
            str(_venv_python(venv)),
            "-c",
            "import importlib.util, sys\n"
            f"print([m for m in {modules!r} if importlib.util.find_spec(m)])",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert probe.stdout.strip() == "[]", probe.stdout

    command = str(venv / "bin" / "little-workflow")
    work = tmp_path / "work"
    work.mkdir()
    demo = subprocess.run(
        [command, "demo"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "the output equals an uncrashed run's" in demo.stdout

    for args, extra in (
        (("ui", "--port", "0"), "ui"),
        (("--store", _POSTGRES_URL, "runs"), "postgres"),
    ):
        done = subprocess.run(
            [command, *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        _one_line(done, extra)
