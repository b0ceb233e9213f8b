"""A streamed, structured, multimodal agent step killed mid-stream by SIGKILL, resumed.

The CLI runs ``stream_flows.describe`` with ``--progress``, so its model calls stream;
the fake model server, another process, paces the stream's events. When the display
has printed a few lines of the second answer (the caption, streaming), the CLI is
killed with SIGKILL. ``resume`` must then give the output of an uncrashed run, and the
server's count file (written as each request arrives, outside the dying process) must
show that only the call cut off was made again: the committed first answer and its
tool call are replayed, not paid for twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.processes import fake_model_server, finish

REPO = Path(__file__).resolve().parents[2]
CAPTION_CALL = "agent.turns[1].model"  # shown as "  │ <path>: <line>"


@pytest.fixture
def model_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The fake model server, pacing its streams; (its URL, its request-count file)."""
    counts = tmp_path / "model-requests"
    script = "tests.harness.stream_flows:script"
    with fake_model_server(script, count_file=counts, options=("--event-delay", "0.03")) as url:
        yield url, counts


def _command(data: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "little_workflow", "--data-dir", str(data),
            "--setup", "tests.harness.stream_flows:setup", *args]  # fmt: skip


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.timeout(180)
def test_a_kill_mid_stream_resumes_to_the_uncrashed_output(
    tmp_path: Path, model_server: tuple[str, Path]
) -> None:
    url, counts = model_server
    tools = tmp_path / "tool-calls"
    env = {**os.environ, "LW_TEST_MODEL_URL": url, "LW_TEST_TOOL_CALLS": str(tools)}
    run = ["run", "tests.harness.stream_flows:describe", "--input", '{"title": "bands"}']

    reference = subprocess.run(_command(tmp_path / "ref", *run, "--run-id", "run_ref"),
                               cwd=REPO, env=env, capture_output=True, text=True,
                               timeout=120, check=False)  # fmt: skip
    assert reference.returncode == 0, reference.stderr
    expected = json.loads(reference.stdout)
    assert len(expected["details"]) == 40
    assert _lines(counts) == 2  # a tool call, then the caption
    assert _lines(tools) == 1

    child = subprocess.Popen(
        _command(tmp_path / "data", *run, "--run-id", "run_k", "--progress"),
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert child.stderr is not None
    seen: list[str] = []
    for line in child.stderr:
        seen.append(line)
        if sum(f"│ {CAPTION_CALL}: " in item for item in seen) >= 3:
            break
    else:
        finish(child, 30)
        pytest.fail("the caption never streamed:\n" + "".join(seen))
    os.kill(child.pid, signal.SIGKILL)
    finish(child, 30)
    assert child.returncode == -signal.SIGKILL
    # Killed in the middle: the caption had started streaming and was not committed.
    assert not any(line.startswith("■ ") for line in seen), seen
    assert _lines(counts) == 4

    resumed = subprocess.run(_command(tmp_path / "data", "resume", "run_k"), cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120,
                             check=False)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == expected
    # Only the call cut off was made again: 2 for the reference, 2 before the kill
    # (the first answer committed, the caption cut), 1 after it.
    assert _lines(counts) == 5
    assert _lines(tools) == 2  # the tool ran once per run: replayed on resume
