"""Step functions of ``fork_flow.yaml``, counted in ``LW_TEST_CALLS`` like the others.

``stamp`` SIGKILLs its own process the first time it runs while ``LW_TEST_KILL_FILE``
names a file that does not exist yet (it creates the file first): a real kill in the
middle of a run, once.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from little_workflow.runtime import StepContext
from tests.runtime.flows import _count


def check(value: str, ctx: StepContext) -> str:
    """Fails on ``"bad"``; otherwise the value in capitals."""
    _count(ctx)
    if value == "bad":
        raise ValueError(f"{value!r} does not pass the check")
    return value.upper()


def stamp(value: str, ctx: StepContext) -> dict[str, str]:
    """Stamps the value (and kills its process once, see the module docstring)."""
    _count(ctx)
    kill_file = os.environ.get("LW_TEST_KILL_FILE")
    if kill_file and not Path(kill_file).exists():
        Path(kill_file).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return {"stamped": value}
