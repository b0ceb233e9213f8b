"""A tool with a large result and a step that holds the run, for the payload tests.

``big_tool`` appends a line to the file ``LW_PAYLOAD_CALLS`` names each time it runs (a
count kept outside any process that may be killed). ``check`` holds its run as
``block_funcs.hold`` does (``LW_TEST_ENTERED``, ``LW_TEST_RELEASE``), so a test can kill
the process while the tool's result is committed and the run is not done.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from little_workflow.runtime import RuntimeSetup, StepContext
from tests.runtime.flows.block_funcs import hold


def big_text(mib: int) -> str:
    """``mib`` MiB of text that no two MiB share, so nothing compresses it into a cache."""
    return "".join(hashlib.sha256(f"block {i}".encode()).hexdigest() * 16_384 for i in range(mib))[
        : mib * 1024 * 1024
    ]


def big_tool(mib: int) -> dict[str, object]:
    """A tool whose result is ``mib`` MiB of JSON.

    Args:
        mib: How many MiB of text to return.
    """
    calls = os.environ.get("LW_PAYLOAD_CALLS")
    if calls:
        with Path(calls).open("a") as file:
            file.write(f"{os.getpid()}\n")
    return {"text": big_text(mib), "mib": mib}


def check(ctx: StepContext, data: dict[str, object]) -> dict[str, object]:
    """The result's length and digest; holds the run until the test releases it."""
    if os.environ.get("LW_TEST_ENTERED") and os.environ.get("LW_TEST_RELEASE"):
        hold(ctx)
    text = data["text"]
    assert isinstance(text, str)
    return {"length": len(text), "sha256": hashlib.sha256(text.encode()).hexdigest()}


def setup() -> RuntimeSetup:
    """The tool the payload workflows call."""
    return RuntimeSetup(tools=[big_tool])
