"""A run's scratch directory, ``runs/<runId>/``, is made at its first use, not at start.

Most runs have no harness session: a directory (two, with ``harness/``) per run was most
of a data directory's entries at many runs. Asserted on the real data directory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from little_workflow.events import RunStatus
from little_workflow.lwir import OutputStep, Workflow
from little_workflow.runtime import Runtime
from tests.runtime.agent_flows import worker_workflow
from tests.runtime.session_support import ADA, make
from tests.runtime.support import cli

PLAIN = Workflow(name="plain", steps=(OutputStep(id="out", value="${input.n}"),))


async def test_a_run_of_a_plain_step_leaves_no_run_directory(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    async with Runtime(data_dir) as rt:
        for n in range(3):
            result = await rt.run(PLAIN, {"n": n}, run_id=f"run_{n}")
            assert result.status is RunStatus.COMPLETED
        assert (await rt.resume("run_0")).output == 0
        forked = await rt.fork("run_1", at="out", run_id="run_fork")
        assert forked.status is RunStatus.COMPLETED
    assert (data_dir / "runs").is_dir()
    assert list((data_dir / "runs").iterdir()) == []

    # Reading a run without its directory: show, then gc deleting it.
    shown = cli(data_dir, "show", "run_fork")
    assert shown.returncode == 0, shown.stderr
    swept = cli(data_dir, "gc", "--older-than", "0s", "--grace", "0s")
    assert swept.returncode == 0, swept.stderr
    async with Runtime(data_dir) as rt:
        assert await rt.events.get_run("run_0") is None
        assert await rt.events.get_run("run_fork") is None


async def test_an_agent_step_makes_its_directories_owner_only_under_umask_0(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    rt, _provider, _tools = make(data_dir)
    previous = os.umask(0)
    try:
        async with rt:
            result = await rt.run(worker_workflow(), ADA, run_id="run_w")
    finally:
        os.umask(previous)
    assert result.status is RunStatus.COMPLETED
    run_dir = data_dir / "runs" / "run_w"
    harness_dir = run_dir / "harness"
    (session_dir,) = harness_dir.iterdir()
    for folder in (run_dir, harness_dir, session_dir):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
