"""Capability manifests: what a harness session was started with, and how it drifted.

Every session records a manifest in its ``harness.session.started`` event: the model slot
it calls (by model id), the tools it offers (each with its schema hash) and, for an
orchestrator, the workflows it may start (each with its definition hash). On resume the
manifest is computed again from the configuration at hand; any difference raises
``CapabilityDriftError`` before any model or tool is called, with one line per changed
field::

    Run 'run_abc123' was started with a different orchestrator config.

    Changes detected:
    - orchestratorModelSlotId: "gpt-5" → "gpt-4o-mini"
    - availableWorkflows[1].definitionHash: "sha256:def456" → "sha256:def789"
      (candidate.scoring workflow definition changed)

    To resume cleanly, restore the prior state.
    To start fresh, run with a new runId.
    To keep the work done before the first changed step, fork at 'boss':
      little-workflow fork run_abc123 --at boss

The last line is added when the runtime knows where the resumed run would have to be
forked (the first step its walk cannot replay: the drifted session's, or the step whose
sub-run holds it).

Drift is fail-closed: replaying recorded model answers into a session whose tools or
model changed would continue a conversation the new configuration never had.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from little_workflow.codec import JsonValue, sha256_digest
from little_workflow.errors import CapabilityDriftError

__all__ = ["Change", "build_manifest", "diff_manifests", "drift_error", "manifest_hash"]

_ABSENT = object()


def build_manifest(
    *,
    role: str,
    model_slot_id: str,
    tools: Mapping[str, str],
    available_workflows: Sequence[tuple[str, str]] = (),
    model_options: Mapping[str, JsonValue] | None = None,
) -> dict[str, JsonValue]:
    """The manifest of a session with ``role`` (``worker``, ``orchestrator``, ``planner``, ...).

    ``tools`` maps tool names to schema hashes (in the order they are offered);
    ``available_workflows`` lists ``(name, definition hash)`` for an orchestrator;
    ``model_options`` the slot's request options that are set (``ModelOptions.identity``),
    recorded only when there are some, so a manifest from before them is unchanged.
    """
    manifest: dict[str, JsonValue] = {
        "role": role,
        f"{role}ModelSlotId": model_slot_id,
        "tools": [{"name": name, "schemaHash": digest} for name, digest in tools.items()],
    }
    if model_options:
        manifest[f"{role}ModelOptions"] = dict(model_options)
    if role == "orchestrator":
        manifest["availableWorkflows"] = [
            {"name": name, "definitionHash": digest} for name, digest in available_workflows
        ]
    return manifest


def manifest_hash(manifest: Mapping[str, JsonValue]) -> str:
    """``sha256:`` of the manifest's canonical JSON."""
    return sha256_digest(dict(manifest))


@dataclass(frozen=True, slots=True)
class Change:
    """One changed manifest field: its path, old and new value, and what it means."""

    path: str
    old: object
    new: object
    note: str | None = None


def _given(value: object) -> object:
    return "(absent)" if value is _ABSENT else value


def _shown(value: object) -> str:
    if value is _ABSENT:
        return "(absent)"
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _note(path: str, old: object, new: object) -> str | None:
    # "availableWorkflows[1].definitionHash" of an entry named "candidate.scoring".
    for field_name, what, noun in (
        ("availableWorkflows", "workflow definition", "definitionHash"),
        ("tools", "tool schema", "schemaHash"),
    ):
        if path.startswith(f"{field_name}[") and path.endswith(f".{noun}"):
            name = next(
                (
                    entry.get("name")
                    for entry in (old, new)
                    if isinstance(entry, dict) and isinstance(entry.get("name"), str)
                ),
                None,
            )
            return f"({name} {what} changed)" if name else None
    return None


def diff_manifests(old: JsonValue, new: JsonValue, path: str = "") -> list[Change]:
    """Every field that differs between two manifests, by its path (``tools[1].schemaHash``)."""
    if isinstance(old, dict) and isinstance(new, dict):
        changes: list[Change] = []
        for key in [*old, *(key for key in new if key not in old)]:
            child = f"{path}.{key}" if path else key
            before, after = old.get(key, _ABSENT), new.get(key, _ABSENT)
            if before is _ABSENT or after is _ABSENT:
                changes.append(Change(child, before, after))
            else:
                changes.extend(diff_manifests(before, after, child))  # type: ignore[arg-type]
        return changes
    if isinstance(old, list) and isinstance(new, list):
        changes = []
        for index in range(max(len(old), len(new))):
            child = f"{path}[{index}]"
            if index >= len(old) or index >= len(new):
                before = old[index] if index < len(old) else _ABSENT
                after = new[index] if index < len(new) else _ABSENT
                changes.append(Change(child, before, after))
                continue
            entry_changes = diff_manifests(old[index], new[index], child)
            changes.extend(
                Change(
                    change.path, change.old, change.new, _note(change.path, old[index], new[index])
                )
                for change in entry_changes
            )
        return changes
    return [] if old == new else [Change(path, old, new)]


def drift_error(
    *,
    run_id: str,
    role: str,
    old: Mapping[str, JsonValue],
    new: Mapping[str, JsonValue],
    fork: tuple[str, str] | None = None,
) -> CapabilityDriftError | None:
    """The ``CapabilityDriftError`` for a session started with ``old``, resumed with ``new``.

    ``fork`` is ``(run id, step path)``: the run that was resumed (a sub-run's parent,
    for a drift inside the sub-run) and where forking it keeps the most work.
    ``None`` when they are the same.
    """
    changes = diff_manifests(dict(old), dict(new))
    if not changes:
        return None
    lines = [
        f"Run {run_id!r} was started with a different {role} config.",
        "",
        "Changes detected:",
    ]
    for change in changes:
        lines.append(f"- {change.path}: {_shown(change.old)} → {_shown(change.new)}")
        if change.note:
            lines.append(f"  {change.note}")
    lines += [
        "",
        "To resume cleanly, restore the prior state.",
        "To start fresh, run with a new runId.",
    ]
    if fork is not None:
        fork_run_id, at = fork
        lines.append(f"To keep the work done before the first changed step, fork at {at!r}:")
        lines.append(f"  little-workflow fork {shlex.quote(fork_run_id)} --at {shlex.quote(at)}")
    return CapabilityDriftError(
        "\n".join(lines),
        run_id=run_id,
        scope=role,
        # A field one side lacks is "(absent)" there, as the message shows it: the
        # sentinel object is this module's, not something a caller can compare with.
        changes=[(change.path, _given(change.old), _given(change.new)) for change in changes],
        fork_at=None if fork is None else fork[1],
    )
