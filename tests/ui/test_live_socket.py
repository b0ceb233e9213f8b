"""The live-answer channel itself: ``_live.LiveRelay`` (the driver's side) and
``ui._live.LiveWatch`` (a run page's socket), over real Unix datagram sockets.

A run nobody watches must make its calls whole and touch nothing; a watcher must get
every delta, in order, joining to the committed answers, whether its socket sits in the
data directory or (a long path) in the short temp directory; a socket nobody holds is
unlinked; a receiver that does not read makes the sender drop and count, never wait;
and nothing a hostile sender writes gets past the watch.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from little_workflow._deltas import DeltaHub, DeltaRoute, RunDelta
from little_workflow._live import LIVE_DIR, MAX_DATAGRAM, LiveRelay, entry_prefix
from little_workflow.events import HarnessModelResponded
from little_workflow.harness.models import ModelDelta, ModelResponse
from little_workflow.runtime import Runtime
from little_workflow.ui._live import LiveWatch, remove_own
from tests.runtime.agent_flows import ORCHESTRATE
from tests.runtime.session_support import ADA, make
from tests.runtime.test_deltas import CountingProvider


@pytest.fixture(params=["short", "long"])
def data_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A data directory whose socket paths fit in ``sun_path``, and one whose do not."""
    if request.param == "long":
        yield tmp_path / ("d" * 80)
        return
    with tempfile.TemporaryDirectory(prefix="lw", dir="/tmp") as short:
        yield Path(short) / "data"


@pytest.fixture
def short() -> Iterator[Path]:
    """A data directory whose socket paths fit (``tmp_path``'s may not)."""
    with tempfile.TemporaryDirectory(prefix="lw", dir="/tmp") as parent:
        yield Path(parent) / "data"


def _delta(run_id: str, text: str, *, attempt: int = 1) -> RunDelta:
    return RunDelta(
        run_id=run_id,
        lineage=(run_id,),
        path="agent.turns[0].model",
        slot="default",
        attempt=attempt,
        delta=ModelDelta(kind="text", text=text),
    )


async def _answers(rt: Runtime, run_id: str) -> dict[str, str]:
    return {
        r.event.call_id: ModelResponse.model_validate(r.event.response).message.text or ""
        for r in await rt.events.read(run_id)
        if isinstance(r.event, HarnessModelResponded)
    }


async def test_a_run_nobody_watches_streams_nothing_and_touches_nothing(tmp_path: Path) -> None:
    provider = CountingProvider()
    rt, _, _ = make(tmp_path / "data", provider=provider)
    async with rt:
        await rt.run(ORCHESTRATE, ADA, run_id="run_n")
        relay = rt.delta_hub.relay
        assert isinstance(relay, LiveRelay)
        assert relay.outlet(("run_n",)) is None
    assert provider.calls > 0
    assert provider.streams == 0
    assert not (tmp_path / "data" / LIVE_DIR).exists()
    assert relay._socket is None  # never made: nothing was sent
    # An empty sockets directory, or one watching other runs, is no watcher either.
    (tmp_path / "data" / LIVE_DIR).mkdir(mode=0o700)
    assert relay.outlet(("run_n",)) is None
    route = DeltaRoute(DeltaHub(relay=relay), ("run_n",))
    assert route.sink("agent.turns[0].model", "default") is None


async def test_a_watcher_gets_every_delta_in_order(data_dir: Path) -> None:
    provider = CountingProvider()
    rt, _, _ = make(data_dir, provider=provider)
    async with rt:
        watch = LiveWatch(data_dir, "run_w")
        assert watch.open()
        try:
            entries = os.listdir(data_dir / LIVE_DIR)
            assert [name.startswith(entry_prefix("run_w")) for name in entries] == [True]
            entry = data_dir / LIVE_DIR / entries[0]
            # A path past the 107 bytes of sun_path is a symlink to a short socket.
            assert entry.is_symlink() == (len(os.fsencode(entry)) > 107)
            await rt.run(ORCHESTRATE, ADA, run_id="run_w")
            batches = watch.take()
            sub_runs = sorted({b["runId"] for b in batches} - {"run_w"})
            answers = {("run_w", p): t for p, t in (await _answers(rt, "run_w")).items() if t}
            for run in sub_runs:
                answers |= {(run, p): t for p, t in (await _answers(rt, run)).items() if t}
        finally:
            watch.close()
        assert not os.listdir(data_dir / LIVE_DIR)  # closed: the entry and socket are gone
    assert provider.streams == provider.calls > 0
    assert len(sub_runs) == 1  # the orchestrator's sub-run streams to the root's page
    assert watch.rejected == watch.dropped == 0
    texts: dict[tuple[str, str], str] = defaultdict(str)
    seqs: dict[tuple[str, str], list[int]] = defaultdict(list)
    for batch in batches:
        assert batch["attempt"] == 1
        seqs[batch["runId"], batch["path"]].append(batch["seq"])
        for piece in batch["deltas"]:
            if piece["kind"] == "text":
                texts[batch["runId"], batch["path"]] += piece["text"]
    assert dict(texts) == answers
    assert all(found == list(range(len(found))) for found in seqs.values())


def _stale_entry(data_dir: Path, run_id: str, *, symlink: bool) -> Path:
    """An entry left by a UI that was killed: its socket file, bound by nobody now."""
    live = data_dir / LIVE_DIR
    live.mkdir(parents=True, mode=0o700)
    entry = live / f"{entry_prefix(run_id)}99999.1"
    target = entry
    if symlink:
        elsewhere = data_dir.parent / "elsewhere"
        elsewhere.mkdir(mode=0o700)
        target = elsewhere / "sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as dead:
        dead.bind(os.fspath(target))
    if symlink:
        entry.symlink_to(target)
    return entry


@pytest.mark.parametrize("symlink", [False, True], ids=["socket", "symlink"])
async def test_a_stale_socket_is_unlinked(short: Path, symlink: bool) -> None:
    data_dir = short
    entry = _stale_entry(data_dir, "run_s", symlink=symlink)
    target = entry.resolve()
    relay = LiveRelay(data_dir)
    try:
        outlet = relay.outlet(("run_s",))
        assert outlet is not None
        outlet.send(_delta("run_s", "hello"))
        outlet.end()
    finally:
        relay.close()
    assert relay.unlinked == 1
    assert relay.dropped == relay.failed == 0
    assert not entry.is_symlink()
    assert not entry.exists()
    assert not target.exists()
    assert relay.outlet(("run_s",)) is None


async def test_a_symlink_to_what_is_not_a_socket_loses_only_the_symlink(short: Path) -> None:
    live = short / LIVE_DIR
    live.mkdir(parents=True, mode=0o700)
    precious = short.parent / "private" / "key"
    precious.parent.mkdir(mode=0o700)
    precious.write_text("keep me")
    entry = live / f"{entry_prefix('run_k')}99999.1"
    entry.symlink_to(precious)
    relay = LiveRelay(short)
    try:
        outlet = relay.outlet(("run_k",))
        assert outlet is not None
        outlet.send(_delta("run_k", "hello"))
        outlet.end()
    finally:
        relay.close()
    assert relay.unlinked == 1
    assert not entry.is_symlink()
    assert precious.read_text() == "keep me"


async def test_a_run_goes_on_past_a_stale_socket(short: Path) -> None:
    data_dir = short
    provider = CountingProvider()
    entry = _stale_entry(data_dir, "run_g", symlink=False)
    rt, _, _ = make(data_dir, provider=provider)
    async with rt:
        await rt.run(ORCHESTRATE, ADA, run_id="run_g")
        status = (await rt.events.get_run("run_g")).status  # type: ignore[union-attr]
    assert status is not None
    assert status.value == "completed"
    assert not entry.exists()
    assert provider.streams >= 1  # the first call saw the entry, streamed, and dropped it


async def test_a_full_receiver_drops_and_counts(short: Path) -> None:
    data_dir = short
    live = data_dir / LIVE_DIR
    live.mkdir(parents=True, mode=0o700)
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(os.fspath(live / f"{entry_prefix('run_f')}99999.1"))
    relay = LiveRelay(data_dir)
    sent = 200
    try:
        outlet = relay.outlet(("run_f",))
        assert outlet is not None
        for n in range(sent):  # never read meanwhile: the queue fills, nothing waits
            outlet.send(_delta("run_f", f"piece {n} "))
            outlet.end()
        receiver.setblocking(False)
        received = []
        while True:
            try:
                received.append(json.loads(receiver.recv(MAX_DATAGRAM)))
            except BlockingIOError:
                break
    finally:
        relay.close()
        receiver.close()
    assert relay.dropped > 0
    assert len(received) + relay.dropped == sent
    # What arrived is in order; the numbering shows the gap to a page.
    assert [item["seq"] for item in received] == list(range(len(received)))
    assert relay.unlinked == relay.failed == 0


async def test_a_busy_page_gets_what_was_held_for_it_with_the_next_batch(short: Path) -> None:
    live = short / LIVE_DIR
    live.mkdir(parents=True, mode=0o700)
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(os.fspath(live / f"{entry_prefix('run_b')}99999.1"))
    receiver.setblocking(False)
    relay = LiveRelay(short)
    texts = [f"piece {n} " for n in range(100)]

    def drain() -> list[dict[str, object]]:
        found = []
        while True:
            try:
                found.append(json.loads(receiver.recv(MAX_DATAGRAM)))
            except BlockingIOError:
                return found

    try:
        outlet = relay.outlet(("run_b",))
        assert outlet is not None
        for text in texts[:-1]:  # one batch each (as one event-loop turn each would)
            outlet.send(_delta("run_b", text))
            outlet.flush()
        received = drain()  # the page reads again, at last
        outlet.send(_delta("run_b", texts[-1]))
        outlet.end()
        received += drain()
    finally:
        relay.close()
        receiver.close()
    assert relay.dropped == 0
    assert len(received) < len(texts)  # the queue was full: later batches were joined
    assert [item["seq"] for item in received] == list(range(len(received)))
    joined = "".join(p["text"] for item in received for p in item["deltas"])  # type: ignore[attr-defined]
    assert joined == "".join(texts)


async def test_a_long_answer_is_split_into_datagrams_that_fit(short: Path) -> None:
    data_dir = short
    watch = LiveWatch(data_dir, "run_l")
    assert watch.open()
    relay = LiveRelay(data_dir)
    text = "é" * (3 * MAX_DATAGRAM)
    try:
        outlet = relay.outlet(("run_l",))
        assert outlet is not None
        outlet.send(_delta("run_l", text))
        outlet.end()
        batches = watch.take()
    finally:
        relay.close()
        watch.close()
    assert len(batches) > 1
    assert watch.rejected == 0
    assert relay.dropped == 0
    assert "".join(b["deltas"][0]["text"] for b in batches) == text


async def test_hostile_datagrams_are_dropped_and_counted(short: Path) -> None:
    data_dir = short
    watch = LiveWatch(data_dir, "run_h")
    assert watch.open()
    relay = LiveRelay(data_dir)
    good = {"v": 1, "seq": 0, "runId": "run_h", "lineage": ["run_h"], "path": "p",
            "slot": "s", "attempt": 1, "deltas": [{"kind": "text", "text": "ok"}]}  # fmt: skip
    hostile = [
        b"",
        b"\xff\xfe not json",
        b"[" * 100_000 + b"]" * 100_000,  # too big, and too deep
        b"x" * (MAX_DATAGRAM + 10),
        json.dumps({**good, "v": 2}).encode(),
        json.dumps({**good, "runId": "run_other", "lineage": ["run_other"]}).encode(),
        json.dumps({**good, "lineage": ["run_h", "run_x"]}).encode(),  # not its own run
        json.dumps({**good, "attempt": 0}).encode(),
        json.dumps({**good, "seq": True}).encode(),
        json.dumps({**good, "deltas": [{"kind": "html", "text": "<b>"}]}).encode(),
        json.dumps({**good, "deltas": [{"kind": "text", "text": ["a"]}]}).encode(),
        json.dumps({**good, "deltas": []}).encode(),
        json.dumps({**good, "path": "p" * 2000}).encode(),
        json.dumps([good]).encode(),
    ]
    try:
        entry = next((data_dir / LIVE_DIR).iterdir())
        address = os.readlink(entry) if entry.is_symlink() else os.fspath(entry)
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            for data in hostile:
                try:
                    sender.sendto(data, address)
                except OSError:
                    watch.rejected += 1  # too big for the kernel: never reached the page
                taken = watch.take()
                assert taken == []
            sender.sendto(json.dumps(good).encode(), address)
            taken = watch.take()
    finally:
        relay.close()
        watch.close()
    assert watch.rejected == len(hostile)
    assert [batch["deltas"] for batch in taken] == [[{"kind": "text", "text": "ok"}]]


async def test_the_servers_own_leftovers_are_removed_at_exit(tmp_path: Path) -> None:
    data_dir = tmp_path / ("d" * 80)  # a symlink entry and its target, both removed
    watch = LiveWatch(data_dir, "run_e")
    assert watch.open()
    entry = next((data_dir / LIVE_DIR).iterdir())
    target = Path(os.readlink(entry))
    other = data_dir / LIVE_DIR / f"{entry_prefix('run_e')}1.1"
    other.touch()  # another process's: kept
    remove_own(data_dir)
    assert sorted((data_dir / LIVE_DIR).iterdir()) == [other]
    assert target.name not in os.listdir(target.parent)
    watch.close()  # after its files went: still fine


async def test_the_short_socket_directory_is_private_at_every_level(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fallback for a long data directory lives in $TMPDIR/little-workflow-<uid>/,
    # which the subprocess adapter shares and refuses when it is open to others.
    with tempfile.TemporaryDirectory(prefix="lw", dir="/tmp") as temp:
        monkeypatch.setattr(tempfile, "tempdir", temp)
        previous = os.umask(0o022)
        try:
            watch = LiveWatch(tmp_path / ("d" * 80), "run_p")
            assert watch.open()
            watch.close()
        finally:
            os.umask(previous)
        shared = Path(temp) / f"little-workflow-{os.getuid()}"
        levels = [shared, *(path for path in shared.rglob("*") if path.is_dir())]
        assert len(levels) == 2
        assert {path.stat().st_mode & 0o777 for path in levels} == {0o700}
