"""A workflow whose steps, tools and agent make artifacts and memories, for the in-run tests.

``make_report`` (an ``execute`` step) writes ``report.md`` and remembers its id; the
``note`` step is the ``write_artifact`` tool; the ``writer`` agent writes ``draft.md``,
reads it back and remembers it. Calls are counted outside the process: ``make_report``
appends a line to the file named by ``LW_TEST_CALLS``. With ``LW_TEST_KILL_ONCE`` naming
a file that does not exist yet, ``make_report`` creates it and SIGKILLs its own process
right after its put: the artifact is on disk, the step's completion is not.
``LW_TEST_KILL_TOOL_ONCE`` does the same in the ``write_artifact`` tool call that writes
the artifact named by ``LW_TEST_KILL_AT`` (``note.txt``: a tool step; ``draft.md``: the
agent's call).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from little_workflow.artifacts import ARTIFACT_TOOLS, write_artifact
from little_workflow.codec import JsonValue
from little_workflow.harness import ModelSlot, tool
from little_workflow.harness.models import ModelRequest, scripted
from little_workflow.memory import MEMORY_TOOLS
from little_workflow.runtime import RuntimeSetup, StepContext

WORKFLOW = Path(__file__).resolve().parent / "produce.yaml"


def make_report(topic: str, ctx: StepContext) -> str:
    """Write the report artifact, remember it, and return its id."""
    manifest = ctx.artifacts.put("report.md", f"# {topic}\n\nFindings.\n")
    with open(os.environ["LW_TEST_CALLS"], "a", encoding="utf-8") as handle:
        handle.write(f"{ctx.run_id} {ctx.step_path}\n")
    _kill_once("LW_TEST_KILL_ONCE")
    return manifest.artifact_id


def _kill_once(variable: str) -> None:
    marker = os.environ.get(variable)
    if marker and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)


def write_artifact_then_die(
    name: str, content: str, ctx: Any, media_type: str | None = None
) -> dict[str, JsonValue]:
    """Save text as a named file (an artifact) of this run; the first call kills its process.

    Args:
        name: A file name such as "report.md".
        content: The file's text.
        media_type: Its media type; guessed from the name if omitted.
    """
    manifest = write_artifact(name, content, ctx, media_type)
    if name == os.environ.get("LW_TEST_KILL_AT"):
        _kill_once("LW_TEST_KILL_TOOL_ONCE")
    return manifest


async def remember_report(report: str, topic: str, ctx: StepContext) -> str:
    """Remember the report's artifact id under the topic."""
    await ctx.memory.put("reports", topic, report)
    return report


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": name, "arguments": arguments}]}


def script(request: ModelRequest) -> Any:
    """The writer: write a draft, read it back, remember it, answer with what it read."""
    turns = sum(1 for message in request.messages if message.role == "assistant")
    last = request.messages[-1].content or ""
    if turns == 0:
        return _call("c_write", "write_artifact", {"name": "draft.md", "content": "Draft v1"})
    if turns == 1:
        return _call("c_read", "read_artifact", {"artifact": json.loads(last)["artifactId"]})
    if turns == 2:
        return _call(
            "c_remember", "remember", {"namespace": "writer", "key": "draft", "value": last}
        )
    if turns == 3:
        return _call("c_recall", "recall", {"namespace": "writer", "key": "draft"})
    return f"recalled: {last}"


def setup() -> RuntimeSetup:
    """The scripted writer slot and the built-in artifact and memory tools."""
    return RuntimeSetup(
        model_slots={"writer": ModelSlot(provider=scripted(script), model="scripted-writer")},
        tools=[
            *ARTIFACT_TOOLS[1:],
            tool(write_artifact_then_die, name="write_artifact"),
            *MEMORY_TOOLS,
        ],
    )
