"""Durable IPC frames per second against a plain send loop over the same kind of Unix socket.

Run: ``python -m bench.ipc [--rounds 7] [--frames 200] [--dir PATH] [--no-file]``

A durable frame is the whole path: ``DurableServer.publish`` (the frame and the queue's
meta written to storage), the ``durable`` frame sent over a Unix socket, the client
persisting its ack in its own store and sending ``durableAck``, and the server acking
the queue (its meta written, the frame deleted). A round publishes ``--frames`` frames
back to back while the client consumes and acks each one; it ends when the queue is
acked through the last (``frames / elapsed`` is the figure).

The baseline is what a careful hand-written, non-durable sender does with the standard
library: one asyncio Unix-socket connection, each frame ``json.dumps``-ed and written
with a 4-byte length prefix, ``drain()`` after each; the receiver reads the prefix and
the body and ``json.loads`` it. Its round ends when the receiver has every frame.

Durable cases: the queue and the client's ack store on SQLite (the embedded default,
``synchronous=FULL``: every commit fsynced), on SQLite with ``synchronous=NORMAL``, on
the file store (temp file, fsync, rename, fsync dir per write), and in memory (no
storage cost: what the protocol itself costs). All run in one process, interleaved
round by round (baseline, durable cases, baseline, ...) so that disk and CPU noise hit
them alike; the table shows medians and the ratio baseline / case (how many times
slower). Files live under ``--dir`` (default: ``.bench-data/`` in the repository, on
the real disk, never tmpfs); the sockets in a short directory under ``/tmp``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from little_workflow.platform.ipc import (
    DurableClient,
    DurableServer,
    IpcAddress,
    create_durable_outbound_queue,
)
from little_workflow.storage import ManagedStorage, create_file_storage, open_storage

FRAME = json.dumps(
    {
        "type": "emit",
        "frame": {
            "kind": "model.delta",
            "executionId": "exec_01hx3k9r2m",
            "stepPath": "review-candidates[cand_123].worker",
            "text": "The candidate's answer covers the edge cases but " * 2,
        },
    }
)


class Plain:
    """The baseline: length-prefixed JSON over an asyncio Unix socket, nothing persisted."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.received = 0
        self.target = 0
        self.done = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_unix_server(self._serve, path=self.path)
        _reader, self.writer = await asyncio.open_unix_connection(self.path)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header = await reader.readexactly(4)
                body = await reader.readexactly(int.from_bytes(header, "big"))
                json.loads(body)
                self.received += 1
                if self.received >= self.target:
                    self.done.set()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    async def round(self, frames: int) -> float:
        assert self.writer is not None
        self.done.clear()
        self.target = self.received + frames
        start = time.perf_counter()
        for _ in range(frames):
            body = json.dumps({"type": "message", "payload": FRAME}).encode()
            self.writer.write(len(body).to_bytes(4, "big") + body)
            await self.writer.drain()
        await self.done.wait()
        return frames / (time.perf_counter() - start)

    async def close(self) -> None:
        assert self.writer is not None
        assert self.server is not None
        self.writer.close()
        await self.writer.wait_closed()
        self.server.close()
        await self.server.wait_closed()


class Durable:
    """``DurableServer`` + ``DurableClient`` on one storage kind, acking every frame."""

    def __init__(self, path: str, open_store: Callable[[str], Awaitable[ManagedStorage]]) -> None:
        self.path = path
        self.open_store = open_store
        self.stores: list[ManagedStorage] = []

    async def start(self) -> None:
        queue_store = await self.open_store("queue")
        ack_store = await self.open_store("acks")
        self.stores = [queue_store, ack_store]
        self.queue = await create_durable_outbound_queue(storage=queue_store, socket_path=self.path)
        self.target = 0
        self.done = asyncio.Event()
        ack_up_to = self.queue.ack_up_to

        async def ack_and_tell(seq: int) -> None:  # the round ends at the server's last ack
            await ack_up_to(seq)
            if self.queue.acked_through >= self.target:
                self.done.set()

        self.queue.ack_up_to = ack_and_tell  # type: ignore[method-assign]
        self.server = DurableServer(self.queue, IpcAddress.unix(self.path))
        await self.server.start()
        self.client = DurableClient(self.server.address, ack_store=ack_store, client_id="bench")
        await self.client.connect()
        self.consumer = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        async for frame in self.client.frames():
            assert frame.seq is not None
            await self.client.ack(frame.seq)

    async def round(self, frames: int) -> float:
        self.done.clear()
        self.target = self.queue.last_seq + frames
        start = time.perf_counter()
        for _ in range(frames):
            await self.server.publish(FRAME)
        await self.done.wait()
        return frames / (time.perf_counter() - start)

    async def close(self) -> None:
        await self.client.close()
        await self.consumer
        await self.server.close()
        for store in self.stores:
            await store.close()


def _sqlite(folder: Path, synchronous: str) -> Callable[[str], Awaitable[ManagedStorage]]:
    async def open_store(name: str) -> ManagedStorage:
        return await open_storage(
            f"sqlite:///{folder}/{name}-{synchronous.lower()}.db?synchronous={synchronous}"
        )

    return open_store


def _file(folder: Path) -> Callable[[str], Awaitable[ManagedStorage]]:
    async def open_store(name: str) -> ManagedStorage:
        return create_file_storage(root=folder / f"{name}-file")

    return open_store


async def _memory(name: str) -> ManagedStorage:
    return await open_storage("memory:")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--frames", type=int, default=200, help="frames per round")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-file", action="store_true", help="skip the file store case")
    args = parser.parse_args()
    base = args.dir or Path(__file__).resolve().parent.parent / ".bench-data"
    base.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="ipc-", dir=base))
    sockets = Path(tempfile.mkdtemp(prefix="lwb", dir="/tmp"))  # sun_path is 107 bytes

    cases: dict[str, Plain | Durable] = {
        "plain send loop (baseline)": Plain(str(sockets / "plain")),
        "durable, memory": Durable(str(sockets / "mem"), _memory),
        "durable, SQLite FULL": Durable(str(sockets / "full"), _sqlite(folder, "FULL")),
        "durable, SQLite NORMAL": Durable(str(sockets / "normal"), _sqlite(folder, "NORMAL")),
    }
    if not args.no_file:
        cases["durable, file store"] = Durable(str(sockets / "file"), _file(folder))
    try:
        for case in cases.values():
            await case.start()
            await case.round(min(args.frames, 50))  # warm-up: caches, files, statements
        results: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.rounds):
            for name, case in cases.items():
                results[name].append(await case.round(args.frames))
        baseline = statistics.median(results["plain send loop (baseline)"])
        print(
            f"Durable IPC over a Unix socket: {args.frames} frames of {len(FRAME)} bytes per "
            f"round, {args.rounds} interleaved rounds, medians"
        )
        print(f"{'case':<30}{'frames/s':>12}{'µs/frame':>11}{'baseline/case':>15}")
        for name, figures in results.items():
            fps = statistics.median(figures)
            print(f"{name:<30}{fps:>12,.0f}{1e6 / fps:>11.1f}{baseline / fps:>15.1f}")
    finally:
        for case in cases.values():
            await case.close()
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
