"""Owner-only files: the data directory, all it holds, and IPC sockets, whatever the umask.

One real workflow (steps, a tool step, an agent with the artifact and memory tools, large
payloads stored as blobs), a harness with a file checkpoint store nested in the data
directory (snapshot and ledger), a held run lock and an IPC Unix socket: then every
directory under the data directory must be 0700 and every file and socket 0600, under
``umask 0`` (where the default modes would let anyone write) and ``umask 022``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_workflow.durable._locks import FileLock
from little_workflow.errors import DataDirPermissionsError
from little_workflow.platform.ipc import DurableServer, IpcAddress, create_durable_outbound_queue
from little_workflow.runtime import DataDir, Runtime
from little_workflow.storage import open_storage
from tests.artifacts.flows import WORKFLOW, setup
from tests.harness.durable_support import durable_harness
from tests.runtime.support import cli


@pytest.fixture(params=[0o000, 0o022], ids=["umask-000", "umask-022"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _loose(root: Path) -> list[str]:
    """Everything under ``root`` (itself included) not 0700 (directories) or 0600 (files)."""
    found = []
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        mode = stat.S_IMODE(info.st_mode)
        wanted = 0o700 if stat.S_ISDIR(info.st_mode) else 0o600
        if mode != wanted:
            found.append(f"{path.relative_to(root.parent)} {mode:o}")
    return found


def _kinds(root: Path) -> set[str]:
    """What the walk saw, so the test knows it walked a populated directory."""
    seen = set()
    for path in root.rglob("*"):
        mode = path.lstat().st_mode
        if stat.S_ISSOCK(mode):
            seen.add("socket")
        elif path.name.endswith(("-wal", "-shm")):
            seen.add(path.name.rsplit("-", 1)[1])
        elif stat.S_ISREG(mode):
            seen.add(path.relative_to(root).parts[0])
    return seen


async def _checkpointed_harness(data: Path) -> None:
    """An agent with tools, its snapshot and step ledger in ``data/checkpoints/harness``."""
    storage = await open_storage(f"file://{data}/checkpoints/harness")
    try:
        harness = durable_harness(storage)
        ctx = harness.create_context(id="exec_modes")
        assert await harness.execute(ctx, "Ada") == "Ada scores 70"
        assert await storage.list("execution:exec_modes:ledger:")
    finally:
        await storage.close()


async def test_everything_in_the_data_directory_is_owner_only(
    tmp_path: Path, umask: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_TEST_CALLS", str(tmp_path / "calls"))
    # Nested below a directory that does not exist yet: every level the program makes
    # must be private, not only the last.
    data = tmp_path / "home" / "project" / ".little-workflow"
    configured = setup()
    async with Runtime(data, **configured.runtime_options(), inline_payload_bytes=64) as rt:
        result = await rt.run(WORKFLOW, {"topic": "modes"}, run_id="run_modes")
        assert result.output["writer"] == "recalled: Draft v1"  # type: ignore[index, call-overload]
        await _checkpointed_harness(data)
        # Blobs up to 64 KiB are rows of the database: a larger one is a file.
        await rt.blobs.put(os.urandom(70_000))
        lock = FileLock(DataDir.at(data).lock_path("run", "run_held"), purpose="test")
        assert lock.try_acquire()
        queue = await create_durable_outbound_queue(
            storage=await open_storage(f"file://{data}/ipc-queue"), socket_path="modes"
        )
        socket_path = tmp_path / "s.sock"  # sun_path is short: beside the data directory
        async with DurableServer(queue, IpcAddress.unix(socket_path)) as server:
            await server.publish("frame one")
            # While the database is open (its -wal and -shm exist) and the lock is held.
            assert _loose(data) == []
            assert {"artifacts", "blobs", "memory", "checkpoints", "locks", "ipc-queue"} | {
                "wal",
                "shm",
            } <= _kinds(data)
            assert stat.S_IMODE(socket_path.lstat().st_mode) == 0o600
            assert stat.S_ISSOCK(socket_path.lstat().st_mode)
        lock.release()
    assert _loose(data) == []
    # The parents the program had to make on the way are private too.
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700


def _loosen(root: Path) -> None:
    """What an earlier version, or a hand, left: 0755 directories and 0644 files."""
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o755 if path.is_dir() else 0o644)


async def test_a_loose_data_directory_is_made_private_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LW_TEST_CALLS", str(tmp_path / "calls"))
    data = tmp_path / "data"
    configured = setup()
    async with Runtime(data, **configured.runtime_options(), inline_payload_bytes=64) as rt:
        await rt.run(WORKFLOW, {"topic": "loose"}, run_id="run_loose")
    _loosen(data)
    assert len(_loose(data)) > 10  # directories and files: the database, blobs, artifacts
    async with Runtime(data, **configured.runtime_options()) as rt:
        assert _loose(data) == []
        # And it is the same store: the run is still there.
        assert (await rt.events.get_run("run_loose")) is not None


def _foreign_loose_directory(tmp_path: Path) -> Path:
    """A real directory open to others (0755) that this process does not own.

    As root: one made here and given to ``nobody``. Otherwise: ``/usr/share``, which
    root owns (nothing is created in it: the data directory is refused first).
    """
    if os.geteuid() == 0:
        foreign = tmp_path / "foreign"
        foreign.mkdir()
        foreign.chmod(0o755)
        os.chown(foreign, 65534, 65534)
        return foreign
    shared = Path("/usr/share")
    info = shared.stat()
    if info.st_uid == os.geteuid() or not info.st_mode & 0o077:
        pytest.skip("no directory open to others and owned by another user")
    return shared


async def test_a_loose_data_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    data = _foreign_loose_directory(tmp_path)
    before = sorted(path.name for path in data.iterdir())
    with pytest.raises(DataDirPermissionsError) as refused:
        async with Runtime(data):
            pass
    message = str(refused.value)
    assert refused.value.path == str(data)
    assert str(data) in message
    assert f"chmod -R go-rwx {data}" in message
    assert stat.S_IMODE(data.stat().st_mode) == 0o755  # not changed
    assert sorted(path.name for path in data.iterdir()) == before  # nothing created
    # The CLI: one line naming the path and the command, exit code 4 (storage).
    shown = cli(data, "runs")
    assert shown.returncode == 4, shown.stderr
    assert f"chmod -R go-rwx {data}" in shown.stderr
