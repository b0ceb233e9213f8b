"""The README's commands, run as a new user would run them.

* "Try it": the demo's one-line setup, verbatim, in a fresh copy of the project (its own
  virtual environment, ``pip install -e .``, ``little-workflow demo``). The test command
  next to it is what CI itself runs.
* "Quick start": every shell command of that section, in order, in an empty directory
  holding a copy of ``examples/``, with this environment's ``little-workflow`` on PATH.
  A command expected to fail says so with a trailing ``# exits N``; a server, with
  ``# serves until Ctrl-C``: it is started, its printed address fetched, then interrupted.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_BLOCK = re.compile(r"```sh\n(.*?)```", re.DOTALL)
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")
_SERVES = "# serves until Ctrl-C"
#: The expected exit code of a server (it is interrupted).
SERVER = -1


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def commands(text: str) -> list[tuple[str, int]]:
    """``(command, expected exit code)`` for each command of each ``sh`` block, in order."""
    found: list[tuple[str, int]] = []
    for block in _BLOCK.findall(text):
        pending = ""
        for raw in block.splitlines():
            line = raw.rstrip()
            if pending:
                line = pending + " " + line.lstrip()
                pending = ""
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            expected = _EXITS.search(line)
            if line.endswith(_SERVES):
                found.append((line, SERVER))
            else:
                found.append((line, int(expected.group(1)) if expected else 0))
    return found


def tracked_copy(destination: Path) -> None:
    """Copy the project's files (tracked or not ignored), as a fresh clone would have."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def clean_env(path_first: Path | None = None) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("LITTLE_WORKFLOW_", "PYTEST_", "VIRTUAL_ENV"))
    }
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_readme_parses_into_commands() -> None:
    quick = commands(section("Quick start"))
    assert len(quick) >= 10
    assert all(command.startswith(".venv/bin/little-workflow ") for command, _ in quick)
    assert [expected for _, expected in quick].count(SERVER) == 1
    [(demo_line, _)] = commands(section("Try it"))[:1]
    assert demo_line.endswith("little-workflow demo")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_try_it_in_a_fresh_copy(tmp_path: Path) -> None:
    project = tmp_path / "little-workflow"
    tracked_copy(project)
    [(setup_and_demo, _), (tests_line, _)] = commands(section("Try it"))
    assert tests_line.endswith("pytest")  # CI runs that one itself
    done = subprocess.run(
        ["bash", "-c", setup_and_demo],
        cwd=project,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "the output equals an uncrashed run's" in done.stdout
    assert (project / ".little-workflow").is_dir()


def serve_once(command: str, cwd: Path, env: dict[str, str]) -> None:
    """Start a server command, fetch the address it prints, interrupt it."""
    import httpx

    process = subprocess.Popen(
        ["bash", "-c", f"exec {command}"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = None
        for line in process.stdout:  # the server flushes its address as it starts
            found = re.search(r"http://\S+", line)
            if found:
                url = found.group()
                break
        assert url is not None, f"{command} printed no address: {process.stderr.read()}"
        page = httpx.get(url, timeout=10)
        assert page.status_code == 200
        assert "little-workflow" in page.text
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_every_quick_start_command(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(REPO / "examples", work / "examples")
    # The commands say `.venv/bin/little-workflow`, as a user after the install has it.
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    env = clean_env()
    ran = 0
    for command, expected in commands(section("Quick start")):
        ran += 1
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
    assert ran >= 10
