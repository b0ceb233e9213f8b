"""A step that holds its run (and so the run's lock) until the test lets it go.

``LW_TEST_ENTERED`` names a file the step creates when it starts; ``LW_TEST_RELEASE``
names a file whose appearance lets it return. It gives up after a minute, so a broken
test cannot leave a process behind for long.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from little_workflow.runtime import StepContext


def hold(ctx: StepContext) -> str:
    """Signal that the step runs, then wait for the release file."""
    Path(os.environ["LW_TEST_ENTERED"]).write_text(f"{os.getpid()} {ctx.attempt}\n")
    release = Path(os.environ["LW_TEST_RELEASE"])
    deadline = time.monotonic() + 60
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the test never released the step")
        time.sleep(0.01)
    return f"released at attempt {ctx.attempt}"
