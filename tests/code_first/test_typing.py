"""``ctx.step`` is typed end to end: ``mypy --strict`` checks a small workflow file.

``ctx.tool`` and ``ctx.plan`` take a JSON object and give JSON (what the log holds).

The arguments of a step call are checked against the step function's parameters and
the ``await`` gives its return type, for sync and async step functions alike; the
marked lines must fail.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SOURCE = textwrap.dedent(
    """
    from little_workflow import WorkflowContext, step, workflow, RetryPolicy

    @step
    async def fetch(query: str, limit: int = 3) -> list[str]:
        return [query] * limit

    @step(retry=RetryPolicy(attempts=2))
    def score(text: str) -> float:
        return float(len(text))

    @workflow
    async def child(ctx: WorkflowContext, n: int) -> int:
        return n

    async def branch(ctx: WorkflowContext, text: str) -> int:
        return len(await ctx.step(fetch, text))

    @workflow
    async def body(ctx: WorkflowContext, query: str) -> float:
        found = await ctx.step(fetch, query, limit=2)
        reveal_type(found)
        first: float = await ctx.step(score, found[0])
        reveal_type(await ctx.step(score, "x"))
        scores = await ctx.map(score, found, key=lambda text: text, concurrency=2)
        lengths = await ctx.branches(branch, found)
        reveal_type(lengths)
        reveal_type(scores)
        reveal_type(await ctx.workflow(child, {"n": 1}))
        await ctx.step(fetch, 3)  # ERROR 1: an int for a str
        await ctx.step(score, "a", "b")  # ERROR 2: too many arguments
        wrong: str = await ctx.step(score, "a")  # ERROR 3: a float, not a str
        await ctx.tool("lookup", {"name": query}, retry=RetryPolicy(attempts=2), name="look")
        await ctx.tool("lookup", [query])  # ERROR 4: a tool's arguments are an object
        planned: str = await ctx.plan("a goal", {"n": 1}, slot="planner")  # ERROR 5: JSON
        return first + sum(scores)
    """
)


@pytest.mark.slow
def test_step_calls_are_checked_against_the_step_functions(tmp_path: Path) -> None:
    path = tmp_path / "typed_flow.py"
    path.write_text(SOURCE)
    # In a process of its own: mypy's in-process API raises the interpreter's recursion
    # limit for good, and the deep-nesting tests of other files then recurse past the C
    # stack instead of meeting RecursionError.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out, err, status = done.stdout, done.stderr, done.returncode
    lines = [line for line in out.splitlines() if "typed_flow.py" in line]
    notes = [line.split(": note: ", 1)[1] for line in lines if ": note: Revealed type" in line]
    assert notes == [
        'Revealed type is "list[str]"',
        'Revealed type is "float"',
        'Revealed type is "list[int]"',
        'Revealed type is "list[float]"',
        'Revealed type is "int"',
    ], out
    errors = {int(line.split(":")[1]) for line in lines if ": error: " in line}
    source_lines = SOURCE.splitlines()
    expected = {number for number, text in enumerate(source_lines, start=1) if "# ERROR" in text}
    assert errors == expected, out
    assert status == 1, err
