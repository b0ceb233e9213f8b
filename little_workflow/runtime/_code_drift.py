"""Code drift of code-first runs: what a resume finds changed in the code a run pinned.

What is pinned: the workflow's source hash in ``RunStarted``, each step's in
``code.pinned`` (``_code_pins``).

**Drift.** Before a resume runs anything, ``code_changes`` compares each pinned hash with
the code at hand: the workflow's, and each pinned step's, found by its qualified name
(a ``@step`` decorated in this process, else the attribute of its module if that module
is loaded; a loaded module that lacks it shows ``(missing)``). A step defined inside a
function, or in a module nothing imported yet, cannot be found before the body runs and
is not compared. By default a change is accepted, as the issue asks (the replay still
checks that the log fits the new code, ``NonDeterminismError`` otherwise): one warning
line (logger ``little_workflow.code``, which the command line prints on stderr) and a
``code.drifted`` event, recorded first thing in the resumed pass (``RecordingDrift``),
whose new hashes the run pins from then on. ``on_code_drift="refuse"`` raises
``CodeDriftError`` instead, before anything is written.

**Agent sessions.** ``check_sessions`` compares every unfinished session of the run, and of
its unfinished sub-runs, with the configuration at hand, from what its
``harness.session.started`` records (the slot's name and the tools), before the body
runs. Checking each session only when the body reaches it is not enough: a body whose
branches run at once would start new sessions under the changed configuration in one
branch while another branch reaches its drifted session.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

from little_workflow.codec import JsonValue
from little_workflow.errors import CodeDriftError, ConfigError
from little_workflow.events import CodeChange, CodeDrifted
from little_workflow.harness._manifest import build_manifest, drift_error, manifest_hash
from little_workflow.runtime._code_api import (
    CODE_VERSION_PREFIX,
    WorkflowSpec,
    load_workflow_function,
    registered_step,
    workflow_spec,
)
from little_workflow.runtime._code_pins import code_hash
from little_workflow.runtime._core import DurableRun
from little_workflow.runtime._host import RunHost
from little_workflow.runtime._launch import FrontEnd
from little_workflow.runtime._state import RunState, SessionRecord, fold, unfinished_sub_runs
from little_workflow.runtime._waits import ASK_USER

__all__ = [
    "CodeDrift",
    "RecordingDrift",
    "check_sessions",
    "code_changes",
    "resume_checks",
]

_log = logging.getLogger("little_workflow.code")
_MISSING = "(missing)"
#: What a resume does when the code changed: go on with it, or refuse.
CodeDrift = Literal["accept", "refuse"]


def _current(qualified: str) -> str | None:
    """The hash of the step named ``qualified`` in the code at hand; ``None`` if it cannot
    be found before the body runs (see the module docstring)."""
    function = registered_step(qualified)
    if function is None:
        module_name, _, attribute = qualified.partition(":")
        module = sys.modules.get(module_name)
        if module is None or not attribute or "<locals>" in attribute:
            return None
        target: object = module
        for part in attribute.split("."):
            target = getattr(target, part, None)
            if target is None:
                return _MISSING
        if not callable(target):
            return _MISSING
        function = target
    return code_hash(function)


def code_changes(state: RunState, spec: WorkflowSpec) -> list[CodeChange]:
    """What changed in the code ``state``'s run pinned, the workflow's first."""
    changes: list[CodeChange] = []
    pinned = state.code_workflow_hash or state.definition_hash
    if pinned and spec.source_hash and pinned != spec.source_hash:
        changes.append(
            CodeChange(kind="workflow", name=spec.qualified, old=pinned, new=spec.source_hash)
        )
    for name, old in state.code.items():
        new = _current(name)
        if new and old and new != old:
            changes.append(CodeChange(kind="step", name=name, old=old, new=new))
    return changes


def _listed(changes: list[CodeChange], separator: str) -> str:
    return separator.join(
        f'{change.kind} {change.name}: "{change.old}" → "{change.new}"' for change in changes
    )


def code_drift_error(run_id: str, changes: list[CodeChange]) -> CodeDriftError:
    """The ``CodeDriftError`` of a strict resume, in ``CapabilityDriftError``'s form."""
    lines = [
        f"Run {run_id!r} was started with different code.",
        "",
        "Changes detected:",
        "- " + _listed(changes, "\n- "),
        "",
        "To go on with the new code (as long as it replays the log), resume without "
        "--on-code-drift refuse (Runtime(on_code_drift='accept')).",
        "To resume cleanly, restore the prior code.",
        "To start fresh, run with a new runId.",
    ]
    return CodeDriftError(
        "\n".join(lines),
        run_id=run_id,
        changes=[(change.name, change.old, change.new) for change in changes],
    )


def _manifest_now(host: RunHost, session: SessionRecord) -> dict[str, JsonValue]:
    """``session``'s manifest with the configuration at hand (its slot and tools)."""
    assert session.slot is not None
    recorded = session.manifest
    entries = recorded.get("tools")
    tools = [
        entry["name"]
        for entry in (entries if isinstance(entries, list) else [])
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    ]
    listed = recorded.get("availableWorkflows")
    # An orchestrator's workflows are the body's own, checked when the body offers them.
    workflows = [
        (str(entry.get("name")), str(entry.get("definitionHash")))
        for entry in (listed if isinstance(listed, list) else [])
        if isinstance(entry, dict)
    ]
    slot = host.model_slots.get(session.slot)
    registry = host.toolset.registry
    hashes = {
        str(name): (registry.get(str(name)).schema_hash if name in registry else _MISSING)
        for name in tools
    }
    if ASK_USER in hashes:
        # The built-in ask_user (``ctx.agent(ask_user=True)``) shadows a registered one.
        from little_workflow.runtime._ask_user import ask_user_tool

        built_in = ask_user_tool().schema_hash
        if any(
            isinstance(entry, dict)
            and entry.get("name") == ASK_USER
            and entry.get("schemaHash") == built_in
            for entry in (entries if isinstance(entries, list) else [])
        ):
            hashes[ASK_USER] = built_in
    return build_manifest(
        role=session.role,
        model_slot_id=slot.slot_id if slot is not None else _MISSING,
        model_options=slot.options.identity() if slot is not None else None,
        tools=hashes,
        available_workflows=workflows,
    )


async def check_sessions(host: RunHost, state: RunState, depth: int = 0) -> None:
    """``CapabilityDriftError`` if an unfinished session of the run (or of a sub-run it
    would resume) was started with another slot or tools than configured now."""
    for session in state.sessions.values():
        if session.completed or session.manifest_hash is None or session.slot is None:
            continue  # a log without the slot's name: checked when the session is reached
        manifest = _manifest_now(host, session)
        if manifest_hash(manifest) != session.manifest_hash:
            error = drift_error(
                run_id=state.run_id, role=session.role, old=session.manifest, new=manifest
            )
            if error is not None:
                raise error
    if depth >= 32:
        return
    for sub_run_id in unfinished_sub_runs(state):
        records = await host.events.read(sub_run_id)
        if records:
            sub_state = fold(sub_run_id, records)
            if not sub_state.finished:
                await check_sessions(host, sub_state, depth + 1)


async def resume_checks(
    host: RunHost, state: RunState, spec: WorkflowSpec, on_code_drift: CodeDrift
) -> CodeDrifted | None:
    """Everything a resume of ``state`` checks before it runs: its sessions (fail closed),
    then its code; the ``code.drifted`` to record, if the code changed and that is
    accepted (``CodeDriftError`` if it is refused)."""
    await check_sessions(host, state)
    changes = code_changes(state, spec)
    if on_code_drift == "refuse":
        if changes:
            raise code_drift_error(state.run_id, changes)
        await _refuse_in_sub_runs(host, state)
    if not changes:
        return None
    _log.warning(
        "run %r: its code changed since it was pinned; it goes on with the new code as "
        "long as that replays the log (recorded as code.drifted): %s",
        state.run_id,
        _listed(changes, "; "),
    )
    return CodeDrifted(changes=changes)


async def _refuse_in_sub_runs(host: RunHost, state: RunState, depth: int = 0) -> None:
    """``CodeDriftError`` for a code-first sub-run this resume would continue whose code
    changed: refused here, before the parent writes anything, not when it is reached."""
    if depth >= 32:
        return
    for sub_run_id in unfinished_sub_runs(state):
        records = await host.events.read(sub_run_id)
        if not records:
            continue
        sub_state = fold(sub_run_id, records)
        version = sub_state.workflow_version_id
        if sub_state.finished or not version.startswith(CODE_VERSION_PREFIX):
            continue
        try:
            function = load_workflow_function(version[len(CODE_VERSION_PREFIX) :])
        except ConfigError:
            continue  # the sub-run's own resume says it cannot be imported
        spec = workflow_spec(function)
        changes = [] if spec is None else code_changes(sub_state, spec)
        if changes:
            raise code_drift_error(sub_run_id, changes)
        await _refuse_in_sub_runs(host, sub_state, depth + 1)


class RecordingDrift:
    """A front end that records an accepted ``code.drifted`` before the body's pass."""

    def __init__(self, front: FrontEnd, drifted: CodeDrifted) -> None:
        self.front = front
        self.drifted = drifted

    @property
    def run(self) -> DurableRun:
        """The pass's core."""
        return self.front.run

    async def execute(self) -> JsonValue:
        """Record the drift (write-behind: it rides with the first commit), then run."""
        await self.front.run.append([self.drifted], sync=False)
        return await self.front.execute()
