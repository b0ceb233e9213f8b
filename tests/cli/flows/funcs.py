"""Step and supervise functions of the workflows in this folder.

``chatty`` writes to stdout every way a step can: ``print``, ``print`` from a thread,
``os.write`` on file descriptor 1, and a child process inheriting it. ``gate`` writes
the file ``LW_TEST_GATE_MARK`` names, then waits until the file ``LW_TEST_GATE_OPEN``
names exists: a run held at a known step until the test lets it go (or kills it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from little_workflow.runtime import Continue, Cycle, Done, RuntimeSetup

#: What ``chatty`` writes, each on a line of its own; none of it belongs on stdout.
CHATTER = ("said by print", "said by a thread", "said on fd 1", "said by a child process")


def chatty(topic: str) -> dict[str, str]:
    """Writes ``CHATTER`` to stdout, then returns ``{"topic": topic}``."""
    print(CHATTER[0])
    thread = threading.Thread(target=print, args=(CHATTER[1],))
    thread.start()
    thread.join()
    sys.stdout.flush()
    os.write(1, f"{CHATTER[2]}\n".encode())
    subprocess.run(["echo", CHATTER[3]], check=True)
    return {"topic": topic}


def measure(blob: str) -> dict[str, object]:
    """The length of ``blob`` and its first characters."""
    return {"length": len(blob), "head": blob[:8]}


def gate(topic: str) -> str:
    """Marks that it started, then waits for the gate file (see the module docstring)."""
    Path(os.environ["LW_TEST_GATE_MARK"]).write_text(str(os.getpid()))
    while not Path(os.environ["LW_TEST_GATE_OPEN"]).exists():
        time.sleep(0.02)
    return f"passed {topic}"


def done_at_once(cycle: Cycle) -> Done | Continue:
    """A supervise function: done after the first cycle, with its output."""
    return Done(cycle.output)


def supervise_two(cycle: Cycle, verdict: str) -> Done:
    """A supervise function with one parameter too many (cannot be called as supervise(cycle))."""
    return Done({"verdict": verdict})


def research_setup() -> RuntimeSetup:
    """A setup with the ``researcher`` slot ``ask.yaml`` needs, on a scripted model."""
    from little_workflow.harness import ModelSlot
    from little_workflow.harness.models import scripted

    return RuntimeSetup(
        model_slots={"researcher": ModelSlot(provider=scripted("an answer"), model="scripted")}
    )


def flaky(topic: str) -> str:
    """Fails (``ValueError``) until the file ``LW_TEST_FIXED`` names exists."""
    if not Path(os.environ["LW_TEST_FIXED"]).exists():
        raise ValueError(f"the {topic} service is down")
    return f"fixed {topic}"


def fail_at(index: int, fail: int) -> int:
    """``index``, or a ``ValueError`` when it is ``fail``."""
    if index == fail:
        raise ValueError(f"branch {index} fails")
    return index
