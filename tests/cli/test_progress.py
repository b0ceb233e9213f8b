"""The progress display of ``run`` and ``resume``, read against the log it follows."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from little_workflow.runtime import Runtime
from tests.runtime.support import cli

FLOWS = Path(__file__).resolve().parents[1] / "runtime" / "flows"
INPUT = json.dumps({"query": "staff engineers"})


async def completed_paths(data: Path, run_id: str) -> list[str]:
    async with Runtime(data) as rt:
        return [
            record.event.step_path  # type: ignore[attr-defined]
            for record in await rt.events.read(run_id)
            if record.type == "StepCompleted"
        ]


def shown_steps(stderr: str) -> list[str]:
    return [line.split()[1] for line in stderr.splitlines() if line.startswith("  ✓ ")]


async def test_run_shows_each_step_as_it_completes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    done = cli(data, "run", str(FLOWS / "review.yaml"), "--input", INPUT, "--run-id", "run_p1",
               "--progress")  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == "▶ run run_p1 (review)"
    assert shown_steps(done.stderr) == await completed_paths(data, "run_p1")
    assert any(line.startswith("  ↳ summarize  sub-run run_") for line in lines)
    assert lines[-2].startswith("■ completed in ")
    # The output on stdout is untouched by the display.
    assert json.loads(done.stdout)["verdict"]["verdict"] == "accept"


async def test_a_resume_shows_only_what_it_runs_anew(tmp_path: Path) -> None:
    data = tmp_path / "data"
    crashed = cli(data, "run", str(FLOWS / "review.yaml"), "--input", INPUT, "--run-id",
                  "run_p2", crash=8)  # fmt: skip
    assert crashed.returncode != 0
    before = await completed_paths(data, "run_p2")
    assert len(before) > 0

    resumed = cli(data, "resume", "run_p2", "--progress")
    assert resumed.returncode == 0, resumed.stderr
    after = await completed_paths(data, "run_p2")
    assert f"↻ run run_p2 resumed: {len(before)} step(s) in the log" in resumed.stderr
    assert shown_steps(resumed.stderr) == after[len(before) :]


def test_no_display_when_not_asked_and_not_a_terminal(tmp_path: Path) -> None:
    done = cli(tmp_path / "data", "run", str(FLOWS / "review.yaml"), "--input", INPUT)
    assert done.returncode == 0, done.stderr
    assert "✓" not in done.stderr
    assert done.stderr.strip().startswith("run run_")


async def test_run_shows_each_model_answer_as_it_streams_in(tmp_path: Path) -> None:
    from little_workflow.events import HarnessModelResponded
    from little_workflow.harness.models import ModelResponse
    from little_workflow.testing.fake_models import FakeModelServer
    from tests.harness import flows

    data = tmp_path / "data"
    with FakeModelServer(flows.script) as server:
        done = cli(data, "--setup", "tests.harness.flows:setup", "run",
                   str(Path(flows.__file__).with_name("orchestrate.yaml")),
                   "--input", json.dumps({"who": "Ada"}), "--run-id", "run_s", "--progress",
                   env={"LW_TEST_MODEL_URL": server.url})  # fmt: skip
        streamed = [request for request in server.requests if request.body.get("stream")]
        asked = len(server.requests)
    assert done.returncode == 0, done.stderr
    # Watched, every call streamed; the answers shown are the ones committed, in full.
    assert len(streamed) == asked > 0
    lines = done.stderr.splitlines()
    shown = [line.removeprefix("  │ ") for line in lines if line.startswith("  │ ")]
    async with Runtime(data) as rt:
        with sqlite3.connect(data / "little-workflow.db") as conn:
            runs = [row[0] for row in conn.execute("SELECT DISTINCT run_id FROM events")]
        texts = []
        for run_id in runs:
            for record in await rt.events.read(run_id):
                if isinstance(record.event, HarnessModelResponded):
                    message = ModelResponse.model_validate(record.event.response).message
                    call_id = record.event.call_id
                    label = call_id if run_id == "run_s" else f"{run_id}/{call_id}"
                    if message.text:
                        texts.append(f"{label}: {message.text}")
                    texts += [f"{label}: calls {call.name}" for call in message.tool_calls]
    assert sorted(shown) == sorted(texts)
    assert any(line.endswith('Shortlist ready: {"verdict": "Ada scores 70"}') for line in shown)
    # The answer lines come before the run's end, and stdout is only the output.
    end = next(i for i, line in enumerate(lines) if line.startswith("■ "))
    assert all(lines.index("  │ " + line) < end for line in shown), done.stderr
    assert json.loads(done.stdout) == 'Shortlist ready: {"verdict": "Ada scores 70"}'


def test_the_answer_view_joins_lines_and_starts_over_on_a_new_attempt() -> None:
    from little_workflow import RunDelta
    from little_workflow.cli._answers import AnswerView
    from little_workflow.harness.models import ModelDelta

    view = AnswerView("r")

    def feed(text: str, attempt: int = 1, kind: str = "text", run: str = "r") -> list[str]:
        delta = ModelDelta(kind=kind, text=text)  # type: ignore[arg-type]
        item = RunDelta(run_id=run, lineage=("r", run), path="a.model", slot="s",
                        attempt=attempt, delta=delta)  # fmt: skip
        return [line.plain for line in view.feed(item)]

    assert feed("Hel") == []
    assert view.status() is not None
    assert view.status().plain.endswith("…Hel")  # type: ignore[union-attr]
    assert feed("lo\nwor") == ["  │ a.model: Hello"]
    assert feed("ld", attempt=2) == [
        "  │ a.model: wor",
        "  │ a.model: (stream cut: asked again)",
    ]
    assert feed("think", attempt=2, kind="reasoning") == ["  │ a.model: ld"]
    assert [line.plain for line in view.committed("r", "a.model")] == ["  │ a.model: think"]
    assert view.committed("r", "a.model") == []
    assert feed("sub\n", run="child") == ["  │ child/a.model: sub"]
    assert feed("tail", run="child") == []
    # Another call streaming ends the line of the one before it.
    assert feed("next", run="other") == ["  │ child/a.model: tail"]
    assert [line.plain for line in view.end()] == ["  │ other/a.model: next"]
