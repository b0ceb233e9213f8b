"""docs/tutorial.md, run as a reader would: its files as shown, then every command, in order.

The files are the page's code blocks whose first line names them (``# flows.py``); the
commands are its ``sh`` blocks, read with the README test's parser (a trailing ``# exits
N`` or ``# serves until Ctrl-C`` means what it means there). The last command points the
workflow at a real provider with ``OPENAI_API_KEY``: here a local server speaking the
OpenAI wire format (``OPENAI_BASE_URL``), answering from the tutorial's own script, so
the command runs exactly as printed and no test reaches the internet.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import fake_model_server
from tests.test_readme import _SERVES, REPO, SERVER, clean_env, commands, serve_once

TUTORIAL = REPO / "docs" / "tutorial.md"
_FILE_BLOCK = re.compile(r"```(?:python|yaml)\n# ([\w.-]+\.(?:py|yaml))\n(.*?)```", re.DOTALL)
_RUN_ID = re.compile(r"--run-id (\S+)|resume (\S+)")


def files(text: str) -> dict[str, str]:
    """File name -> contents, for each code block whose first line names its file."""
    return {name: f"# {name}\n{body}" for name, body in _FILE_BLOCK.findall(text)}


def test_the_tutorial_parses() -> None:
    text = TUTORIAL.read_text(encoding="utf-8")
    assert set(files(text)) == {"flows.py", "brief.yaml"}
    found = commands(text)
    assert len(found) >= 10
    assert [expected for _, expected in found].count(SERVER) == 1
    assert any("kill -9" in command for command, _ in found)
    assert any(" resume " in command for command, _ in found)
    assert any(command.startswith("OPENAI_API_KEY=") for command, _ in found)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_tutorial_command(tmp_path: Path) -> None:
    text = TUTORIAL.read_text(encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    for name, contents in files(text).items():
        (work / name).write_text(contents, encoding="utf-8")
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = clean_env()
    env.pop("OPENAI_API_KEY", None)
    outputs: dict[str, str] = {}
    calls_file = work / "openai-calls.txt"
    with fake_model_server("flows:answer", count_file=calls_file, cwd=work, env=env) as url:
        env["OPENAI_BASE_URL"] = f"{url}/v1"
        for command, expected in commands(text):
            if expected == SERVER:
                serve_once(command.removesuffix(_SERVES).strip(), work, env)
                continue
            done = subprocess.run(
                ["bash", "-c", command],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert done.returncode == expected, (
                f"{shlex.quote(command)} exited {done.returncode}, not {expected}:\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
            run_id = _RUN_ID.search(command)
            if run_id and "kill -9" not in command and " show " not in command:
                outputs[run_id.group(1) or run_id.group(2)] = done.stdout
    # The resumed run, the LWIR form and the real provider all give the first run's output.
    first = json.loads(outputs["run_first"])
    assert first["report"].startswith("- sqlite: one file")
    for run_id in ("run_killed", "run_lwir", "run_real"):
        assert json.loads(outputs[run_id]) == first, run_id
    # The last run's model calls went to the OpenAI-compatible server: 3 sessions, 2 calls each.
    calls = calls_file.read_text(encoding="utf-8").splitlines()
    assert len(calls) == 6
