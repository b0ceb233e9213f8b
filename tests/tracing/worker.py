"""A worker process with tracing on, exporting each ended span to a file.

``python -m tests.tracing.worker <data dir> <spans file> <run id>``: works (two runs at
a time) until run ``<run id>`` is finished, then stops.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from little_workflow.runtime import Runtime, Worker
from tests.tracing.child import FileExporter


async def main(data: Path, spans: Path, run_id: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(spans)))
    trace.set_tracer_provider(provider)
    async with Runtime(data) as rt:
        worker = Worker(rt, concurrency=2, lease_seconds=30, poll_interval=0.02)
        working = asyncio.create_task(worker.run())
        while not (await rt.get_state(run_id)).finished:  # noqa: ASYNC110 (another task writes it)
            await asyncio.sleep(0.05)
        worker.stop()
        await working


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
