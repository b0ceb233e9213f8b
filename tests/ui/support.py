"""Helpers for the UI tests: the app on a real data directory, driven through httpx."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx

from little_workflow.ui import create_app
from tests.runtime.support import cli_popen


@contextlib.asynccontextmanager
async def client(
    data_dir: Path, *, token: str | None = None, base_url: str = "http://127.0.0.1:8765"
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the UI app for ``data_dir``, with the app's lifespan running."""
    app = create_app(data_dir, token=token, poll_interval=0.01)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=base_url, follow_redirects=False
        ) as http,
    ):
        yield http


@contextlib.contextmanager
def ui_server(data_dir: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``little-workflow ui --port 0 ARGS`` in another process, and the line it printed.

    The server prints its URL once its socket listens, so it can be used at once; it is
    stopped with SIGTERM afterwards.
    """
    process = cli_popen(data_dir, "ui", "--port", "0", *args)
    try:
        assert process.stdout is not None
        yield process, process.stdout.readline()
    finally:
        process.terminate()
        process.communicate(timeout=30)


def sse(text: str) -> list[tuple[str, int | None, Any]]:
    """A server-sent event stream as ``(event, id, data)`` triples (comments dropped)."""
    messages = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            fields[name] = value
        if "event" in fields:
            ident = int(fields["id"]) if "id" in fields else None
            messages.append((fields["event"], ident, json.loads(fields["data"])))
    return messages
