"""A workflow a model wrote is data: it never reaches a callable the developer did not offer.

Issue 17, point 1. A planner's answer (``Runtime.run_goal``) or any document a step
computes (``definition: "${steps.plan.output}"``) may name ``os:system`` and friends;
with the default runtime (``import_functions=True``) they were imported and called with
the model's arguments. Each of the five callables below would leave a marker file; the
tests assert the marker is absent, that the refusal is ``FunctionNotAllowedError``
(``function_not_allowed``) naming the step and the function, and that the run is
recorded as failed. A module whose import leaves a marker shows that checking a computed
document imports nothing. Trust is pinned with the computed version and survives a
resume; a workflow file the developer wrote still imports, and ``--no-import-functions``
refuses that too.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import (
    ConfigError,
    CorruptDataError,
    FunctionNotAllowedError,
    RunFailedError,
)
from little_workflow.events import RunStatus
from little_workflow.harness._slots import ModelSlot
from little_workflow.harness.models import ModelRequest, ScriptedProvider, scripted
from little_workflow.runtime import Runtime
from tests.runtime.support import Crash, cli, ev, of_type, runtime

WRITER = "writer-model"


def attack(fn: str, arguments: dict[str, Any], *, step: str = "shell") -> dict[str, Any]:
    """A workflow document (as a model would write it) whose step ``step`` calls ``fn``."""
    return {
        "lwir": 1,
        "name": "planned",
        "steps": [
            {"id": step, "kind": "execute", "fn": fn, "with": arguments},
            {"id": "out", "kind": "output", "value": "done"},
        ],
    }


def attacks(marker: Path, source: Path) -> dict[str, dict[str, Any]]:
    """The five callables of the issue, each with arguments that would create ``marker``."""
    return {
        "os:system": attack("os:system", {"command": f"touch {marker}"}),
        "subprocess:getoutput": attack("subprocess:getoutput", {"cmd": f"touch {marker}"}),
        "subprocess:run": attack("subprocess:run", {"args": ["touch", str(marker)]}),
        "shutil:copyfile": attack("shutil:copyfile", {"src": str(source), "dst": str(marker)}),
        "pathlib:Path.touch": attack("pathlib:Path.touch", {"self": str(marker)}),
    }


FIVE = [
    "os:system",
    "subprocess:getoutput",
    "subprocess:run",
    "shutil:copyfile",
    "pathlib:Path.touch",
]


def writer(document: dict[str, Any]) -> ScriptedProvider:
    """A model that answers every request with ``document`` as JSON (a prompt injection)."""

    def script(_request: ModelRequest) -> Any:
        return json.dumps(document)

    return scripted(script)


def slots(provider: ScriptedProvider) -> dict[str, ModelSlot]:
    return {"planner": ModelSlot(provider=provider, model=WRITER)}


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    return tmp_path / "pwned"


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "source.txt"
    path.write_text("copied")
    return path


@pytest.fixture
def importable(tmp_path: Path) -> Iterator[Path]:
    """A directory on ``sys.path`` for modules the tests write; removed after."""
    directory = tmp_path / "modules"
    directory.mkdir()
    sys.path.insert(0, str(directory))
    try:
        yield directory
    finally:
        sys.path.remove(str(directory))
        for name in [name for name in sys.modules if name.startswith("lw_sec_")]:
            del sys.modules[name]


def marking_module(directory: Path, name: str, marker: Path) -> None:
    """``name.py``, whose import writes ``marker`` and whose ``touch(path)`` writes ``path``."""
    (directory / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            Path({str(marker)!r}).write_text("imported")


            def touch(path: str) -> str:
                Path(path).write_text("called")
                return "touched"
            """
        )
    )


def traces(*paths: Path) -> list[Path]:
    """Those of ``paths`` that exist: what an import or a call left behind."""
    return [path for path in paths if path.exists()]


def assert_refused(error: RunFailedError, fn: str, step: str = "shell") -> FunctionNotAllowedError:
    """``error`` is the run's failure for ``fn`` at ``step``: typed, coded, named."""
    assert error.cause_code == "function_not_allowed"
    refusal = error.__cause__
    assert isinstance(refusal, FunctionNotAllowedError)
    assert refusal.code == "function_not_allowed"
    assert (refusal.function, refusal.step_path) == (fn, step)
    assert f"step {step!r} calls function {fn!r}" in error.message
    assert "computed at run time" in error.message
    return refusal


# --- the five callables, through run_goal and through definition: ------------------------


@pytest.mark.parametrize("fn", FIVE)
async def test_a_plan_naming_a_dangerous_callable_is_refused_through_run_goal(
    tmp_path: Path, marker: Path, source: Path, fn: str
) -> None:
    provider = writer(attacks(marker, source)[fn])
    # The default runtime: import_functions=True, as the CLI builds it.
    async with runtime(tmp_path / "data", model_slots=slots(provider)) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
        state = await rt.get_state("run_goal")
        log = await rt.events.read("run_goal")
        children = await rt.events.list_runs(parent_run_id="run_goal")

    assert traces(marker) == []
    assert_refused(caught.value, fn)
    assert provider.calls == 1
    assert state.status is RunStatus.FAILED
    assert state.failure_cause == "function_not_allowed"
    (failed,) = of_type(log, "RunFailed")
    assert (failed.step_path, failed.cause_code) == ("run", "function_not_allowed")
    assert children == []  # refused before a sub-run existed


@pytest.mark.parametrize("fn", FIVE)
async def test_a_computed_definition_naming_a_dangerous_callable_is_refused(
    tmp_path: Path, marker: Path, source: Path, fn: str
) -> None:
    # A workflow file the developer wrote (trusted) whose agent answers a document (data).
    workflow = tmp_path / "dynamic.yaml"
    workflow.write_text(
        textwrap.dedent(
            """
            lwir: 1
            name: dynamic
            steps:
              - {id: plan, kind: agent, slot: planner, prompt: "Read the page", output: json}
              - {id: run, kind: workflow, definition: "${steps.plan.output}"}
              - {id: out, kind: output, value: "${steps.run.output}"}
            """
        )
    )
    provider = writer(attacks(marker, source)[fn])
    async with runtime(tmp_path / "data", model_slots=slots(provider)) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run(workflow, run_id="run_def")
        state = await rt.get_state("run_def")
        children = await rt.events.list_runs(parent_run_id="run_def")

    assert traces(marker) == []
    assert_refused(caught.value, fn)
    assert state.status is RunStatus.FAILED
    assert state.failure_cause == "function_not_allowed"
    assert children == []


async def test_checking_a_computed_definition_imports_nothing(
    tmp_path: Path, importable: Path
) -> None:
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_payload", imported)
    provider = writer(attack("lw_sec_payload:touch", {"path": str(called)}))
    async with runtime(tmp_path / "data", model_slots=slots(provider)) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")

    assert_refused(caught.value, "lw_sec_payload:touch")
    assert "lw_sec_payload" not in sys.modules
    assert traces(imported, called) == []


async def test_a_decision_in_a_plan_naming_a_dangerous_callable_is_refused(
    tmp_path: Path, marker: Path
) -> None:
    document = {
        "lwir": 1,
        "name": "planned",
        "steps": [
            {
                "id": "pick",
                "kind": "decision",
                "fn": "os:system",
                "with": {"command": f"touch {marker}"},
                "routes": {"on": "out"},
            },
            {"id": "out", "kind": "output", "value": "done"},
        ],
    }
    async with runtime(tmp_path / "data", model_slots=slots(writer(document))) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
    assert traces(marker) == []
    assert_refused(caught.value, "os:system", step="pick")


async def test_a_function_a_workflow_file_imported_is_still_refused_to_a_plan(
    tmp_path: Path, importable: Path
) -> None:
    # The runtime imported (and cached) it for the developer's file: that does not offer it.
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_cached", imported)
    workflow = tmp_path / "trusted.json"
    workflow.write_text(json.dumps(attack("lw_sec_cached:touch", {"path": str(called)})))
    provider = writer(attack("lw_sec_cached:touch", {"path": str(tmp_path / "planned")}))
    async with runtime(tmp_path / "data", model_slots=slots(provider)) as rt:
        await rt.run(workflow, run_id="run_file")
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
    assert_refused(caught.value, "lw_sec_cached:touch")
    assert traces(called, tmp_path / "planned") == [called]


# --- what a computed document may still do, and trust across nesting and resumes ----------


async def test_a_computed_definition_may_call_a_registered_function(
    tmp_path: Path, importable: Path
) -> None:
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_offered", imported)
    seen: list[str] = []

    def offered(path: str) -> str:
        seen.append(path)
        return "offered"

    provider = writer(attack("lw_sec_offered:touch", {"path": str(called)}))
    async with runtime(
        tmp_path / "data",
        model_slots=slots(provider),
        functions={"lw_sec_offered:touch": offered},
    ) as rt:
        result = await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")

    assert result.status is RunStatus.COMPLETED
    assert result.output == "done"
    assert seen == [str(called)]  # the registered callable, not the module's
    assert traces(imported, called) == []


async def test_a_definition_computed_inside_a_computed_workflow_stays_untrusted(
    tmp_path: Path, marker: Path
) -> None:
    inner = attack("os:system", {"command": f"touch {marker}"}, step="deeper")
    outer = {
        "lwir": 1,
        "name": "outer",
        "steps": [
            {"id": "nested", "kind": "workflow", "definition": inner},
            {"id": "out", "kind": "output", "value": "${steps.nested.output}"},
        ],
    }
    provider = writer(outer)
    async with runtime(tmp_path / "data", model_slots=slots(provider)) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
        (child,) = await rt.events.list_runs(parent_run_id="run_goal")
        child_state = await rt.get_state(child.run_id)
        child_log = await rt.events.read(child.run_id)

    assert traces(marker) == []
    assert caught.value.cause_code == "sub_run_failed"
    assert child_state.failure_cause == "function_not_allowed"
    (failed,) = of_type(child_log, "RunFailed")
    assert failed.step_path == "nested"
    assert "step 'deeper' calls function 'os:system'" in (failed.message or "")


@pytest.mark.parametrize(
    "step",
    [
        pytest.param({"id": "s", "kind": "tool", "tool": "os_system"}, id="unregistered-tool"),
        pytest.param({"id": "s", "kind": "workflow", "workflow": "evil.yaml"}, id="file"),
    ],
)
async def test_a_computed_definition_reaches_no_tool_or_file_it_was_not_given(
    tmp_path: Path, marker: Path, step: dict[str, Any]
) -> None:
    # A workflow file beside the data directory: a computed document has no file to be
    # relative to, so it cannot name one.
    (tmp_path / "evil.yaml").write_text(
        json.dumps(attack("os:system", {"command": f"touch {marker}"}))
    )
    document = {
        "lwir": 1,
        "name": "planned",
        "steps": [step, {"id": "out", "kind": "output", "value": "done"}],
    }
    async with runtime(tmp_path / "data", model_slots=slots(writer(document))) as rt:
        with pytest.raises(RunFailedError) as caught:
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
    assert caught.value.cause_code == "runtime_config_error"
    assert traces(marker) == []


async def test_a_computed_version_is_pinned_untrusted_and_a_resume_keeps_it(
    tmp_path: Path, importable: Path
) -> None:
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_later", imported)
    reference = "lw_sec_later:touch"
    provider = writer(attack(reference, {"path": str(called)}))

    def crash(path: str) -> str:
        raise Crash  # a kill inside the computed workflow's step

    data = tmp_path / "data"
    async with runtime(data, model_slots=slots(provider), functions={reference: crash}) as rt:
        with pytest.raises(Crash):
            await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
        (child,) = await rt.events.list_runs(parent_run_id="run_goal")
        started = ev((await rt.events.read(child.run_id, limit=1))[0])

    # Resumed by a runtime that no longer offers the function (but could import it): the
    # computed workflow is still data, so it is refused, not imported.
    async with runtime(data, model_slots=slots(provider)) as rt:
        pinned = await rt.catalog.load(started.workflow_version_id)
        record = await rt.kv.get(f"workflows/{started.workflow_version_id}")
        with pytest.raises(FunctionNotAllowedError) as direct:
            await rt.resume(child.run_id)
        with pytest.raises(RunFailedError) as caught:
            await rt.resume("run_goal")
        state = await rt.get_state("run_goal")

    assert pinned.trusted is False
    assert isinstance(record, dict)
    assert record["computed"] is True
    assert (direct.value.function, direct.value.step_path) == (reference, "shell")
    assert_refused(caught.value, reference)
    assert state.status is RunStatus.FAILED
    assert "lw_sec_later" not in sys.modules
    assert traces(imported, called) == []


async def test_a_computed_flag_removed_from_a_record_is_corrupt_data(tmp_path: Path) -> None:
    document = attack("steps:echo", {"value": 1})
    functions = {"steps:echo": lambda value: value}
    data = tmp_path / "data"
    async with runtime(data, model_slots=slots(writer(document)), functions=functions) as rt:
        await rt.run_goal("tidy up", planner_slot="planner", run_id="run_goal")
        (child,) = await rt.events.list_runs(parent_run_id="run_goal")
        version_id = ev((await rt.events.read(child.run_id, limit=1))[0]).workflow_version_id
        record = await rt.kv.get(f"workflows/{version_id}")
        assert isinstance(record, dict)
        del record["computed"]  # as if to make the model's document the developer's
        await rt.kv.set(f"workflows/{version_id}", record)

    async with runtime(data, functions=functions) as rt:
        with pytest.raises(CorruptDataError) as caught:
            await rt.catalog.load(version_id)
    assert "it was altered" in caught.value.message


# --- a workflow file is code; --no-import-functions --------------------------------------


async def test_a_workflow_file_still_imports_its_functions(
    tmp_path: Path, importable: Path
) -> None:
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_trusted", imported)
    workflow = tmp_path / "trusted.json"
    workflow.write_text(json.dumps(attack("lw_sec_trusted:touch", {"path": str(called)})))
    async with Runtime(tmp_path / "data") as rt:
        result = await rt.run(workflow, run_id="run_file")
    assert result.output == "done"
    assert called.read_text() == "called"
    assert imported.exists()


def test_the_cli_runs_a_file_with_imports_switched_off(tmp_path: Path, importable: Path) -> None:
    imported, called = tmp_path / "imported", tmp_path / "called"
    marking_module(importable, "lw_sec_cli", imported)
    workflow = tmp_path / "file.json"
    workflow.write_text(json.dumps(attack("lw_sec_cli:touch", {"path": str(called)})))
    env = {"PYTHONPATH": os.pathsep.join([str(importable), os.environ.get("PYTHONPATH", "")])}

    refused = cli(tmp_path / "data", "--no-import-functions", "run", str(workflow), env=env)
    assert refused.returncode == 3, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.startswith(
        "error: function_not_allowed: workflow 'planned' step 'shell' calls function "
        "'lw_sec_cli:touch', which is not registered, and this runtime imports no function "
        "by name (import_functions=False, --no-import-functions)"
    )
    assert traces(imported, called) == []

    allowed = cli(tmp_path / "data", "run", str(workflow), env=env)
    assert allowed.returncode == 0, allowed.stderr
    assert json.loads(allowed.stdout) == "done"
    assert called.read_text() == "called"


def test_a_function_not_allowed_is_a_config_error() -> None:
    error = FunctionNotAllowedError("refused", step_path="shell", function="os:system")
    assert isinstance(error, ConfigError)
    assert (error.code, error.step_path, error.function) == (
        "function_not_allowed",
        "shell",
        "os:system",
    )
