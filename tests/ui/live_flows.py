"""A streamed agent step whose second answer is long, for the live-answer tests of the UI.

``brief``'s agent first calls ``wait_for_page``, a tool that returns only once a run
page of the UI watches the run (a socket in ``<data_dir>/live/``): so the second model
call, which starts after it, surely finds the watcher, without a race on when the page
opened. That answer (some reasoning, then ``LINES`` lines of text) comes from the fake
server, another process or thread, at ``LW_TEST_MODEL_URL``, paced by its event delay.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from little_workflow import WorkflowContext, workflow
from little_workflow._live import LIVE_DIR
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness._tools import tool
from little_workflow.harness.models import (
    Message,
    ModelRequest,
    OpenAICompatibleProvider,
    ReasoningPart,
    TextPart,
)
from little_workflow.runtime import RuntimeSetup

#: Lines of the long answer.
LINES = 12
ANSWER = "\n".join(f"line {n} of the brief, streamed word by word" for n in range(1, LINES + 1))
THOUGHT = "The page watches now, so think aloud a little first."


@tool
def wait_for_page() -> str:
    """Wait until a run page watches this run."""
    live = Path(os.environ["LW_TEST_DATA_DIR"]) / LIVE_DIR
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if live.is_dir() and any(live.iterdir()):
            return "watched"
        time.sleep(0.02)
    return "nobody watched"


@workflow
async def brief(ctx: WorkflowContext, topic: str) -> str:
    return await ctx.agent("writer", prompt=f"Write a brief on {topic}.", tools=["wait_for_page"])


def script(request: ModelRequest) -> object:
    """A call of ``wait_for_page`` first; then the long answer, with its reasoning."""
    if not any(message.role == "tool" for message in request.messages):
        return {"tool_calls": [{"name": "wait_for_page", "arguments": {}}]}
    thought = ReasoningPart(provider="openai", text=THOUGHT)
    return Message(role="assistant", content=(thought, TextPart(text=ANSWER)))


def setup() -> RuntimeSetup:
    """The ``writer`` slot on the fake server at ``LW_TEST_MODEL_URL``; the tool."""
    base = os.environ["LW_TEST_MODEL_URL"]
    provider = OpenAICompatibleProvider(f"{base}/v1", api_key_env=None, max_retries=0, timeout=60)
    return RuntimeSetup(
        model_slots={"writer": ModelSlot(provider=provider, model="writer-model")},
        tools=[wait_for_page],
    )


def start_brief(data: Path, model_url: str, topic: str, run_id: str) -> subprocess.Popen[str]:
    """``run tests.ui.live_flows:brief`` in a CLI process of its own, on ``model_url``."""
    from tests.runtime.support import cli_popen

    return cli_popen(
        data, "--setup", "tests.ui.live_flows:setup", "run", "tests.ui.live_flows:brief",
        "--input", f'{{"topic": "{topic}"}}', "--run-id", run_id,
        env={"LW_TEST_MODEL_URL": model_url, "LW_TEST_DATA_DIR": str(data)},
    )  # fmt: skip
