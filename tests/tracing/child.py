"""A process that drives a run with tracing on, exporting each ended span to a file.

``python -m tests.tracing.child <data dir> <spans file> run|resume``: one JSON line per
span, written as it ends, so a process SIGKILLed mid-run leaves the spans it finished.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from little_workflow.runtime import Runtime
from tests.tracing.flows import chain

RUN_ID = "run_traced"


class FileExporter(SpanExporter):
    """Appends each span, as JSON, to a file (flushed at once: the process may be killed)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self.path.open("a", encoding="utf-8") as handle:
            for span in spans:
                context = span.get_span_context()
                assert context is not None
                record = {
                    "name": span.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent": None if span.parent is None else f"{span.parent.span_id:016x}",
                    "attributes": dict(span.attributes or {}),
                    "events": [
                        {"name": e.name, "attributes": dict(e.attributes or {})}
                        for e in span.events
                    ],
                }
                handle.write(json.dumps(record) + "\n")
        return SpanExportResult.SUCCESS


async def main(data: Path, spans: Path, mode: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(spans)))
    trace.set_tracer_provider(provider)
    async with Runtime(data) as rt:
        if mode == "run":
            result = await rt.run(chain, {"n": 1}, run_id=RUN_ID)
        else:
            result = await rt.resume(RUN_ID)
    print(json.dumps(result.output))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
