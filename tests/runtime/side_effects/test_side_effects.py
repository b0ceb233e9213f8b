"""Side effects through the outbox: intent before dispatch, reconcile after a crash.

The crash tests kill a real ``little-workflow run`` process with SIGKILL inside the
side-effecting call (just before or just after the far end took the request), then
resume in a fresh process; the far end (``far_end.py``) is a file every process sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from little_workflow.events import (
    SideEffectIntended,
    SideEffectReconciled,
    StepAttemptStarted,
    StepCompleted,
)
from little_workflow.lwir import ExecuteStep, OutputStep, SideEffectPolicy, Workflow
from little_workflow.runtime import Runtime, side_effect

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).parent


def _cli(data_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "little_workflow", "--data-dir", str(data_dir), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LW_TEST_FAR_END": str(tmp_path / "far_end.jsonl"),
        "PYTHONPATH": str(REPO),
    }


def _far_end(env: dict[str, str]) -> list[dict[str, object]]:
    path = Path(env["LW_TEST_FAR_END"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _killed(data_dir: Path, *args: str, at: str, env: dict[str, str]) -> None:
    """Run the CLI until the far end's kill point ``at`` SIGKILLs it."""
    killed = _cli(data_dir, *args, env={**env, "LW_TEST_KILL": at})
    assert killed.returncode == -9, killed.stderr


async def _events(data_dir: Path, run_id: str) -> list[object]:
    async with Runtime(data_dir) as runtime:
        return [record.event for record in await runtime.events.read(run_id)]


async def test_killed_after_the_effect_the_hook_completes_the_step_without_a_call(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    _killed(
        data,
        "run",
        str(HERE / "pay.yaml"),
        "--input",
        '{"amount": 42}',
        "--run-id",
        "run_pay",
        at="after_effect",
        env=env,
    )
    assert _far_end(env) == [{"key": "run_pay/charge", "amount": 42}]
    resumed = _cli(data, "resume", "run_pay", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == {"charge": "run_pay/charge", "amount": 42}
    # The service was asked once, by the killed process; the resume asked the hook.
    assert len(_far_end(env)) == 1
    events = await _events(data, "run_pay")
    intents = [e for e in events if isinstance(e, SideEffectIntended)]
    assert [(i.key, i.attempt) for i in intents] == [("run_pay/charge", 1)]
    reconciled = [e for e in events if isinstance(e, SideEffectReconciled)]
    assert [(r.key, r.happened) for r in reconciled] == [("run_pay/charge", True)]
    completed = [e for e in events if isinstance(e, StepCompleted) and e.step_path == "charge"]
    assert [c.output for c in completed] == [{"charge": "run_pay/charge", "amount": 42}]
    # The intent was committed before the call: it precedes everything after the start.
    types = [type(e).__name__ for e in events]
    assert types.index("SideEffectIntended") < types.index("SideEffectReconciled")


async def test_killed_before_the_effect_the_hook_says_no_and_the_step_runs_again(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    _killed(
        data,
        "run",
        str(HERE / "pay.yaml"),
        "--input",
        '{"amount": 7}',
        "--run-id",
        "run_pay",
        at="before_effect",
        env=env,
    )
    assert _far_end(env) == []
    resumed = _cli(data, "resume", "run_pay", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert _far_end(env) == [{"key": "run_pay/charge", "amount": 7}]
    events = await _events(data, "run_pay")
    reconciled = [e for e in events if isinstance(e, SideEffectReconciled)]
    assert [r.happened for r in reconciled] == [False]
    intents = [e for e in events if isinstance(e, SideEffectIntended)]
    # Dispatched again under the same key, as attempt 2.
    assert [(i.key, i.attempt) for i in intents] == [("run_pay/charge", 1), ("run_pay/charge", 2)]


async def test_without_a_hook_the_step_is_dispatched_again_under_its_own_key(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    _killed(
        data,
        "run",
        str(HERE / "pay_blind.yaml"),
        "--input",
        '{"amount": 5, "order": "A-17"}',
        "--run-id",
        "run_blind",
        at="after_effect",
        env=env,
    )
    resumed = _cli(data, "resume", "run_blind", env=env)
    assert resumed.returncode == 0, resumed.stderr
    # At least once: the far end saw the request twice, both under the step's key,
    # which is what lets a deduplicating far end charge once.
    assert _far_end(env) == [{"key": "order-A-17", "amount": 5}] * 2
    assert json.loads(resumed.stdout) == {"charge": "order-A-17", "amount": 5}
    events = await _events(data, "run_blind")
    assert not any(isinstance(e, SideEffectReconciled) for e in events)


async def test_the_intent_is_durable_before_the_call(tmp_path: Path) -> None:
    database = tmp_path / "data" / "little-workflow.db"
    workflow = Workflow(
        name="intent-first",
        steps=[
            ExecuteStep(
                id="probe",
                fn="tests.runtime.side_effects.far_end:intent_committed",
                with_={"database": str(database)},
                side_effect=SideEffectPolicy(),
            ),
            OutputStep(id="out", value="${steps.probe.output}"),
        ],
    )
    async with Runtime(tmp_path / "data") as runtime:
        assert runtime.data_dir.database == database
        result = await runtime.run(workflow, None, run_id="run_probe")
        assert result.output is True


async def test_a_plain_step_holds_its_attempt_and_writes_no_intent(tmp_path: Path) -> None:
    workflow = Workflow(
        name="plain",
        steps=[
            ExecuteStep(
                id="probe",
                fn="tests.runtime.side_effects.far_end:intent_committed",
                with_={"database": str(tmp_path / "data" / "little-workflow.db")},
            ),
            OutputStep(id="out", value="${steps.probe.output}"),
        ],
    )
    async with Runtime(tmp_path / "data") as runtime:
        result = await runtime.run(workflow, None, run_id="run_plain")
        assert result.output is False
        events = [r.event for r in await runtime.events.read("run_plain")]
        assert not any(isinstance(e, SideEffectIntended) for e in events)
        assert sum(isinstance(e, StepAttemptStarted) for e in events) == 1


async def test_a_tool_step_with_a_marked_function_goes_through_the_outbox(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from little_workflow import tool
    from little_workflow.lwir import ToolStep

    seen: list[str | None] = []

    @side_effect
    def notify(ctx: object, text: str) -> str:
        """Send a notification."""
        seen.append(getattr(ctx, "side_effect_key", None))
        return f"sent {text}"

    workflow = Workflow(
        name="notify",
        steps=[
            ToolStep(id="send", tool="notify", with_={"text": "hi"}),
            OutputStep(id="out", value="${steps.send.output}"),
        ],
    )
    async with Runtime(tmp_path / "data", tools=[tool(notify)]) as runtime:
        result = await runtime.run(workflow, None, run_id="run_tool")
        assert result.output == "sent hi"
        events = [r.event for r in await runtime.events.read("run_tool")]
    assert seen == ["run_tool/send"]
    assert [e.key for e in events if isinstance(e, SideEffectIntended)] == ["run_tool/send"]


def test_a_key_template_is_validated_like_any_template() -> None:
    from little_workflow.errors import LwirValidationError
    from little_workflow.lwir import parse_workflow

    with pytest.raises(LwirValidationError, match="sideEffect"):
        parse_workflow(
            {
                "lwir": 1,
                "name": "bad-key",
                "steps": [
                    {
                        "id": "a",
                        "kind": "execute",
                        "fn": "m:f",
                        "sideEffect": {"key": "${steps.nowhere.output}"},
                    }
                ],
            }
        )


def test_runs_stuck_lists_an_intent_left_without_outcome_until_the_resume(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    _killed(
        data,
        "run",
        str(HERE / "pay.yaml"),
        "--input",
        '{"amount": 3}',
        "--run-id",
        "run_st",
        at="after_effect",
        env=env,
    )
    listed = _cli(data, "runs", "--stuck", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert [(item["runId"], item["reason"], item["key"]) for item in json.loads(listed.stdout)] == [
        ("run_st", "intent_unreconciled", "run_st/charge")
    ]
    assert _cli(data, "resume", "run_st", env=env).returncode == 0
    listed = _cli(data, "runs", "--stuck", "--json", env=env)
    assert json.loads(listed.stdout) == []


async def test_an_agents_side_effecting_tool_call_is_reconciled_after_a_kill(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    setup = ("--setup", "tests.runtime.side_effects.far_end:setup")
    _killed(
        data,
        *setup,
        "run",
        str(HERE / "cashier.yaml"),
        "--run-id",
        "run_agent",
        at="after_effect",
        env=env,
    )
    (request,) = _far_end(env)
    key = request["key"]
    assert isinstance(key, str)
    assert key.endswith("c_pay]")  # <session>/<path of the call>, stable across processes
    resumed = _cli(data, *setup, "resume", "run_agent", env=env)
    assert resumed.returncode == 0, resumed.stderr
    # The resume asked the hook; the service was called once in all, and the model got
    # the charge the killed process made.
    assert len(_far_end(env)) == 1
    assert json.loads(resumed.stdout) == f"paid: {json.dumps({'charge': key, 'amount': 9})}"


def test_a_hook_that_raises_is_a_tool_error_the_agent_is_told(
    tmp_path: Path, env: dict[str, str]
) -> None:
    data = tmp_path / "data"
    setup = ("--setup", "tests.runtime.side_effects.far_end:setup_unknowable")
    _killed(
        data, *setup, "run", str(HERE / "cashier.yaml"), "--run-id", "run_unknown",
        at="after_effect", env=env,
    )  # fmt: skip
    resumed = _cli(data, *setup, "resume", "run_unknown", env=env)
    assert resumed.returncode == 0, resumed.stderr
    # Not called blind a second time: the model got the hook's failure instead.
    assert len(_far_end(env)) == 1
    answer = json.loads(resumed.stdout)
    assert answer.startswith("paid: reconcile(")
    assert "raised RuntimeError: the payment service cannot say" in answer
