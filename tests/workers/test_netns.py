"""Workers as separate hosts: each in its own network namespace, one link cut mid-run.

Three ``little-workflow worker`` processes run under ``ip netns exec``, each in a network
namespace of its own, joined to this host by a veth pair with a /30 of a private /24.
PostgreSQL listens on 127.0.0.1 only, and a namespace has a loopback of its own, so the
test runs a small TCP forwarder (a thread of this process) listening on the host end of
every link and relaying to the server: a worker's every connection crosses its link.

Once one worker holds runs with steps in flight, its link is cut (``ip link set ... down``
on the host end: packets are dropped and nobody is told, like a pulled cable) for longer
than its lease, then restored. The others take its runs over; once the link is back its
pending writes reach the server and are refused, it drops every run it held (its report
counts the lost leases), and it claims and completes runs submitted after the cut. Every
run completes once with the right output, with the assertions of
``test_worker_processes``; the worker's sockets carry the store's TCP keepalive settings.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pytest

from little_workflow.events import StepCompleted
from little_workflow.runtime import Runtime
from tests.workers.support import REPO, held_by, wait_for, worker_command

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]

FLOW = Path(__file__).with_name("fanout.yaml")
LEASE = 2.0
CUT_SECONDS = 5.0  # longer than the lease: the cut worker's leases lapse meanwhile
CONCURRENCY = 3
BRANCHES = 4  # the map's concurrency: steps one run may have in flight
RUNS = 40  # submitted first
LATER_RUNS = 60  # submitted once the link is back: work for the cut worker
WORKERS = ("w_cut", "w_a", "w_b")

T = TypeVar("T")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


class Forwarder:
    """TCP relays to one target, each listening on an address of this host.

    Runs its own event loop in a thread, so it keeps relaying whatever the test's loop is
    doing (waiting on a process, say). Counts the connections each listener accepted.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self._target = target
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._servers: list[asyncio.Server] = []
        self._writers: set[asyncio.StreamWriter] = set()
        self.accepted: collections.Counter[str] = collections.Counter()
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=10)

    def listen(self, host: str) -> int:
        """Listen on ``host`` (a free port); the port."""

        async def start() -> int:
            server = await asyncio.start_server(
                lambda r, w: self._relay(host, r, w), host=host, port=0
            )
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        return self._call(start())

    async def _relay(
        self, host: str, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        self.accepted[host] += 1
        self._writers.add(client_w)
        try:
            server_r, server_w = await asyncio.open_connection(*self._target)
        except OSError:
            client_w.close()
            self._writers.discard(client_w)
            return
        self._writers.add(server_w)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
                if sink.can_write_eof():
                    sink.write_eof()
            except OSError:
                pass

        try:
            await asyncio.gather(pump(client_r, server_w), pump(server_r, client_w))
        finally:
            for writer in (client_w, server_w):
                writer.close()
                self._writers.discard(writer)

    def close(self) -> None:
        async def stop() -> None:
            for server in self._servers:
                server.close()
            for writer in list(self._writers):
                writer.close()
            relays = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in relays:
                task.cancel()
            await asyncio.gather(*relays, return_exceptions=True)

        try:
            self._call(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()


@dataclass(frozen=True, slots=True)
class Link:
    """A namespace and the veth pair joining it to the host: ``host_if`` has ``host_addr``."""

    netns: str
    host_if: str
    ns_if: str
    host_addr: str
    ns_addr: str


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no address of this host is in (another run may hold one)."""
    shown = _ip("-o", "-4", "addr").stdout
    used = [ipaddress.ip_interface(m) for m in re.findall(r"inet (\S+)", shown)]
    while True:
        net = ipaddress.ip_network(f"10.{random.randint(64, 250)}.{random.randint(0, 255)}.0/24")
        if not any(iface.network.overlaps(net) for iface in used):
            return net


@pytest.fixture
def links() -> Iterator[list[Link]]:
    """One namespace per worker, each with a veth pair to the host; removed afterwards."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2's ip is not installed")
    prefix = f"lw{secrets.token_hex(3)}"
    probe = _ip("netns", "add", f"{prefix}-probe", check=False)
    if probe.returncode != 0:
        pytest.skip(f"ip netns add is not permitted here: {probe.stderr.strip()}")
    _ip("netns", "del", f"{prefix}-probe", check=False)
    subnet = _free_subnet()
    made: list[Link] = []
    try:
        for index in range(len(WORKERS)):
            base = subnet.network_address + 4 * index
            link = Link(
                netns=f"{prefix}-{index}",
                host_if=f"{prefix}h{index}",
                ns_if=f"{prefix}n{index}",
                host_addr=str(base + 1),
                ns_addr=str(base + 2),
            )
            made.append(link)
            _ip("netns", "add", link.netns)
            _ip("link", "add", link.host_if, "type", "veth", "peer", "name", link.ns_if)
            _ip("link", "set", link.ns_if, "netns", link.netns)
            _ip("addr", "add", f"{link.host_addr}/30", "dev", link.host_if)
            _ip("link", "set", link.host_if, "up")
            _ip("-n", link.netns, "addr", "add", f"{link.ns_addr}/30", "dev", link.ns_if)
            _ip("-n", link.netns, "link", "set", link.ns_if, "up")
            _ip("-n", link.netns, "link", "set", "lo", "up")
        yield made
    finally:
        for link in made:
            _ip("link", "del", link.host_if, check=False)  # takes its peer along
            _ip("netns", "del", link.netns, check=False)


def _keepalive_timers(netns: str) -> list[float]:
    """Seconds left on the keepalive timer of each idle TCP connection in ``netns``."""
    shown = _ip("netns", "exec", netns, "ss", "-tno", "state", "established").stdout
    unit = {"ms": 0.001, "sec": 1.0, "min": 60.0}
    return [
        float(value) * unit[suffix]
        for value, suffix in re.findall(r"timer:\(keepalive,([\d.]+)(ms|sec|min),", shown)
    ]


def _connect_error(netns: str, host: str, port: int) -> str:
    """The error's name when a process in ``netns`` connects to ``host:port`` (or "")."""
    script = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(({host!r}, {port}), 2)\n"
        "except OSError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    shown = subprocess.run(
        ["ip", "netns", "exec", netns, sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return shown.stdout.strip()


def _via(url: str, host: str, port: int) -> str:
    """``url`` with its host and port replaced (user, database and query kept)."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    netloc = f"{user}@{host}:{port}" if user else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


def _start_worker(
    link: Link, store: str, data_dir: Path, worker_id: str, env: dict[str, str], stderr: IO[bytes]
) -> subprocess.Popen[bytes]:
    # ip netns exec enters the namespace and execs the command: the pid is the worker's.
    return subprocess.Popen(
        [
            "ip", "netns", "exec", link.netns,
            *worker_command(store, data_dir, worker_id, concurrency=CONCURRENCY, lease=LEASE),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )  # fmt: skip


async def test_runs_survive_a_worker_cut_off_from_the_database(
    postgres_url: str, tmp_path: Path, links: list[Link]
) -> None:
    target = urlsplit(postgres_url)
    assert target.hostname is not None
    forwarder = Forwarder((target.hostname, target.port or 5432))
    link_of = dict(zip(WORKERS, links, strict=True))
    calls = tmp_path / "calls.txt"
    env = {
        **os.environ,
        "LW_TEST_CALLS": str(calls),
        "LW_TEST_STEP_SECONDS": "0.15",
        "PYTHONPATH": str(REPO),
    }
    inputs = {f"run_{index:03d}": [index, index + 1, index + 2, index + 3] for index in range(RUNS)}
    later = {
        f"later_{index:03d}": [index, index + 1, index + 2, index + 3]
        for index in range(LATER_RUNS)
    }
    workers: dict[str, subprocess.Popen[bytes]] = {}
    logs = {name: tmp_path / f"{name}.stderr" for name in WORKERS}
    cut = link_of["w_cut"]
    try:
        # Inside a namespace 127.0.0.1 is its own loopback: the server is not there.
        assert (
            _connect_error(cut.netns, "127.0.0.1", target.port or 5432) == "ConnectionRefusedError"
        )
        async with Runtime(tmp_path / "submitter", store=postgres_url) as runtime:
            for run_id, items in inputs.items():
                await runtime.submit(FLOW, {"items": items}, run_id=run_id)
            for name, link in link_of.items():
                store = _via(postgres_url, link.host_addr, forwarder.listen(link.host_addr))
                with logs[name].open("wb") as stderr:
                    workers[name] = _start_worker(link, store, tmp_path / name, name, env, stderr)

            async def holding() -> bool:
                return len(await held_by(runtime, "w_cut")) == CONCURRENCY and calls.exists()

            await wait_for(holding, 30)
            _ip("link", "set", cut.host_if, "down")
            cut_at = time.monotonic()
            # What it holds as seen from here (the host's own link to the server is
            # untouched); it can neither finish nor renew these now.
            cut_runs = await held_by(runtime, "w_cut")
            assert cut_runs

            async def taken_over() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in cut_runs]
                return all(
                    entry is not None and (entry.state == "done" or entry.worker_id != "w_cut")
                    for entry in entries
                )

            taken_at = await wait_for(taken_over, 30)
            await asyncio.sleep(max(0.0, cut_at + CUT_SECONDS - time.monotonic()))
            _ip("link", "set", cut.host_if, "up")
            restored_at = time.monotonic()

            async def noticed() -> bool:
                text = logs["w_cut"].read_text()
                return "lost the lease" in text or "lapsed" in text

            # The cut worker does not hang on its dead connections: once the link is
            # back, its pending writes reach the server and are refused.
            noticed_at = await wait_for(noticed, 30)

            for run_id, items in later.items():
                await runtime.submit(FLOW, {"items": items}, run_id=run_id)
            inputs.update(later)

            async def back_to_work() -> bool:
                held = await held_by(runtime, "w_cut")
                return len(held) == CONCURRENCY and set(held) <= set(later)

            # All its slots free again (every run it held when cut off dropped, its
            # tasks ended) and filled with new claims: it reconnected and works on.
            back_at = await wait_for(back_to_work, 30)

            # The store's TCP settings reach the worker's sockets: keepalive probes after
            # seconds of silence, not the OS's two hours (a partition that never heals
            # still ends its waits; see DEFAULT_TCP_SETTINGS).
            timers: list[float] = []
            for _ in range(40):  # a connection busy this instant shows another timer
                timers = _keepalive_timers(cut.netns)
                if timers:
                    break
                await asyncio.sleep(0.05)
            assert timers, "no keepalive timer on the worker's connections"
            assert max(timers) <= 10.0, timers

            async def all_done() -> bool:
                entries = [await runtime.queue.get(run_id) for run_id in inputs]
                return all(entry is not None and entry.state == "done" for entry in entries)

            await wait_for(all_done, 40)
            for process in workers.values():
                process.send_signal(signal.SIGTERM)
            for process in workers.values():
                await asyncio.to_thread(process.wait, 30)
            reports = {name: path.read_text() for name, path in logs.items()}
            for name, process in workers.items():
                assert process.returncode == 0, reports[name]
            found = re.search(r"stopped: .*; (\d+) lease\(s\) lost", reports["w_cut"])
            assert found is not None, reports["w_cut"]
            lost = int(found.group(1))
            # Every run it held when cut off was taken over: it lost each of those
            # leases, at its next write (refused) or renewal, and wrote nothing after.
            assert lost >= len(cut_runs), reports["w_cut"]
            # ... and completed runs of its own once the link was back.
            assert re.search(r"stopped: [1-9]\d* completed", reports["w_cut"]), reports["w_cut"]
            # Every worker reached the server through its own link only.
            for link in links:
                assert forwarder.accepted[link.host_addr] > 0

            step_paths: dict[str, list[str]] = {}
            for run_id, items in inputs.items():
                state = await runtime.get_state(run_id)
                assert state.output == sum(item * item for item in items), run_id
                entry = await runtime.queue.get(run_id)
                assert entry is not None
                assert entry.outcome == "completed"
                completed = [
                    record.event.step_path
                    for record in await runtime.events.read(run_id)
                    if isinstance(record.event, StepCompleted)
                ]
                assert len(completed) == len(set(completed)) == len(items) + 2, run_id
                step_paths[run_id] = [path for path in completed if path != "fan"]
    finally:
        for process in workers.values():
            if process.poll() is None:
                process.kill()
                process.wait(10)
        forwarder.close()

    counted = collections.Counter(calls.read_text().splitlines())
    expected = {f"{run_id}/{path}" for run_id, paths in step_paths.items() for path in paths}
    assert set(counted) == expected
    # Only steps in flight on the cut worker ran a second time.
    twice = [call for call, times in counted.items() if times > 1]
    print(
        f"cut worker held {len(cut_runs)} run(s), lost {lost} lease(s); taken over "
        f"{taken_at - cut_at:.1f} s after the cut, link restored after "
        f"{restored_at - cut_at:.1f} s, lease loss noticed {noticed_at - restored_at:.1f} s "
        f"and new runs held again {back_at - restored_at:.1f} s after; "
        f"{len(twice)} step call(s) ran twice of {sum(counted.values())}"
    )
    assert all(counted[call] == 2 for call in twice)
    assert len(twice) <= CONCURRENCY * BRANCHES, json.dumps(twice)
