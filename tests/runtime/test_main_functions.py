"""A function defined in a script or notebook (``__main__``): register it, says the error.

Run as real scripts (a fresh interpreter whose ``__main__`` is the script), and through
the command line, where ``__main__`` is the CLI's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_readme import clean_env

WORKFLOW = """\
lwir: 1
name: adder
steps:
  - {id: add, kind: execute, fn: "__main__:add", with: {a: 1, b: 2}}
  - {id: done, kind: output, value: "${steps.add.output}"}
"""

SCRIPT = """\
import asyncio, sys
from little_workflow import Runtime
from little_workflow.errors import ConfigError


def add(a: int, b: int) -> int:
    return a + b


async def main() -> None:
    functions = {"__main__:add": add} if sys.argv[1] == "registered" else None
    async with Runtime(".little-workflow", functions=functions) as rt:
        try:
            result = await rt.run("adder.yaml", {}, run_id="run_" + sys.argv[1])
        except ConfigError as exc:
            print("ConfigError", exc.message)
        else:
            print("output", result.output)


asyncio.run(main())
"""


def _python(tmp_path: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


def test_a_script_function_registered_runs_and_unregistered_says_how(tmp_path: Path) -> None:
    (tmp_path / "adder.yaml").write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "script.py").write_text(SCRIPT, encoding="utf-8")
    assert _python(tmp_path, "script.py", "registered") == "output 3"
    refused = _python(tmp_path, "script.py", "unregistered")
    assert refused.startswith("ConfigError function '__main__:add' is defined in a script")
    assert "Runtime(functions={'__main__:add': add})" in refused


def test_the_cli_refuses_it_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "adder.yaml").write_text(WORKFLOW, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "little_workflow", "run", "adder.yaml", "--input", "{}"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "Runtime(functions={'__main__:add': add})" in line
