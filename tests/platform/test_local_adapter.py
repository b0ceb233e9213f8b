"""What only the local adapter has: manifests, pid identity, detached children, records.

The behaviour every adapter shares is in ``test_subprocess_conformance``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from little_workflow import codec
from little_workflow.errors import (
    ConfigError,
    CorruptDataError,
    SchemaVersionError,
    SubprocessError,
)
from little_workflow.platform import (
    LocalSubprocessAdapter,
    ProcessIdentity,
    SpawnSpec,
    create_local_subprocess_adapter,
    is_alive,
    manifest_key,
    process_start_time,
)
from little_workflow.platform._local import status_key
from little_workflow.storage import FileStorage, create_file_storage, create_in_memory_storage

TARGETS = "little_workflow.testing.subprocess_targets"
REPO = Path(__file__).resolve().parents[2]


def _adapter(tmp_path: Path, **options: Any) -> tuple[LocalSubprocessAdapter, FileStorage]:
    storage = create_file_storage(root=tmp_path / "subprocess")
    return create_local_subprocess_adapter(storage=storage, **options), storage


def _hold(tmp_path: Path, **fields: Any) -> SpawnSpec:
    job = {"release": str(tmp_path / "release"), "starts": str(tmp_path / "starts")}
    return SpawnSpec(target=f"{TARGETS}:hold", input=job, **fields)


async def _until(check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_the_manifest_records_what_a_new_host_needs(tmp_path: Path) -> None:
    adapter, storage = _adapter(tmp_path)
    spec = _hold(
        tmp_path,
        step_id="research",
        execution_id="exec_parent",
        cwd=str(tmp_path / "work"),
        metadata={"owner": "test"},
    )
    handle = await adapter.spawn(spec)
    try:
        manifest = await storage.get(manifest_key(handle.handle_id))
        assert isinstance(manifest, dict)
        assert manifest["handleId"] == spec.handle_id
        assert manifest["stepId"] == "research"
        assert manifest["executionId"] == "exec_parent"
        assert codec.loads(manifest["serializedInput"]) == spec.input  # type: ignore[arg-type]
        assert manifest["metadata"] == {"owner": "test"}
        assert manifest["target"] == f"{TARGETS}:hold"
        assert manifest["cwd"] == str(tmp_path / "work")
        # The transport identity: the child's pid with its start time, and its socket.
        process = manifest["process"]
        assert isinstance(process, dict)
        assert process["pid"] == handle.pid != os.getpid()
        assert process["startTime"] == process_start_time(handle.pid or 0)
        transport = manifest["transport"]
        assert isinstance(transport, str)
        assert transport.startswith("unix:")
        socket_path = transport[len("unix:") :]
        assert stat.S_ISSOCK(os.stat(socket_path).st_mode)
        assert stat.S_IMODE(os.stat(socket_path).st_mode) == 0o600
        # The child wrote its own record; its working directory is the spec's.
        status = await storage.get(status_key(handle.handle_id))
        assert isinstance(status, dict)
        assert status["state"] == "running"
        assert os.readlink(f"/proc/{handle.pid}/cwd") == str(tmp_path / "work")
        # Its own session: a signal to this process's group does not reach it.
        assert os.getsid(handle.pid or 0) == handle.pid != os.getsid(0)
    finally:
        (tmp_path / "release").touch()
    assert isinstance(await handle.wait(), dict)
    status = await storage.get(status_key(handle.handle_id))
    assert isinstance(status, dict)
    assert status["state"] == "finished"


async def test_a_dead_child_whose_pid_was_reused_is_reported_dead(tmp_path: Path) -> None:
    adapter, storage = _adapter(tmp_path)
    handle = await adapter.spawn(_hold(tmp_path))
    original = handle.manifest.process
    assert original is not None
    assert original.start_time is not None
    handle.terminate(signal.SIGKILL)
    await _until(lambda: not handle.is_alive())
    # Another process now has the child's pid: as if the kernel had reused it. Rewrite
    # the records so that they name it, with the dead child's start time.
    stranger = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    try:
        await _until(lambda: process_start_time(stranger.pid) is not None)
        reused = ProcessIdentity(pid=stranger.pid, start_time=original.start_time)
        assert reused.start_time != process_start_time(stranger.pid)
        key = manifest_key(handle.handle_id)
        manifest = await storage.get(key)
        assert isinstance(manifest, dict)
        manifest["process"] = dict(reused.to_json())
        await storage.set(key, manifest)
        status = await storage.get(status_key(handle.handle_id))
        assert isinstance(status, dict)
        assert status["state"] == "running"
        status["process"] = dict(reused.to_json())
        await storage.set(status_key(handle.handle_id), status)

        assert not is_alive(reused)
        assert await adapter.list_live() == []
        assert await adapter.reattach(handle.handle_id) is None
        # The same records with the stranger's own start time would name a live process:
        # it is the start time that told them apart.
        manifest["process"] = {"pid": stranger.pid, "startTime": process_start_time(stranger.pid)}
        await storage.set(key, manifest)
        assert [live.handle_id for live in await adapter.list_live()] == [handle.handle_id]
    finally:
        stranger.kill()
        await stranger.wait()


async def test_a_killed_child_is_lost_and_a_terminated_one_failed(tmp_path: Path) -> None:
    adapter, _ = _adapter(tmp_path)
    killed = await adapter.spawn(_hold(tmp_path))
    killed.terminate(signal.SIGKILL)
    with pytest.raises(SubprocessError, match="ended without a result") as caught:
        await killed.wait()
    assert caught.value.code == "child_lost"
    assert await adapter.reattach(killed.handle_id) is None

    terminated = await adapter.spawn(_hold(tmp_path))
    assert terminated.terminate()
    with pytest.raises(SubprocessError, match="Terminated") as failed:
        await terminated.wait()
    assert failed.value.code == "child_failed"
    found = await adapter.reattach(terminated.handle_id)
    assert found is not None
    assert found.failed()


async def test_a_child_outlives_the_adapter_object_and_is_found_again(tmp_path: Path) -> None:
    adapter, _ = _adapter(tmp_path)
    handle = await adapter.spawn(_hold(tmp_path))
    handle_id, pid = handle.handle_id, handle.pid
    del handle, adapter  # the host forgets it entirely; the process runs on
    again, _ = _adapter(tmp_path)
    live = await again.list_live()
    assert [(found.handle_id, found.pid) for found in live] == [(handle_id, pid)]
    (tmp_path / "release").touch()
    result = await live[0].wait()
    assert isinstance(result, dict)
    assert result["pid"] == pid


async def test_a_finished_child_is_found_with_its_result_and_unread_frames(
    tmp_path: Path,
) -> None:
    adapter, _ = _adapter(tmp_path, linger=0.0)
    handle = await adapter.spawn(SpawnSpec(target=f"{TARGETS}:ticker", input={"count": 30}))
    assert await handle.wait() == {"done": 30}  # waiting reads no frame
    await _until(lambda: not handle.is_alive())
    other, _ = _adapter(tmp_path)
    found = await other.reattach(handle.handle_id)
    assert found is not None
    assert not found.is_alive()
    frames = [frame async for _, frame in found.frames()]
    assert frames == [{"i": index} for index in range(30)]
    assert await found.wait() == {"done": 30}
    # Read once: a third host finds the result and nothing left to read.
    third, _ = _adapter(tmp_path)
    last = await third.reattach(handle.handle_id)
    assert last is not None
    assert [frame async for _, frame in last.frames()] == []
    await third.forget(handle.handle_id)
    assert await third.reattach(handle.handle_id) is None
    assert await third.storage.list("") == []  # type: ignore[union-attr]


async def test_corrupt_records_are_reported_not_skipped(tmp_path: Path) -> None:
    adapter, storage = _adapter(tmp_path)
    await storage.set(manifest_key("spawn_bad"), {"version": 1, "handleId": 7})
    with pytest.raises(CorruptDataError, match="spawn_bad"):
        await adapter.list_live()
    await storage.set(manifest_key("spawn_bad"), {"version": 99})
    with pytest.raises(SchemaVersionError, match="version 99"):
        await adapter.reattach("spawn_bad")


async def test_configuration_errors_are_typed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open MemoryStorage"):
        create_local_subprocess_adapter(storage=create_in_memory_storage())
    with pytest.raises(ConfigError, match="unknown transport"):
        create_local_subprocess_adapter(transport="carrier-pigeon")  # type: ignore[arg-type]
    broken = create_local_subprocess_adapter(python=str(tmp_path / "no-python"))
    with pytest.raises(SubprocessError, match="could not start"):
        await broken.spawn(SpawnSpec(target=f"{TARGETS}:describe"))
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)
    unsafe = create_local_subprocess_adapter(runtime_dir=str(tmp_path / "open"))
    with pytest.raises(ConfigError, match="not a private directory") as caught:
        await unsafe.spawn(SpawnSpec(target=f"{TARGETS}:describe"))
    assert caught.value.code == "unsafe_directory"


@pytest.mark.timeout(120)
async def test_a_step_rerun_after_a_host_crash_rebinds_its_running_child(tmp_path: Path) -> None:
    def host(mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.platform.step_host", str(tmp_path), mode],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    first = host("start")
    starts = tmp_path / "starts"
    await _until(lambda: starts.exists() and starts.read_text().count("\n") == 1)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    child_pid = int(starts.read_text().split()[0])
    assert is_alive(ProcessIdentity(pid=child_pid, start_time=process_start_time(child_pid)))

    second = host("resume")
    await asyncio.sleep(1.0)  # let it find the child before the child finishes
    (tmp_path / "release").touch()
    out, err = await asyncio.to_thread(second.communicate, timeout=60)
    assert second.returncode == 0, err
    output = json.loads(out.splitlines()[-1])["output"]
    assert output["pid"] == child_pid
    assert starts.read_text().count("\n") == 1  # the resumed step started no second child


async def test_an_agent_runs_out_of_process_and_streams_its_items(tmp_path: Path) -> None:
    from little_workflow.harness import AgentHarness, HarnessEnvironment, spawn

    adapter, _ = _adapter(tmp_path)
    harness = AgentHarness(
        name="host",
        agent_graph=spawn(
            "tests.harness.spawn_targets:code_graph", "loud", id="child", subprocess=adapter
        ),
        environment=HarnessEnvironment(subprocess=adapter),
    )
    parent = harness.create_context(id="exec_parent")
    workspace = tmp_path / "research-workspace"
    handle = harness.detached_spawn(
        "tests.harness.spawn_targets:echo_harness", "hello", parent, cwd_init=str(workspace)
    )
    frames = [frame async for _, frame in handle.frames()]
    assert await handle.wait() == "echo: hello"
    child = await handle.started()
    assert child is not None
    assert child.execution_id == "exec_parent"
    assert getattr(child, "pid", None) not in (None, os.getpid())
    assert workspace.is_dir()  # created for the child, which ran there
    contents = [item["message"]["content"] for frame in frames for item in frame["items"]]  # type: ignore[index,union-attr]
    assert contents == ["hello", "echo: hello"]
    # A spawn step with the override runs its referenced graph in a child too.
    assert await harness.execute(harness.create_context(), None) == "LOUD"


class _CountingStorage(FileStorage):
    """A real file store that counts its reads, in this test's memory."""

    def __init__(self, root: Path) -> None:
        super().__init__(root=root)
        self.reads: list[str] = []

    async def get(self, key: str) -> Any:
        self.reads.append(f"get {key}")
        return await super().get(key)

    async def get_many(self, keys: Any) -> Any:
        wanted = list(keys)
        self.reads.append(f"get_many {len(wanted)}")
        return await super().get_many(wanted)


async def test_list_live_reads_every_child_in_one_batch(tmp_path: Path) -> None:
    """Three live children: one ``get_many`` for their six records, not six ``get``s."""
    storage = _CountingStorage(tmp_path / "subprocess")
    adapter = create_local_subprocess_adapter(storage=storage)
    handles = [await adapter.spawn(_hold(tmp_path)) for _ in range(3)]
    try:
        storage.reads.clear()
        live = await adapter.list_live()
        assert sorted(h.handle_id for h in live) == sorted(h.handle_id for h in handles)
        assert storage.reads == ["get_many 6"]
        storage.reads.clear()
        found = await adapter.reattach(handles[0].handle_id)
        assert found is not None
        assert found.running()
        assert storage.reads == ["get_many 2"]
    finally:
        for handle in handles:
            handle.terminate(signal.SIGKILL)
        await _until(lambda: not any(h.is_alive() for h in handles))


async def test_a_runtime_dir_too_deep_for_a_socket_path_falls_back_to_a_short_one(
    tmp_path: Path,
) -> None:
    # sun_path holds 107 bytes; a project deep in a home directory passes that with
    # .../runtime/ipc/<digest>. Each deep dir gets its own socket for the same handle id.
    sockets = []
    for branch in ("a", "b"):
        deep = tmp_path / branch / ("d" * 50) / ("e" * 50) / "runtime"
        adapter, storage = _adapter(tmp_path / branch, runtime_dir=str(deep), linger=0.0)
        spec = SpawnSpec(target=f"{TARGETS}:ticker", input={"count": 3}, handle_id="spawn_deep")
        handle = await adapter.spawn(spec)
        manifest = await storage.get(manifest_key("spawn_deep"))
        assert isinstance(manifest, dict)
        address = manifest["transport"]
        assert address.startswith("unix:")
        assert len(address.encode()) <= len("unix:") + 107
        assert not address[len("unix:") :].startswith(str(deep))
        sockets.append(address)
        assert [frame async for _, frame in handle.frames()] == [{"i": i} for i in range(3)]
        assert await handle.wait() == {"done": 3}
        assert (deep / "logs").is_dir()  # only the socket moved
    assert sockets[0] != sockets[1]
