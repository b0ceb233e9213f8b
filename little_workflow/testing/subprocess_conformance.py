"""The conformance suite every ``SubprocessAdapter`` must pass, unchanged.

Use it by subclassing in a test module and providing three fixtures::

    class TestMyAdapter(SubprocessAdapterConformance):
        @pytest.fixture
        def adapter(self):        # a fresh adapter
            ...
        @pytest.fixture
        def reopen(self, adapter):  # () -> a new adapter over the same storage, as a
            ...                     # restarted host would build (a fresh one if none)
        @pytest.fixture
        def durable(self):        # whether children outlive the adapter (storage)
            ...

Targets come from ``little_workflow.testing.subprocess_targets``, which a child
process can import by reference.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from little_workflow.errors import ConfigError, InvalidValueError, SubprocessError
from little_workflow.platform import SpawnSpec, SubprocessAdapter, SubprocessHandle

__all__ = ["TARGETS", "SubprocessAdapterConformance"]

TARGETS = "little_workflow.testing.subprocess_targets"


def _spec(name: str, input: Any = None, **fields: Any) -> SpawnSpec:
    return SpawnSpec(target=f"{TARGETS}:{name}", input=input, **fields)


async def _eventually(check: Callable[[], Any], *, timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("the condition did not become true in time")
        await asyncio.sleep(0.02)


class SubprocessAdapterConformance:
    """Behaviour every adapter shares (see the module docstring for the fixtures)."""

    async def test_spawn_runs_the_target_and_wait_gives_its_result(
        self, adapter: SubprocessAdapter, tmp_path: Path
    ) -> None:
        handle = await adapter.spawn(
            _spec(
                "describe",
                {"x": [1, "two", None]},
                step_id="research",
                execution_id="exec_parent",
                cwd=str(tmp_path),
                metadata={"who": "caller"},
            )
        )
        assert isinstance(handle, SubprocessHandle)
        assert (handle.step_id, handle.execution_id) == ("research", "exec_parent")
        result = await handle.wait()
        assert isinstance(result, dict)
        assert result["input"] == {"x": [1, "two", None]}
        assert result["handle"] == handle.handle_id
        assert (result["step"], result["execution"]) == ("research", "exec_parent")
        assert (result["cwd"], result["metadata"]) == (str(tmp_path), {"who": "caller"})
        assert await handle.wait() == result  # again: the same outcome

    async def test_frames_arrive_in_order_each_once(self, adapter: SubprocessAdapter) -> None:
        handle = await adapter.spawn(_spec("ticker", {"count": 200}))
        frames = [entry async for entry in handle.frames()]
        assert [frame for _, frame in frames] == [{"i": index} for index in range(200)]
        seqs = [seq for seq, _ in frames]
        assert seqs == sorted(set(seqs))
        assert await handle.wait() == {"done": 200}
        assert not handle.is_alive() or await _settles(handle)

    async def test_wait_without_reading_frames_still_gives_the_result(
        self, adapter: SubprocessAdapter
    ) -> None:
        handle = await adapter.spawn(_spec("ticker", {"count": 50}))
        assert await handle.wait() == {"done": 50}

    async def test_a_failing_target_raises_child_failed(self, adapter: SubprocessAdapter) -> None:
        handle = await adapter.spawn(_spec("explode", 7))
        with pytest.raises(SubprocessError, match="cannot handle 7") as caught:
            await handle.wait()
        assert caught.value.code == "child_failed"
        assert caught.value.error_type == "ValueError"
        assert caught.value.handle_id == handle.handle_id

    async def test_a_frame_that_is_not_json_fails_the_child(
        self, adapter: SubprocessAdapter
    ) -> None:
        handle = await adapter.spawn(_spec("emit_bad_frame"))
        with pytest.raises(SubprocessError, match="InvalidValueError"):
            await handle.wait()

    async def test_a_bad_reference_or_input_is_refused_before_anything_starts(
        self, adapter: SubprocessAdapter
    ) -> None:
        with pytest.raises(ConfigError, match="no_such_target"):
            await adapter.spawn(_spec("no_such_target"))
        with pytest.raises(ConfigError, match=r"package\.module:attr"):
            await adapter.spawn(SpawnSpec(target="not a reference"))
        with pytest.raises(InvalidValueError):
            await adapter.spawn(_spec("describe", {"bad": {1, 2}}))
        assert await adapter.list_live() == []

    async def test_unknown_handles_are_not_found(self, adapter: SubprocessAdapter) -> None:
        assert await adapter.reattach("spawn_never_started") is None
        assert await adapter.list_live() == []

    async def test_children_run_side_by_side(self, adapter: SubprocessAdapter) -> None:
        handles = [await adapter.spawn(_spec("ticker", {"count": n})) for n in range(1, 6)]
        results = await asyncio.gather(*(handle.wait() for handle in handles))
        assert results == [{"done": n} for n in range(1, 6)]

    async def test_a_running_child_is_live_and_a_new_host_finds_it_if_durable(
        self,
        adapter: SubprocessAdapter,
        reopen: Callable[[], SubprocessAdapter],
        durable: bool,
        tmp_path: Path,
    ) -> None:
        release = tmp_path / "release"
        starts = tmp_path / "starts"
        handle = await adapter.spawn(
            _spec(
                "hold",
                {"release": str(release), "starts": str(starts), "every": 0.005},
                execution_id="exec_parent",
            )
        )
        seen = [entry async for entry in _take(handle, 5)]
        assert [frame for _, frame in seen] == [{"i": index} for index in range(5)]
        live = [found.handle_id for found in await adapter.list_live()]
        assert live == ([handle.handle_id] if durable else [])

        other = reopen()
        found = await other.reattach(handle.handle_id)
        if not durable:
            assert found is None
            assert await other.list_live() == []
            release.touch()
            ended: Any = await handle.wait()
            assert ended["emitted"] >= 5
            return
        assert found is not None
        assert found.execution_id == "exec_parent"
        assert [live.handle_id for live in await other.list_live()] == [handle.handle_id]
        # The new host's stream carries on after the frames the old one acked: the one
        # it was handling when it stopped (i=4, delivered, never acked) comes again.
        more = [entry async for entry in _take(found, 5)]
        assert [frame for _, frame in more] == [{"i": index} for index in range(4, 9)]
        assert more[0][0] == seen[-1][0]
        release.touch()
        result: Any = await found.wait()
        assert result["emitted"] >= 9
        assert starts.read_text().count("\n") == 1  # one child, found again
        await _eventually(lambda: _none_live(other))


async def _take(handle: SubprocessHandle, count: int) -> Any:
    """The next ``count`` frames; the last one is left unacked, as a reader that stops."""
    taken = 0
    stream: Any = handle.frames()  # an async generator, closed when the reader stops
    async with contextlib.aclosing(stream) as frames:
        async for entry in frames:
            yield entry
            taken += 1
            if taken == count:
                break


async def _settles(handle: SubprocessHandle) -> bool:
    await _eventually(lambda: _dead(handle))
    return True


async def _dead(handle: SubprocessHandle) -> bool:
    return not handle.is_alive()


async def _none_live(adapter: SubprocessAdapter) -> bool:
    return await adapter.list_live() == []
