"""Records read back from a data directory or a store, written by someone hostile (or by a
disk that flipped bits): harness snapshots and ledger entries, outer-loop manifests,
subprocess manifests and status records, lock files, artifact manifests, IPC frames.
Each read ends in a valid value or a typed error naming the record; never another
exception, never a hang."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from little_workflow.artifacts._manifest import ArtifactManifest
from little_workflow.durable import FileLock, StepLedger, create_checkpoint_store, snapshot_key
from little_workflow.durable._ledger import DEFAULT_STEP_LEDGER_RETENTION, ledger_key
from little_workflow.errors import CorruptDataError, FrameError, LittleWorkflowError
from little_workflow.harness import AgentHarness, HarnessEnvironment, HarnessStorage, run_code
from little_workflow.ids import is_valid_id
from little_workflow.platform._local import ChildManifest, _envelope, _parse_status
from little_workflow.platform._proc import ProcessIdentity, is_alive
from little_workflow.platform.ipc import decode_json
from little_workflow.platform.ipc._protocol import parse_frame
from little_workflow.runtime._outer import read_manifest
from little_workflow.storage import create_in_memory_storage
from tests.hostile.support import FUZZ, expect, json_values

#: Values that break naive readers: huge and negative numbers, wrong types, deep nesting.
hostile_values = (
    json_values
    | st.sampled_from([10**400, -(10**400), 2**63, 2**70, -1, 0, 1e308, -1e308, "", "\x00"])
    | st.just(json.loads("[" * 450 + "]" * 450))
)


def _mutated(base: dict[str, Any], changes: dict[str, Any], drop: list[str]) -> dict[str, Any]:
    return {k: v for k, v in {**base, **changes}.items() if k not in drop}


def mutations(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from(sorted(base))
    return st.builds(
        _mutated,
        st.just(base),
        st.dictionaries(keys | st.text(max_size=6), hostile_values, max_size=3),
        st.lists(keys, max_size=2),
    )


# --- subprocess manifests and status records ---------------------------------------

KEY = "subprocess:handle:h1"
CHILD_MANIFEST: dict[str, Any] = {
    "version": 1, "handleId": "h1", "stepId": "s", "serializedInput": "null",
    "executionId": None, "target": "m:f", "runner": None, "cwd": None, "metadata": {},
    "transport": None, "token": None, "process": {"pid": 1, "startTime": None},
    "host": None, "logPath": None, "createdAt": 1.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"createdAt": 10**400}, "metadata or createdAt is bad"),  # was OverflowError
        ({"createdAt": -(10**400)}, "metadata or createdAt is bad"),
        ({"createdAt": math.inf}, "metadata or createdAt is bad"),
        ({"process": {"pid": 2**70, "startTime": None}}, "process or handleId is bad"),
        ({"process": {"pid": 2**31, "startTime": 5}}, "process or handleId is bad"),
        ({"handleId": "../h1"}, "process or handleId is bad"),
        ({"target": 7}, "target is not a string"),
    ],
)
def test_a_bad_subprocess_manifest_is_corrupt_data_naming_its_key(
    changes: dict[str, Any], problem: str
) -> None:
    with pytest.raises(CorruptDataError) as caught:
        ChildManifest.from_json({**CHILD_MANIFEST, **changes}, key=KEY)
    assert caught.value.code == "corrupt_data"
    assert caught.value.message == f"subprocess manifest {KEY!r}: {problem}"


@FUZZ
@given(mutations(CHILD_MANIFEST))
def test_fuzzed_subprocess_manifests(value: dict[str, Any]) -> None:
    try:
        manifest = ChildManifest.from_json(value, key=KEY)
    except LittleWorkflowError as exc:
        expect(KEY in exc.message, exc)
        return
    if manifest.process is not None:
        assert isinstance(is_alive(manifest.process), bool)  # was OverflowError for 2**70
    assert ChildManifest.from_json(manifest.to_json(), key=KEY) == manifest


@FUZZ
@given(mutations({"version": 1, "state": "running", "transport": None, "process": {"pid": 1}}))
def test_fuzzed_subprocess_status_records(value: dict[str, Any]) -> None:
    try:
        status = _parse_status(value, "subprocess:status:h1")
    except CorruptDataError as exc:
        expect("subprocess:status:h1" in exc.message, exc)
        return
    if status.process is not None:
        assert isinstance(is_alive(status.process), bool)


@FUZZ
@given(hostile_values)
def test_process_identities_from_records_can_always_be_checked(value: Any) -> None:
    identity = ProcessIdentity.from_json({"pid": value, "startTime": None})
    assert identity is None or isinstance(is_alive(identity), bool)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("frame", ["[" * 100_000, '{"a":' * 100_000, "1e999999", "\ud800"])
def test_a_stored_child_frame_that_is_not_json_is_corrupt_data(frame: str) -> None:
    try:
        value = _envelope(frame, "h1")
    except CorruptDataError as exc:  # was RecursionError for 100,000 levels
        expect(exc.message.startswith("child 'h1' sent a frame that is not "), exc)
        return
    raise AssertionError(f"accepted {value!r}")


# --- lock files ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"[" * 100_000,  # was RecursionError
        json.dumps({"owner": {"pid": 1, "startTime": None}, "acquiredAt": 1e300}).encode(),
        json.dumps({"owner": {"pid": 2**70, "startTime": None}, "acquiredAt": 1.0}).encode(),
        json.dumps({"owner": {"pid": 1, "startTime": None}, "acquiredAt": 10**400}).encode(),
        b"\xff\xfe",
        b"null",
    ],
)
def test_a_hostile_lock_file_has_no_owner(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run-x.lock"
    path.write_bytes(content)
    assert FileLock(path, purpose="run x").owner() is None


def test_a_sane_lock_file_names_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "run-x.lock"
    path.write_text(json.dumps({"owner": {"pid": 1, "startTime": None}, "acquiredAt": 1.0}))
    owner = FileLock(path, purpose="run x").owner()
    assert owner is not None
    assert owner.describe().startswith("pid 1 (")


# --- artifact manifests --------------------------------------------------------------

ARTIFACT: dict[str, Any] = {
    "format": 1, "artifactId": "art_x", "name": "r.txt", "sha256": "0" * 64, "size": 2,
    "mediaType": "text/plain", "runId": None, "stepPath": None, "createdAt": 1.0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "problem"),
    [
        ({"name": "../escaped.txt"}, "it contains a path separator"),
        ({"name": "/etc/passwd"}, "it contains a path separator"),
        ({"name": "..\\x"}, "it contains a path separator"),
        ({"name": ".."}, "it is '..'"),
        ({"name": "a\x00b"}, "control character"),
        ({"mediaType": "text/html\r\nSet-Cookie: x"}, "control character"),
        ({"createdAt": 10**400}, "malformed"),  # was OverflowError
    ],
)
def test_a_bad_artifact_manifest_is_corrupt_data(changes: dict[str, Any], problem: str) -> None:
    with pytest.raises(CorruptDataError, match=problem) as caught:
        ArtifactManifest.from_json({**ARTIFACT, **changes}, source="'m.json'")
    assert caught.value.message.startswith("artifact manifest 'm.json'")


@FUZZ
@given(mutations(ARTIFACT))
def test_fuzzed_artifact_manifests(value: dict[str, Any]) -> None:
    try:
        manifest = ArtifactManifest.from_json(value, source="'m.json'")
    except LittleWorkflowError as exc:
        expect("'m.json'" in exc.message, exc)
        return
    assert "/" not in manifest.name
    assert manifest.name not in ("", ".", "..")


# --- outer-loop manifests ------------------------------------------------------------

OUTER: dict[str, Any] = {
    "outerLoopId": "ol1", "goal": {"workflowDefinitionHash": "sha256:x"}, "maxCycles": 3,
    "cycles": [
        {"cycleNumber": 1, "runId": "run_1", "workflowVersionId": "v", "status": "completed"}
    ],
}  # fmt: skip


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "content",
    [b"[" * 100_000, b'{"outerLoopId":' * 100_000, b"\xff", b"", b'{"outerLoopId": NaN}'],
)
def test_an_unreadable_outer_loop_manifest_is_corrupt_data(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "ol1.json"
    path.write_bytes(content)
    with pytest.raises(CorruptDataError) as caught:
        read_manifest(path)
    assert caught.value.message.startswith(f"the outer-loop manifest {str(path)!r} is not valid (")
    assert path.read_bytes() == content  # left unchanged


@pytest.mark.parametrize("run_id", ["../../escape", "/etc/x", "run_1/../x", "a\x00", ".."])
@pytest.mark.parametrize("field", ["pendingCycleRunId", "cycles.0.runId"])
def test_a_manifest_run_id_that_could_leave_the_data_directory_is_corrupt_data(
    tmp_path: Path, field: str, run_id: str
) -> None:
    # Before: read as valid; the resumed cycle then failed with a bare InvalidIdError
    # that did not name the manifest.
    value = json.loads(json.dumps(OUTER))
    if field == "pendingCycleRunId":
        value["pendingCycleRunId"] = run_id
    else:
        value["cycles"][0]["runId"] = run_id
    path = tmp_path / "ol1.json"
    path.write_text(json.dumps(value))
    with pytest.raises(CorruptDataError) as caught:
        read_manifest(path)
    assert f"({field}: {run_id!r} is not a valid run id)" in caught.value.message
    assert str(path) in caught.value.message


@FUZZ
@given(mutations(OUTER))
def test_fuzzed_outer_loop_manifests(
    tmp_path_factory: pytest.TempPathFactory, value: dict[str, Any]
) -> None:
    path = tmp_path_factory.mktemp("ol") / "ol1.json"
    path.write_text(json.dumps(value))
    try:
        manifest = read_manifest(path)
    except CorruptDataError as exc:
        expect(str(path) in exc.message, exc)
        return
    assert manifest is not None
    assert manifest.outer_loop_id == "ol1"
    assert all(is_valid_id(cycle.run_id) for cycle in manifest.cycles)
    assert [c.cycle_number for c in manifest.cycles] == list(range(1, len(manifest.cycles) + 1))


# --- harness snapshots and the step ledger -------------------------------------------

SNAPSHOT: dict[str, Any] = {
    "schemaVersion": 2, "executionId": "exec_1", "threadId": None, "resourceId": None,
    "frontier": [{"stepId": "a", "input": 1}], "layers": {"history": {"window": 3}},
    "cwd": {"current": "/tmp", "previous": None}, "askUser": [{"id": "q", "createdAt": 1.0}],
    "itemLog": {"items": [{"message": {"role": "user", "content": "hi"}}]},
    "capturedAt": "2026-01-01T00:00:00Z",
}  # fmt: skip


def _harness(storage: Any) -> AgentHarness:
    store = create_checkpoint_store(storage=storage)
    return AgentHarness(
        name="h",
        agent_graph=run_code(lambda ctx, value: value, id="echo"),
        environment=HarnessEnvironment(storage=HarnessStorage(checkpoint_store=store)),
    )


async def test_a_valid_snapshot_restores() -> None:
    storage = create_in_memory_storage()
    await storage.set(snapshot_key("exec_1"), SNAPSHOT)
    ctx = await _harness(storage).restore("exec_1")
    assert ctx is not None
    assert [m.content for m in ctx.items.messages] == ["hi"]


@FUZZ
@given(
    mutations(SNAPSHOT),
    st.sampled_from(["itemLog", "layers", "askUser", "frontier", "cwd"]),
    hostile_values,
)
async def test_fuzzed_snapshots_restore_or_fail_typed(
    value: dict[str, Any], field: str, inner: Any
) -> None:
    if isinstance(value.get(field), dict):
        value[field] = {**value[field], "items" if field == "itemLog" else "history": inner}
    storage = create_in_memory_storage()
    try:
        await storage.set(snapshot_key("exec_1"), value)
    except LittleWorkflowError:
        return  # the store refuses it (too deep): it cannot be read back either
    try:
        ctx = await _harness(storage).restore("exec_1")
    except LittleWorkflowError as exc:
        expect("exec_1" in exc.message, exc)
        return
    assert ctx is not None
    assert ctx.id == "exec_1"


@FUZZ
@given(
    st.lists(hostile_values | mutations({"path": "echo", "identity": "i", "output": 1}), max_size=4)
)
async def test_fuzzed_ledger_entries_load_or_fail_typed(entries: list[Any]) -> None:
    storage = create_in_memory_storage()
    for seq, entry in enumerate(entries, start=1):
        if entry is not None:
            await storage.set(ledger_key("exec_1", seq), entry)
    try:
        ledger = await StepLedger.load(storage, "exec_1", DEFAULT_STEP_LEDGER_RETENTION)
    except CorruptDataError as exc:
        expect("execution:exec_1:ledger:" in exc.message, exc)
        return
    assert len(ledger) <= len(entries)


# --- IPC frames ----------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 100_000, "[" * 100_000])
def test_100k_levels_in_a_websocket_message_are_a_frame_error(body: bytes | str) -> None:
    with pytest.raises(FrameError, match="nested too deeply"):
        decode_json(body)


@FUZZ
@given(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["hello", "message", "bye", "durable", "durableResume", "durableAck"]
            )
            | hostile_values
        },
        optional=dict.fromkeys(
            (
                "version",
                "token",
                "payload",
                "code",
                "reason",
                "seq",
                "frame",
                "ackedThrough",
                "throughSeq",
            ),
            hostile_values,
        ),
    ),
    st.sampled_from([1, 2]),
)
def test_fuzzed_protocol_frames_parse_or_fail_with_a_frame_error(
    obj: dict[str, Any], version: int
) -> None:
    try:
        parse_frame(obj, version=version)
    except LittleWorkflowError as exc:
        expect(isinstance(exc, FrameError), exc)
