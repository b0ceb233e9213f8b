"""A host whose agent graph runs a ``run_code`` step in a child process.

``python -m tests.platform.step_host ROOT start|resume``: ``start`` executes
``exec_1`` (and is SIGKILLed by the test while the child runs); ``resume`` resumes it.
Each prints ``{"output": ...}`` when the execution completes.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from little_workflow.durable import create_checkpoint_store
from little_workflow.harness import AgentHarness, HarnessEnvironment, HarnessStorage, run_code
from little_workflow.platform import create_local_subprocess_adapter
from little_workflow.storage import create_file_storage
from little_workflow.testing.subprocess_targets import hold


def build(root: Path) -> AgentHarness:
    adapter = create_local_subprocess_adapter(storage=create_file_storage(root=root / "subprocess"))
    return AgentHarness(
        name="stepper",
        agent_graph=run_code(hold, id="work", subprocess=adapter),
        environment=HarnessEnvironment(
            storage=HarnessStorage(
                checkpoint_store=create_checkpoint_store(
                    storage=create_file_storage(root=root / "checkpoints")
                )
            )
        ),
    )


async def main(root: Path, mode: str) -> None:
    harness = build(root)
    job = {"release": str(root / "release"), "starts": str(root / "starts"), "every": 0.01}
    if mode == "start":
        output = await harness.execute(harness.create_context(id="exec_1"), job)
    else:
        resumed = await harness.resume("exec_1")
        assert resumed is not None
        output = resumed[1]
    print(json.dumps({"output": output}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
